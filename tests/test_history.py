"""History fitting on real CANARD conversations."""

import pytest

from ragbudget.config import TrimConfig
from ragbudget.errors import QueryError
from ragbudget.eval.history_eval import as_messages, evaluate_history, load_canard
from ragbudget.budget.history import coerce_history, fit_history
from ragbudget.kernels.tokens import Tokenizer
from ragbudget.types import Message

TOK = Tokenizer()


@pytest.fixture(scope="module")
def canard(shared_data):
    p = shared_data / "canard" / "dev.json"
    if not p.is_file():
        pytest.skip(f"CANARD not found at {p}")
    return [r for r in load_canard(p) if len(r["History"]) >= 10][:150]


def test_coerce_accepts_messages_and_dicts_and_rejects_bad_shapes():
    assert coerce_history([{"role": "user", "content": "hi"}, Message("assistant", "yo")])[1].content == "yo"
    for bad in ("hello", {"role": "user"}, [("user", "hi")], [{"role": "bot", "content": "x"}],
                [{"role": "user", "content": b"x"}]):
        with pytest.raises(QueryError):
            coerce_history(bad)


def test_recent_turns_verbatim_older_compressed(canard):
    r = canard[0]
    msgs = as_messages(r["History"])
    res = fit_history(msgs, 60, TOK, TrimConfig(), query=r["Question"])
    assert res.used <= 60
    assert res.messages[-1] == msgs[-1]  # newest turn kept word for word
    assert res.compressed and res.messages[0].content.startswith("Earlier conversation")


def test_fits_whole_history_when_budget_allows(canard):
    msgs = as_messages(canard[1]["History"])
    assert fit_history(msgs, 10_000, TOK, TrimConfig()).messages == msgs
    assert fit_history(msgs, 0, TOK, TrimConfig()).messages == []


def test_summarize_hook_used_for_llm_compression(canard):
    msgs = as_messages(canard[2]["History"])
    calls = []

    def summarize(text, n):
        calls.append((text, n))
        return "SUMMARY " + text[:40]

    res = fit_history(msgs, 50, TOK, TrimConfig(history_compression="llm"), summarize=summarize)
    assert calls and res.messages[0].content.startswith("Earlier conversation (compressed): SUMMARY")
    assert res.used <= 50


def test_extractive_keeps_more_needed_information_than_recency_alone(canard):
    ext = evaluate_history(canard, [64], TOK, TrimConfig())[0]
    rec = evaluate_history(canard, [64], TOK, TrimConfig(history_compression="none"))[0]
    assert ext.turns == rec.turns > 50
    assert ext.needed_kept > rec.needed_kept

"""Follow-up questions: the retrieval query is condensed from the history (deterministic rewrite)."""

from __future__ import annotations

import pytest

from ragbudget.stages.condense import condense, condense_with_llm, needs_context
from ragbudget.config import Config
from ragbudget.errors import ConfigError
from ragbudget.eval.followups import followup_set
from ragbudget.eval.history_eval import load_canard
from ragbudget.types import Message
from fixtures_retrieval import DATA

CANARD = DATA / "canard"

HISTORY = [Message("system", "Frank Zappa — Disbandment"), Message("user", "What group disbanded?"),
           Message("assistant", "Zappa and the Mothers of Invention"), Message("user", "When did they disband?"),
           Message("assistant", "In late 1969, Zappa broke up the band.")]


def test_pronoun_question_gets_the_conversations_names() -> None:
    c = condense("Why did they break up?", HISTORY)
    assert c.changed and c.method == "deterministic"
    assert c.query.startswith("Why did they break up?")
    assert "Zappa" in c.query
    assert any("Mothers of Invention" in a for a in c.added) or "Frank Zappa" in c.query


def test_self_contained_question_is_unchanged() -> None:
    q = "Which record label released the first album of the Mothers of Invention in 1966?"
    assert not needs_context(q)
    assert condense(q, HISTORY).query == q
    assert condense("Why did they break up?", []).query == "Why did they break up?"


def test_llm_rewrite_falls_back_on_error_and_uses_a_good_answer() -> None:
    def broken(_: str) -> str:
        raise RuntimeError("server down")

    assert condense_with_llm("Why did they break up?", HISTORY, broken) == condense("Why did they break up?", HISTORY)
    good = condense_with_llm("Why did they break up?", HISTORY,
                             lambda _: "Why did Zappa and the Mothers of Invention break up?\n")
    assert good.query == "Why did Zappa and the Mothers of Invention break up?" and good.method == "llm"


def test_llm_condense_needs_a_model_tier() -> None:
    with pytest.raises(ConfigError, match="condense_tier"):
        Config().with_overrides({"retrieval.condense": "llm"})


def test_canard_followups_condensed_add_what_the_rewrite_adds(shared_data) -> None:
    """On real CANARD turns, the condensed query holds most of the words the human rewrite added."""
    recs = load_canard(CANARD, 400)
    _, qs = followup_set(recs)
    assert len(qs) > 100
    gained, total = 0, 0
    for q in qs:
        added = {w.lower() for w in q["gold"].split() if w[:1].isupper()} - {w.lower() for w in q["raw"].split()}
        if not added:
            continue
        total += 1
        cq = condense(q["raw"], q["history"]).query.lower()
        gained += any(w.strip("'s?,.") in cq for w in added)
    assert total > 50 and gained / total > 0.8

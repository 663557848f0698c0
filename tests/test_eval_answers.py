"""`ragbudget eval answers` on a real SQuAD subset (small, so the suite stays fast)."""

import json

import pytest

from ragbudget.cli import main
from ragbudget.config import load_config
from ragbudget.eval.answers import contains_answer, evaluate_answers
from ragbudget.retrieval.rerank import BiEncoderReranker


@pytest.fixture(scope="module")
def subset(shared_data, tmp_path_factory):
    src = shared_data / "eval" / "squad2"
    if not (src / "corpus.jsonl").is_file():
        pytest.skip(f"squad2 eval set not found at {src}")
    out = tmp_path_factory.mktemp("squad")
    corpus = (src / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:40]
    texts = [json.loads(c)["text"].lower() for c in corpus]
    qs = [json.loads(q) for q in (src / "questions.jsonl").read_text(encoding="utf-8").splitlines()]
    qs = [q for q in qs if any(a.lower() in t for t in texts for a in q["answers"])][:12]
    (out / "corpus.jsonl").write_text("\n".join(corpus) + "\n", encoding="utf-8")
    (out / "questions.jsonl").write_text("\n".join(json.dumps(q) for q in qs) + "\n", encoding="utf-8")
    return out


def test_contains_answer_case_insensitive():
    assert contains_answer("The RNA Interference pathway", ["rna interference"])
    assert not contains_answer("nothing", ["rna"])


def test_budgeted_beats_dense_topk_and_respects_budget(subset, embedder):
    cfg = load_config(None, environ={})
    rep = evaluate_answers(subset, cfg, embedder, BiEncoderReranker(embedder), [150, 400], candidates=10)
    by = {(r.method, r.budget): r for r in rep.results}
    for b in (150, 400):
        assert by[("budgeted", b)].questions == 12
        assert by[("budgeted", b)].context_tokens_p95 <= b
    # at a small budget both spend about the same: sentences find more answers than whole chunks
    assert by[("budgeted", 150)].answer_in_context >= by[("dense top-k", 150)].answer_in_context
    # a budget is a ceiling: at 400 the evidence stop spends under half of what whole chunks fill, and still
    # finds the answer nearly always
    assert by[("budgeted", 400)].context_tokens_mean <= 0.5 * by[("dense top-k", 400)].context_tokens_mean
    assert by[("budgeted", 400)].answer_in_context >= 0.8


def test_cli_json_last_line(subset, capsys, tmp_path):
    rc = main(["eval", "answers", str(subset), "--budget", "200", "--limit", "5", "--json", "--no-baseline",
               "--embedding-cache", str(tmp_path / "e.sqlite")])
    assert rc == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    obj = json.loads(last)
    assert {"answer_in_context", "context_tokens_mean", "context_tokens_p95", "questions"} <= set(obj)
    assert obj["questions"] == 5 and obj["context_tokens_p95"] <= 200

"""LlamaIndex default pipeline baseline (benchmarks/_baseline.py, the comparison of the headline and frugal
curve benchmarks) on small real subsets (SQuAD 2.0 sample, Cranfield), offline."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # the benchmark scripts' helpers
from _baseline import build_baseline, eval_answers, eval_retrieval, read_corpus  # noqa: E402

from ragbudget.eval.answers import contains_answer, load_questions
from ragbudget.eval.retrieval import load_beir
from ragbudget.kernels.tokens import Tokenizer


@pytest.fixture()
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any connection attempt to a non-loopback address fails the test (would be a download)."""
    real = socket.socket.connect

    def guarded(self, addr):  # noqa: ANN001
        host = addr[0] if isinstance(addr, tuple) else str(addr)
        if host not in ("127.0.0.1", "::1", "localhost") and not str(host).startswith("/"):
            raise AssertionError(f"network access to {addr!r}")
        return real(self, addr)

    monkeypatch.setattr(socket.socket, "connect", guarded)


def test_squad_subset(shared_data: Path, embedder, no_network) -> None:
    folder = shared_data / "eval" / "squad2"
    docs = read_corpus(folder / "corpus.jsonl", limit=40)
    texts = [d.text for d in docs]
    qs = [q for q in load_questions(folder) if any(contains_answer(t, q["answers"]) for t in texts)][:25]
    assert len(qs) >= 10
    base = build_baseline(docs, embedder)
    assert base.top_k == 2  # LlamaIndex's default similarity_top_k
    tok = Tokenizer()
    # 1024-token chunks: SQuAD paragraphs (< 1024 tokens) stay whole, one node per paragraph
    assert base.nodes == len(docs)
    got = base.retrieve(qs[0]["text"])
    assert len(got) == 2 and got[0][2] >= got[1][2] and got[0][0] in {d.id_ for d in docs}
    r = eval_answers(base, qs, tok)
    assert r["questions"] == len(qs) and 0.6 <= r["answer_in_context"] <= 1.0
    per_q = [tok.count(base.context(q["text"])) for q in qs]
    assert r["context_tokens_mean"] == round(sum(per_q) / len(per_q), 1)
    one = eval_answers(base, qs, tok, k=1)
    assert one["context_tokens_mean"] < r["context_tokens_mean"] and one["answer_in_context"] <= r["answer_in_context"]


def test_cranfield_subset(shared_data: Path, embedder, no_network) -> None:
    folder = shared_data / "eval" / "cranfield"
    docs = read_corpus(folder / "corpus.jsonl", limit=150)
    ids = {d.id_ for d in docs}
    beir = load_beir(folder)
    qrels = {q: {d: g for d, g in rel.items() if d in ids} for q, rel in beir.qrels.items()}
    queries = {q: beir.queries[q] for q, rel in qrels.items() if rel}
    assert len(queries) >= 5
    base = build_baseline(docs, embedder)
    r = eval_retrieval(base, queries, qrels, k=10)
    assert r["queries"] == len(queries) and 0.2 < r["ndcg@10"] <= 1.0
    # a query's own relevant document text as the query must rank it first
    qid = next(iter(queries))
    doc = next(d for d in docs if d.id_ in qrels[qid])
    assert base.retrieve(doc.text[:500], 10)[0][0] == doc.id_

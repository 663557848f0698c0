"""Fusion maths and hybrid retrieval on a real Cranfield subset (real FAISS, BM25 and MiniLM)."""

from __future__ import annotations

import asyncio

import pytest

from ragbudget.config import load_config
from ragbudget.errors import QueryError
from ragbudget.retrieval.fusion import minmax, ranks, rrf
from ragbudget.index import HybridIndex
from ragbudget.index.filters import parse_filters
from ragbudget.retrieval.search import HybridRetriever
from ragbudget.types import Document

from fixtures_retrieval import CountingEmbedder, cranfield_subset, real_embedder  # noqa: F401


def test_rrf_matches_hand_computed_scores() -> None:
    fused = rrf({"dense": ["a", "b", "c"], "sparse": ["c", "a"]}, {"dense": 1.0, "sparse": 0.5}, k=10)
    expect = {"a": 1 / 11 + 0.5 / 12, "b": 1 / 12, "c": 1 / 13 + 0.5 / 11}
    assert [d for d, _ in fused] == ["a", "c", "b"]
    assert all(abs(s - expect[d]) < 1e-12 for d, s in fused)


def test_rrf_edge_cases() -> None:
    assert rrf({"x": [], "y": []}) == []
    assert rrf({"x": ["a", "b"]}, {"x": 0.0}) == []
    # equal scores keep first-seen order
    assert [d for d, _ in rrf({"x": ["a", "b"], "y": ["b", "a"]}, k=60)] == ["a", "b"]
    with pytest.raises(ValueError):
        rrf({"x": ["a"]}, k=-1)
    assert minmax([2.0, 4.0, 3.0]) == [0.0, 1.0, 0.5] and minmax([5.0, 5.0]) == [1.0, 1.0] and minmax([]) == []
    assert ranks(["a", "b", "a"]) == {"a": 1, "b": 2}


@pytest.fixture(scope="module")
def retriever(real_embedder, tmp_path_factory):  # noqa: F811
    docs, queries, qrels = cranfield_subset(120)
    cfg = load_config(environ={}).with_overrides({"index.dir": str(tmp_path_factory.mktemp("idx"))})
    emb = CountingEmbedder(real_embedder)
    index = HybridIndex.create("cran", cfg, model_id=emb.model_id, dim=emb.dim)
    index.add_documents([Document(id=d["_id"], text=d["text"], metadata={"title": d["title"], "record_id": d["_id"],
                                                                          "source": "cranfield"}) for d in docs], emb)
    r = HybridRetriever(index, cfg.retrieval, emb)
    yield r, docs
    r.close()


def test_hybrid_finds_the_document_and_carries_both_scores(retriever) -> None:
    r, docs = retriever
    target = docs[41]
    timings: dict[str, float] = {}
    hits = r.retrieve(target["title"], k=10, timings=timings)
    assert hits[0].chunk.doc_id == target["_id"]
    top = hits[0]
    assert top.dense_score is not None and top.sparse_score is not None and top.fused_score == top.score
    assert top.dense_rank is not None and top.sparse_rank is not None and min(top.dense_rank, top.sparse_rank) == 1
    assert top.chunk.citation().source == "cranfield" and top.chunk.title == target["title"]
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert {"embed", "dense", "sparse", "fusion", "retrieve"} <= set(timings)


def test_modes_score_with_their_own_retriever(retriever) -> None:
    r, docs = retriever
    dense = r.retrieve("heat transfer to a flat plate", k=5, mode="dense")
    sparse = r.retrieve("heat transfer to a flat plate", k=5, mode="bm25")
    assert all(h.sparse_score is None or h.sparse_rank for h in dense)
    assert all(h.score == h.dense_score and h.fused_score is None for h in dense)
    assert all(h.score == h.sparse_score for h in sparse) and len(sparse) == 5


def test_empty_and_stopword_queries(retriever) -> None:
    r, _ = retriever
    with pytest.raises(QueryError, match="empty"):
        r.retrieve("   ")
    notes: list[str] = []
    hits = r.retrieve("what is the ?", k=3, notes=notes)
    assert len(hits) == 3 and all(h.sparse_score is None for h in hits)
    assert notes and "stop words" in notes[0]
    assert r.retrieve("of the and", k=3, mode="bm25") == []
    with pytest.raises(QueryError, match="mode"):
        r.retrieve("flow", mode="magic")  # type: ignore[arg-type]


def test_empty_sides_are_explained(retriever) -> None:
    r, docs = retriever
    notes: list[str] = []
    hits = r.retrieve("xyzzyqwv boundary", k=3, notes=notes)  # one term no chunk holds, one many do
    assert hits and notes == []
    hits = r.retrieve("xyzzyqwv", k=3, notes=notes)
    assert len(hits) == 3 and notes == ["no chunk contains a term of 'xyzzyqwv'; dense results only"]
    for mode in ("hybrid", "dense"):
        notes = []
        assert r.retrieve("boundary layer", k=3, mode=mode, notes=notes,  # type: ignore[arg-type]
                          filters=parse_filters({"source": "no-such-source"})) == []
        assert notes == ["no chunk matches the filters"]
    notes = []
    assert r.retrieve("boundary layer", k=3, mode="bm25", notes=notes, filters=parse_filters({"source": "no-such-source"})) == []
    assert notes == ["no chunk matching the filters contains a term of 'boundary layer'"]


async def test_aretrieve_matches_retrieve(retriever) -> None:
    r, docs = retriever
    q = docs[7]["title"]
    a, b = await asyncio.gather(r.aretrieve(q, k=5), r.aretrieve(q, k=5))
    assert [h.chunk.id for h in a] == [h.chunk.id for h in b] == [h.chunk.id for h in r.retrieve(q, k=5)]

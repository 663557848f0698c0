"""Rerankers, MMR and cutoff with the real bundled MiniLM."""

import numpy as np
import pytest

from ragbudget.config import RerankConfig, load_config
from ragbudget.errors import ConfigError, ModelNotFoundError
from ragbudget.retrieval.rerank import BiEncoderReranker, CrossEncoderReranker, make_reranker, mmr, rerank
from ragbudget.types import Chunk, Scored


def sc(i, text, score=0.5):
    return Scored(chunk=Chunk(id=f"c{i}", doc_id=f"d{i}", text=text), score=score)


ITEMS = [
    sc(0, "The Eiffel Tower is in Paris and was completed in 1889.", 0.9),
    sc(1, "Bananas are rich in potassium and grow in tropical climates.", 0.8),
    sc(2, "The Eiffel Tower is in Paris and was completed in 1889.", 0.7),  # exact duplicate text
    sc(3, "Gustave Eiffel's company designed and built the tower in Paris.", 0.6),
]


def test_mmr_pure_drops_duplicates_and_prefers_diversity():
    rel = np.array([1.0, 0.9, 0.8])
    sim = np.array([[1.0, 0.99, 0.1], [0.99, 1.0, 0.1], [0.1, 0.1, 1.0]])
    order, dupes = mmr(rel, sim, lambda_=0.5, k=3, duplicate_threshold=0.95)
    assert order == [0, 2] and dupes == [1]


def test_bi_encoder_ranks_relevant_first_and_drops_duplicate(embedder):
    r = BiEncoderReranker(embedder)
    res = rerank("When was the Eiffel Tower finished?", ITEMS, r, RerankConfig())
    assert res.kept[0].chunk.id in {"c0", "c2"}
    assert res.kept[0].rerank_score is not None
    reasons = {d["chunk_id"]: d["reason"] for d in res.dropped}
    assert "duplicate (MMR)" in reasons.values()
    assert {s.chunk.id for s in res.kept} & {"c0", "c2"} != {"c0", "c2"}


def test_cutoff_keeps_low_scores_out(embedder):
    r = BiEncoderReranker(embedder)
    res = rerank("When was the Eiffel Tower finished?", ITEMS, r, RerankConfig(cutoff=0.3))
    assert "c1" not in {s.chunk.id for s in res.kept}
    assert any(d["chunk_id"] == "c1" and d["reason"] == "below cutoff" for d in res.dropped)


def test_no_reranker_uses_retrieval_scores_and_empty_input():
    res = rerank("q", ITEMS, None, RerankConfig())
    assert res.kept[0].chunk.id == "c0"
    assert rerank("q", [], None, RerankConfig()).kept == []


def test_cross_encoder_missing_path_is_clear_error(tmp_path):
    with pytest.raises(ModelNotFoundError, match="not found"):
        CrossEncoderReranker(tmp_path / "nope")
    with pytest.raises(ModelNotFoundError):
        make_reranker(RerankConfig(kind="cross-encoder", model_path=str(tmp_path)), embedder=None)
    with pytest.raises(ConfigError, match="model_path"):  # needs a path, caught at config load
        load_config(None, environ={"RAGBUDGET_RERANK__KIND": "cross-encoder"})

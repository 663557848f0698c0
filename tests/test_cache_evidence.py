"""Issue 28: evidence agreement for near misses, end to end — real SQuAD 2.0 paragraphs in a real index, the
bundled MiniLM, real caches, extractive answers. A near miss the verifier refuses only softly is served when
the new question's retrieval (run once, then used for the answer on a miss) finds the chunks the cached
answer cited; a hard refusal (an antonym both sides state) is never overruled by evidence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragbudget import RAG
from ragbudget.config import Config

SQUAD = Path(__file__).resolve().parents[2] / "shared" / "data" / "eval" / "squad2" / "corpus.jsonl"
KEEP = {f"c{i}" for i in range(30)} | {"c40", "c54", "c63", "c64", "c69", "c70"}  # Harvard, steam, primes


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, embedder) -> Path:
    if not SQUAD.is_file():
        pytest.skip(f"SQuAD 2.0 sample not found at {SQUAD}")
    folder = tmp_path_factory.mktemp("evidence")
    docs = [d for d in map(json.loads, SQUAD.read_text(encoding="utf-8").splitlines()) if d["_id"] in KEEP]
    with RAG(_cfg(folder), index="sq", embedder=embedder) as rag:
        rag.ingest(docs)
    return folder


def _cfg(folder: Path, top_k: int | None = None, **semantic) -> Config:
    over = {"index.dir": str(folder / "indexes"), "embedding.cache": False}
    over.update({f"cache.semantic.{k}": v for k, v in semantic.items()})
    if top_k is not None:
        over["retrieval.top_k"] = top_k
    return Config().with_overrides(over)


def _rag(index_dir: Path, embedder, top_k: int | None = None, **semantic) -> RAG:
    rag = RAG(_cfg(index_dir, top_k, **semantic), index="sq", embedder=embedder)
    calls = []
    inner = rag.retrieval.retrieve
    rag.retrieval.retrieve = lambda *a, **kw: calls.append(1) or inner(*a, **kw)  # type: ignore[method-assign]
    rag.retrieval_calls = calls  # type: ignore[attr-defined]
    return rag


def _flags(ans, prefix: str) -> list[str]:
    return [f for f in ans.ledger.flags if f.startswith(prefix)]


def test_reworded_question_with_the_same_evidence_is_served(index_dir, embedder):
    with _rag(index_dir, embedder, verifier="lexical", threshold=0.82) as rag:  # lexical verifier, evidence on
        first = rag.query("What is the school color of Harvard?")
        assert first.cache_layer is None and first.citations
        again = rag.query("Which color represents Harvard?")
        assert again.cache_layer == "semantic" and again.answer == first.answer
        (why,) = _flags(again, "semantic_hit: served (evidence")
        cited = len({c.chunk_id for c in first.citations})
        assert f"{cited}/{cited} cited chunks in the new top" in why and "p=" in why and "cosine" in why
        assert again.usage.total_tokens == 0 and again.ledger.saved["total_tokens"] == first.usage.total_tokens
        assert rag.retrieval_calls == [1, 1]  # one retrieval per query: the hit's was the evidence check


def test_the_default_learned_verifier_serves_it_without_a_retrieval(index_dir, embedder):
    with _rag(index_dir, embedder) as rag:  # the defaults: learned verifier at 0.76
        first = rag.query("What is the school color of Harvard?")
        again = rag.query("Which color represents Harvard?")
        assert again.cache_layer == "semantic" and again.answer == first.answer
        (why,) = _flags(again, "semantic_hit: served (learned over substitution")
        assert "p=" in why and "cosine" in why
        assert rag.retrieval_calls == [1]  # a hit before retrieval: the second query retrieved nothing


def test_a_name_written_out_is_served_on_evidence_outside_a_conversation(index_dir, embedder):
    """"Harvard" / "Harvard University": in an open scope a longer name might mean someone else, so the near
    miss is grey; the new question's retrieval finds the chunks the cached answer cited, and it is served."""
    with _rag(index_dir, embedder) as rag:
        first = rag.query("What is the school color of Harvard?")
        again = rag.query("What is the school color of Harvard University?")
        assert again.cache_layer == "semantic" and again.answer == first.answer
        (why,) = _flags(again, "semantic_hit: served (evidence")
        assert "cited chunks in the new top" in why
        assert rag.retrieval_calls == [1, 1]  # the evidence check used the retrieval run for the miss


def test_near_miss_with_different_evidence_is_generated_and_says_why(index_dir, embedder):
    # a grey zone as wide as it goes (any score, any cosine) so that only the evidence decides: the top chunk
    with _rag(index_dir, embedder, top_k=1, evidence_floor=0.0, evidence_min_score=0.0) as rag:
        first = rag.query("What are defensins?")
        assert first.citations
        other = rag.query("What are antibodies?")
        assert other.cache_layer is None and other.answer != first.answer
        (why,) = _flags(other, "semantic_near_miss:")
        assert "refused (evidence_disagrees" in why and "cited chunks in the new top" in why
        assert rag.retrieval_calls == [1, 1]  # the miss's answer used the retrieval the check ran


def test_opposite_question_misses_even_with_overlapping_evidence(index_dir, embedder):
    with _rag(index_dir, embedder, evidence_min_score=0.0) as rag:
        first = rag.query("What are the advantages of the steam engine?")
        opposite = rag.query("What are the disadvantages of the steam engine?")
        assert opposite.cache_layer is None
        assert {c.chunk_id for c in first.citations} & {c.chunk_id for c in opposite.citations}  # same evidence
        (why,) = _flags(opposite, "semantic_near_miss:")
        assert "refused (contrast" in why and "hard" in why and "evidence" not in why


def test_a_rechecked_hit_is_regenerated_and_teaches_its_entry(index_dir, embedder):
    """Feedback from answers regenerated anyway (``recheck_rate``): a semantic hit chosen for a recheck is not
    served; the fresh answer is compared with the cached one. Agreeing leaves the entry's bar alone;
    disagreeing raises it by ``feedback_step``, so the same near miss then needs a higher verifier score."""
    with _rag(index_dir, embedder, recheck_rate=1.0) as rag:  # every would-be semantic hit is rechecked
        first = rag.query("What is the school color of Harvard?")
        again = rag.query("Which color represents Harvard?")
        assert again.cache_layer is None and again.usage.completion_tokens > 0  # generated, not served
        (why,) = _flags(again, "semantic_recheck:")
        assert "agreed" in why and "disagreed" not in why and "What is the school color of Harvard?" in why
        sem = rag.cache.response.semantic
        assert sem.stats.reasons["recheck"] == 1 and sem.stats.reasons["feedback_right"] == 1
        assert not sem._raise  # agreement: no entry's bar raised
        assert first.answer  # (the extractive tier answers both from the same sentence)

    from ragbudget.testing import ScriptedGenerator
    gen = ScriptedGenerator("Crimson is the school color [1].", "Harvard was founded in 1636 [1].")
    cfg = _cfg(index_dir).with_overrides({"cache.semantic.recheck_rate": 1.0})  # a memory cache of its own
    with RAG(cfg, index="sq", embedder=embedder, generators={"extractive": gen}) as rag:
        rag.query("What is the school color of Harvard?")
        again = rag.query("Which color represents Harvard?")
        (why,) = _flags(again, "semantic_recheck:")
        assert "disagreed: its bar is raised" in why
        sem = rag.cache.response.semantic
        assert list(sem._raise.values()) == [pytest.approx(sem.config.feedback_step)]
        assert sem.stats.reasons["feedback_wrong"] == 1

"""Issue 13: answers that must not be cached or counted — hits cost nothing, degraded answers are never
served as normal hits, refits and citations describe what was sent, every degrade level does its job.

Real index, embedder and caches; the model tiers are scripted generators (the Generator protocol is the
seam) so a test can make a tier fail, refuse or fit only a small window.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ragbudget.testing import ScriptedGenerator
from ragbudget import RAG
from ragbudget.stages.accounting import cite
from ragbudget.config import Config
from ragbudget.errors import AdmissionError, BackendUnavailableError
from ragbudget.eval.replay import RequestResult, fill_from_answer, summarize
from ragbudget.types import Chunk, Scored

SAMPLE_DOCS = Path(__file__).resolve().parents[1] / "ragbudget" / "sample_docs"
Q = "Which layers does ragbudget cache and where can caches live?"


def _cfg(tmp_path: Path, **over) -> Config:
    base = {"index.dir": str(tmp_path / "indexes"), "cache.path": str(tmp_path / "cache.sqlite")}
    base.update(over)
    return Config().with_overrides(base)


def _tiers(small_window: int = 8192, **router) -> dict:
    return {"llm.tiers": [
        {"name": "small", "backend": "scripted", "model": "s", "context_window": small_window,
         "price_in_per_1k": 0.1, "price_out_per_1k": 0.2},
        {"name": "large", "backend": "scripted", "model": "l", "context_window": 16384,
         "price_in_per_1k": 1.0, "price_out_per_1k": 2.0}],
        **{f"llm.router.{k}": v for k, v in router.items()}}


@pytest.fixture()
def rag(tmp_path, embedder):
    r = RAG(_cfg(tmp_path), index="docs", embedder=embedder)
    r.ingest(SAMPLE_DOCS)
    yield r
    r.close()


def _scripted_rag(tmp_path, embedder, gens: dict, **over) -> RAG:
    r = RAG(_cfg(tmp_path, **over), index="docs", embedder=embedder, generators=gens)
    r.ingest(SAMPLE_DOCS)
    return r


# ------------------------------------------------------------------ a hit is not model usage
def test_cache_hit_uses_no_model_tokens_and_reports_what_it_saved(tmp_path, embedder):
    gens = {"small": ScriptedGenerator("Caches live in memory, SQLite or Redis [1]."), "large": ScriptedGenerator("x [1].")}
    r = _scripted_rag(tmp_path, embedder, gens, **_tiers(), **{"llm.router.enabled": False})
    fresh = r.query(Q)
    assert fresh.cache_layer is None and fresh.usage.prompt_tokens > 0
    cost = fresh.ledger.route["estimated_cost"]
    assert cost > 0
    hit = r.query(Q)
    assert hit.cache_layer == "exact"
    assert hit.usage.prompt_tokens == hit.usage.completion_tokens == hit.usage.total_tokens == 0
    assert hit.ledger.route["estimated_cost"] == 0.0 and hit.ledger.route["always_large_cost"] == 0.0
    assert hit.ledger.saved["prompt_tokens"] == fresh.usage.prompt_tokens
    assert hit.ledger.saved["completion_tokens"] == fresh.usage.completion_tokens
    assert hit.ledger.saved["cost"] == pytest.approx(cost)
    # metrics: prompt tokens counted once (the fresh answer); the hit's tokens are under saved_tokens
    text = r.metrics.render()[0].decode()
    prompt_total = sum(float(line.split()[-1]) for line in text.splitlines()
                       if line.startswith("ragbudget_prompt_tokens_total"))
    assert prompt_total == fresh.usage.prompt_tokens
    assert f'ragbudget_saved_tokens_total{{kind="prompt"}} {float(fresh.usage.prompt_tokens)}' in text
    # a replay report: the cost is the fresh answer's only; the hit's is reported apart
    results = [fill_from_answer(RequestResult(id=str(i), kind="q", status=200), a.to_dict()) for i, a in enumerate((fresh, hit))]
    s = summarize(results, 1.0)
    assert s["estimated_cost"] == pytest.approx(cost, abs=1e-6)
    assert s["prompt_tokens_total"] == fresh.usage.prompt_tokens
    assert s["saved_cost"] == pytest.approx(cost, abs=1e-6)
    assert s["saved_tokens_total"] == fresh.usage.total_tokens
    r.close()


# ------------------------------------------------------------------ degraded answers are not cached
@pytest.mark.parametrize("level", [1, 2, 3, 4])
def test_degraded_answers_are_never_served_later_as_normal_hits(rag, level):
    degraded = rag.query(Q, degrade_level=level)
    assert f"not_cached:degraded:level{level}" in degraded.ledger.flags
    normal = rag.query(Q)
    assert normal.cache_layer is None  # computed fresh, not the degraded answer
    assert normal.ledger.degrade_level == 0
    assert rag.query(Q).cache_layer == "exact"  # the normal answer is cached as usual


def test_fallback_and_extractive_substitute_answers_are_not_cached(tmp_path, embedder):
    over = {"llm.tiers": [{"name": "extractive", "backend": "extractive", "model": "extractive"},
                          {"name": "model", "backend": "scripted", "model": "m"}],
            "llm.router.enabled": False}
    r = _scripted_rag(tmp_path, embedder, {"model": ScriptedGenerator(BackendUnavailableError("down"))}, **over)
    a = r.query(Q)
    assert a.extractive and a.ledger.route["fallbacks"] == ["model"]
    assert "not_cached:fallback" in a.ledger.flags
    b = r.query(Q)
    assert b.cache_layer is None  # not served from the cache as if fresh
    r.close()


# ------------------------------------------------------------------ refit and citations tell the truth
def test_after_a_window_refit_ledger_context_and_citations_describe_what_was_sent(tmp_path, embedder):
    small = ScriptedGenerator("Caches live in memory, SQLite or Redis [1].")
    gens = {"small": small, "large": ScriptedGenerator(BackendUnavailableError("down"))}
    over = {"llm.router.enabled": False, "budget.system.cap": 128, "budget.history.cap": 64,
            "budget.retrieved.cap": 600, "budget.question.cap": 128, "budget.output.cap": 128,
            "trim.adaptive": False}  # the first prompt fills 600 retrieved tokens: over the small window
    r = _scripted_rag(tmp_path, embedder, gens, **_tiers(small_window=600), **over)
    a = r.query(Q)
    assert a.route == "small" and a.ledger.route["refitted"]
    assert "refitted:window=600" in a.ledger.flags
    sent = small.calls[-1]
    assert a.context, "the refit context still holds evidence"
    for s in a.context:  # every chunk the answer says it used was in the prompt the model saw
        assert s.chunk.text.split(".")[0][:40] in sent.text
    rs = a.ledger.sections["retrieved"]
    # the refit's numbers, not the first's (a small window now gives the context what empty history would not use)
    assert rs.used < sent.total_tokens <= 600 - 128
    assert a.ledger.route["prompt_tokens_counted"] == sent.total_tokens
    assert [c.chunk_id for c in a.citations] == [a.context[0].chunk.id]
    r.close()


def test_an_answer_without_markers_does_not_cite_the_whole_context():
    ctx = [Scored(Chunk(id=f"c{i}", doc_id=f"d{i}", text=t), score=1.0) for i, t in enumerate([
        "The Eiffel Tower is in Paris. It was completed in 1889.",
        "Redis keeps the shared caches and the rate-limit buckets.",
        "BM25 scores terms by inverse document frequency."])]
    cited, flags = cite("Something unrelated about llamas and weather.", ctx)
    assert cited == [] and flags == ["uncited"]
    cited, flags = cite("Redis keeps the shared caches and the rate-limit buckets.", ctx)
    assert [s.chunk.id for s in cited] == ["c1"] and flags == ["citations_inferred"]
    cited, flags = cite("Paris [1], and more [7].", ctx)
    assert [s.chunk.id for s in cited] == ["c0"] and flags == ["citation_out_of_range:7"]


def test_pipeline_answer_with_no_marker_cites_nothing_and_says_so(tmp_path, embedder):
    gens = {"small": ScriptedGenerator("Llamas enjoy the weather."), "large": ScriptedGenerator("Llamas enjoy the weather.")}
    r = _scripted_rag(tmp_path, embedder, gens, **_tiers(), **{"llm.router.enabled": False})
    a = r.query(Q)
    assert a.context and a.citations == [] and "uncited" in a.ledger.flags
    r.close()


# ------------------------------------------------------------------ every ladder level does what it says
def test_level_1_shrinks_the_retrieved_budget(rag):
    normal, small = rag.query(Q, tenant="a"), rag.query(Q, tenant="b", degrade_level=1)
    assert small.ledger.sections["retrieved"].budget <= normal.ledger.sections["retrieved"].budget // 2 + 1


def test_level_2_skips_the_reranker(rag):
    normal, skipped = rag.query(Q, tenant="a"), rag.query(Q, tenant="b", degrade_level=2)
    assert any(s.rerank_score is not None for s in normal.context)
    assert skipped.context and all(s.rerank_score is None for s in skipped.context)


def test_level_3_uses_the_small_model_and_does_not_escalate(tmp_path, embedder):
    small, large = ScriptedGenerator("I'm sorry, I cannot say."), ScriptedGenerator("Caches live in memory [1].")
    r = _scripted_rag(tmp_path, embedder, {"small": small, "large": large}, **_tiers(),
                      **{"llm.router.difficulty_threshold": 0.0})  # every question is "hard" → large
    assert r.query(Q, tenant="a").route == "large"
    n_large = len(large.calls)
    a = r.query(Q, tenant="b", degrade_level=3)
    assert a.route == "small" and a.ledger.route["reason"].startswith("degrade level 3")
    assert len(large.calls) == n_large  # a refusal from the small tier is not escalated at level 3
    r.close()


def test_level_4_answers_extractively_without_any_model(tmp_path, embedder):
    small, large = ScriptedGenerator("model [1]."), ScriptedGenerator("model [1].")
    r = _scripted_rag(tmp_path, embedder, {"small": small, "large": large}, **_tiers())
    a = r.query(Q, degrade_level=4)
    assert a.extractive and a.route == "extractive" and not small.calls and not large.calls
    assert "not_cached:degraded:level4" in a.ledger.flags
    r.close()


def test_level_5_is_refused(rag):
    with pytest.raises(AdmissionError):
        rag.query(Q, degrade_level=5)

"""Tuning helpers (ragbudget.eval.tuning) and notebook-3 measurements (ragbudget.eval.latency).

Pure functions on hand-made rows; sweeps on small subsets of the real data sets with the real embedder,
index, context builder, semantic cache, router and (when installed) llama.cpp on a generated GGUF.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragbudget import Config, load_config
from ragbudget.config import LLMConfig, RouterConfig, TierConfig
from ragbudget.errors import BackendUnavailableError, ConfigError
from ragbudget.eval.answers import load_questions
from ragbudget.eval.cache_eval import evaluate_pairs, load_pairs
from ragbudget.eval.latency import (as_context, mixed_requests, route_requests, routing_summary, summarise,
                                    timings_by_output_length, ttft_by_layout, with_fixed_docs)
from ragbudget.eval.tuning import (cache_overrides, choose_point, choose_threshold, pareto_front, settings_grid,
                                   subset_answers, sweep_context, sweep_thresholds, tuned_config, tuned_overrides,
                                   write_config)
from ragbudget.llm import LlamaCppGenerator
from ragbudget.llm.gguf_writer import GGUFSpec, write_random_gguf
from ragbudget.route import Router
from ragbudget.kernels.tokens import Tokenizer


def row(x: float, y: float, **kw) -> dict:
    return {"context_tokens_mean": x, "answer_in_context": y, **kw}


# ---------------------------------------------------------------- Pareto front and choices
def test_pareto_front_drops_dominated_points_and_sorts_by_cost():
    rows = [row(300, 0.9, id="a"), row(100, 0.7, id="b"), row(200, 0.6, id="c"), row(200, 0.85, id="d"),
            row(400, 0.9, id="e"), row(500, 0.95, id="f"), row(100, 0.7, id="g")]
    front = pareto_front(rows, "context_tokens_mean", "answer_in_context")
    assert [r["id"] for r in front] == ["b", "d", "a", "f"]  # c dominated by d; e by a; g ties b (first kept)


def test_choose_point_takes_cheapest_within_tolerance_or_target():
    rows = [row(100, 0.70), row(200, 0.89), row(300, 0.90), row(600, 0.905)]
    assert choose_point(rows, tolerance=0.02)["context_tokens_mean"] == 200
    assert choose_point(rows, tolerance=0.0)["context_tokens_mean"] == 600
    assert choose_point(rows, min_y=0.5)["context_tokens_mean"] == 100
    with pytest.raises(ConfigError, match="no setting reaches"):
        choose_point(rows, min_y=0.99)
    with pytest.raises(ConfigError, match="no sweep rows"):
        choose_point([])


def test_choose_threshold_keeps_false_hits_under_target():
    rows = [{"threshold": t, "guards": g, "hit_rate": h, "false_hit_rate": f}
            for t, g, h, f in [(0.8, True, 0.5, 0.03), (0.9, True, 0.4, 0.01), (0.95, True, 0.4, 0.0),
                               (0.8, False, 0.8, 0.2), (0.97, False, 0.45, 0.008)]]
    assert choose_threshold(rows, 0.01)["threshold"] == 0.95  # tie on hits: the safer threshold
    best = choose_threshold(rows, 0.01, guards=None)
    assert (best["threshold"], best["guards"]) == (0.97, False)
    assert choose_threshold(rows, 0.05)["threshold"] == 0.8
    # a flat hit-rate curve: give up a little hit rate for a safer threshold
    assert choose_threshold(rows, 0.05, hit_tolerance=0.1)["threshold"] == 0.95
    assert choose_threshold(rows, 0.05, hit_tolerance=0.09)["threshold"] == 0.8
    with pytest.raises(ConfigError, match="no threshold"):
        choose_threshold(rows, 0.001, guards=False)
    with pytest.raises(ConfigError):
        choose_threshold(rows, 1.5)
    assert cache_overrides(best) == {"cache.semantic.threshold": 0.97, "cache.semantic.guards": False}


def test_settings_grid_and_bad_input():
    grid = settings_grid([5, 2, 5])
    assert len(grid) == 8 and {s.top_k for s in grid} == {2, 5}
    assert grid[0].label == "k=2 rerank=on trim=on"
    with pytest.raises(ConfigError):
        settings_grid([0, 3])


# ---------------------------------------------------------------- configs
def test_tuned_config_round_trips_through_load_config(tmp_path: Path):
    base = load_config(Path(__file__).resolve().parents[1] / "configs" / "default.yaml", environ={})
    ov = tuned_overrides(base, budget=320, top_k=3, rerank=False, trim=True)
    assert ov["rerank.kind"] == "none" and ov["budget.lend"] == []
    cfg = write_config(tuned_config(base, {"budget": 320, "top_k": 3, "rerank": True, "trim": False}),
                       tmp_path / "sub" / "tuned.yaml")
    assert cfg.budget.retrieved.cap == 320 and cfg.budget.retrieved.ratio is None
    assert cfg.retrieval.top_k == cfg.rerank.top_n == 3
    assert cfg.rerank.kind == "bi-encoder" and cfg.trim.sentence_selection is False
    assert cfg.budget.lend == [] and cfg.chunking == base.chunking  # only the tuned keys change
    assert load_config(tmp_path / "sub" / "tuned.yaml", environ={}) == cfg


def test_tuned_budget_over_the_window_is_rejected():
    with pytest.raises(ConfigError, match="context_window"):
        tuned_config(Config(), {"budget": 9000, "top_k": 3, "rerank": True, "trim": True})


# ---------------------------------------------------------------- sweeps on real data
@pytest.fixture(scope="module")
def small_answers(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return subset_answers(shared_data / "eval" / "squad2", tmp_path_factory.mktemp("ans") / "squad6",
                          questions=6, distractors=12)


def test_subset_answers_keeps_answer_paragraphs(small_answers: Path):
    qs = load_questions(small_answers)
    corpus = [json.loads(x)["text"].lower() for x in (small_answers / "corpus.jsonl").read_text().splitlines()]
    assert len(qs) == 6 and 12 < len(corpus) <= 6 * 2 + 12
    assert all(any(a.lower() in c for c in corpus for a in q["answers"]) for q in qs)


def test_sweep_context_rows_follow_the_budget(small_answers: Path, embedder):
    rows = sweep_context(small_answers, Config(), embedder, budgets=[24, 400], top_ks=[1, 3], limit=6)
    assert len(rows) == 2 * 2 * 2 * 2
    for r in rows:
        assert r["questions"] == 6
        assert 0 <= r["answer_in_context"] <= 1
        assert r["context_tokens_p95"] <= r["budget"]  # the ledger's retrieved tokens never exceed the cap
        assert r["latency_ms_p50"] > 0
    big = {(r["label"], r["budget"]): r for r in rows}
    for label in {r["label"] for r in rows}:
        assert big[(label, 400)]["answer_in_context"] >= big[(label, 24)]["answer_in_context"]
    # whole chunks (no trimming) cannot fit a 24-token budget: nothing reaches the context
    assert all(r["context_tokens_mean"] == 0 for r in rows if not r["trim"] and r["budget"] == 24)
    assert max(r["answer_in_context"] for r in rows if r["budget"] == 400) >= 0.5


def test_sweep_context_rejects_bad_budgets(small_answers: Path, embedder):
    with pytest.raises(ConfigError, match="budgets"):
        sweep_context(small_answers, Config(), embedder, budgets=[0], top_ks=[1])


def test_sweep_thresholds_matches_evaluate_pairs(shared_data: Path, embedder):
    pairs = load_pairs(shared_data / "eval" / "mrpc_train.tsv")[:60]
    rows = sweep_thresholds(pairs, embedder, [0.8, 0.95], guards=(True, False))
    assert [(r["guards"], r["threshold"]) for r in rows] == [(True, 0.8), (True, 0.95), (False, 0.8), (False, 0.95)]
    ref = evaluate_pairs(pairs, embedder, Config().cache.semantic.model_copy(update={"guards": False}),
                         thresholds=[0.8])[0]
    assert rows[2]["hit_rate"] == ref["hit_rate"] and rows[2]["false_hit_rate"] == ref["false_hit_rate"]
    no_guard = {r["threshold"]: r for r in rows if not r["guards"]}
    assert no_guard[0.95]["hit_rate"] <= no_guard[0.8]["hit_rate"]


# ---------------------------------------------------------------- latency helpers
def test_summarise_and_routing_summary():
    s = summarise([{"k": "a", "v": 1}, {"k": "b", "v": 10}, {"k": "a", "v": 3}], "k", "v")
    assert s[0]["k"] == "a" and s[0]["n"] == 2 and s[0]["median"] == 2.0 and s[1]["mean"] == 10.0
    rs = routing_summary([{"tier": "small", "escalated": False, "cost": 1.0, "always_large_cost": 4.0},
                          {"tier": "handler", "escalated": False, "cost": 0.0, "always_large_cost": 0.0},
                          {"tier": "large", "escalated": True, "cost": 4.0, "always_large_cost": 4.0},
                          {"tier": "small", "escalated": False, "cost": 1.0, "always_large_cost": 4.0}])
    assert rs["share"] == {"small": 0.5, "handler": 0.25, "large": 0.25}
    assert rs["escalated"] == 1 and rs["cost_ratio"] == pytest.approx(6 / 12)


def test_route_requests_on_a_mixed_set(shared_data: Path):
    folder = shared_data / "eval" / "squad2"
    corpus = [json.loads(x)["text"] for x in (folder / "corpus.jsonl").read_text().splitlines()]
    mix = mixed_requests(corpus, load_questions(folder), factual=6, hard=2, handlers=3,
                         faq=("What are the support hours?", 2))
    assert [m["kind"] for m in mix].count("hard") == 2 and len(mix) == 6 + 2 + 3 + 2
    tok = Tokenizer()
    conf = LLMConfig(tiers=[TierConfig(name="small", price_in_per_1k=0.001, price_out_per_1k=0.002),
                            TierConfig(name="large", price_in_per_1k=0.01, price_out_per_1k=0.02)],
                     router=RouterConfig(faq={"What are the support hours?": "9 to 5."}))
    rows = route_requests(Router(conf, tokenizer=tok), mix, tok)
    by_kind = {k: [r for r in rows if r["kind"] == k] for k in ("factual", "hard", "handler", "faq")}
    assert all(r["tier"] == "handler" for r in by_kind["handler"] + by_kind["faq"])
    assert all(r["tier"] == "large" for r in by_kind["hard"])
    assert any(r["tier"] == "small" for r in by_kind["factual"])
    summary = routing_summary(rows)
    assert 0 < summary["cost"] < summary["always_large_cost"]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> LlamaCppGenerator:
    path = write_random_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf",
                             GGUFSpec(layers=1, dim=32, heads=2, ff=64, context_length=2048))
    gen = LlamaCppGenerator(str(path), n_ctx=2048, n_threads=1)
    try:
        gen.load()
    except BackendUnavailableError as err:
        pytest.skip(f"llama.cpp not available: {err}")
    return gen


def test_layout_and_output_length_on_llamacpp(engine: LlamaCppGenerator):
    tok = Tokenizer()
    llm = engine.load()
    count = lambda t: len(llm.tokenize(t.encode(), add_bos=False))  # noqa: E731
    cfg = with_fixed_docs([f"Reference paragraph {i}: " + "facts about budgets. " * 8 for i in range(50)], count, 600)
    assert cfg.fixed_docs and count("\n".join(cfg.fixed_docs)) >= 400
    reqs = [(f"What is fact number {i}?", as_context([f"Snippet {i} about caching."])) for i in range(3)]
    rows = ttft_by_layout(engine, cfg, tok, reqs, max_tokens=2)
    assert [r["layout"] for r in rows] == ["static-first"] * 3 + ["variable-first"] * 3
    static = [r["cached_tokens"] for r in rows if r["layout"] == "static-first"]
    variable = [r["cached_tokens"] for r in rows if r["layout"] == "variable-first"]
    # only the cache-friendly layout reuses the static prefix; variable-first shares just the documents
    # fence boilerplate at the start of its tail
    assert min(static) >= 500 and max(variable) < min(static) / 3
    out = timings_by_output_length(engine, cfg, tok, reqs[:1], [2, 8])
    assert [r["completion_tokens"] for r in out] == [2, 8]


def test_written_config_holds_only_what_differs_from_the_defaults(tmp_path: Path) -> None:
    from ragbudget.config import Config

    base = Config()
    cfg = write_config(tuned_config(base, {"budget": 320, "top_k": 3, "rerank": False, "trim": True}),
                       tmp_path / "tuned.yaml")
    import yaml
    written = yaml.safe_load((tmp_path / "tuned.yaml").read_text(encoding="utf-8"))
    assert written["budget"]["retrieved"]["cap"] == 320 and written["retrieval"] == {"top_k": 3}
    assert "service" not in written and "tokenizer" not in written  # defaults are not frozen into the file
    assert cfg.budget.retrieved.cap == 320 and cfg.rerank.kind == "none"

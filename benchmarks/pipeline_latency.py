"""End-to-end latency of the RAG facade: fresh answers against cached ones, in the same run.

    .venv/bin/python benchmarks/pipeline_latency.py ../shared/data/eval/squad2 --n 100
    .venv/bin/python benchmarks/pipeline_latency.py ../shared/data/eval/squad2 --n 100 --modes
    .venv/bin/python benchmarks/pipeline_latency.py ../shared/data/eval/squad2 --n 100 --count-cache
    .venv/bin/python benchmarks/pipeline_latency.py ../shared/data/eval/squad2 --n 20 --gc

Ingests the corpus into a temporary index, asks ``n`` questions fresh (cold response cache, warm model),
then the same questions again (exact-cache hits) and once more with different casing/punctuation
(normalised exact hits). Prints P50/P95/P99 per pass and the fresh/cached ratio, plus the mean share of
each pipeline stage in a fresh answer.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from _common import data_dir  # first: puts the checkout on sys.path
from ragbudget.config import Config
from ragbudget.eval.traffic import load_questions
from ragbudget.pipeline import RAG
from ragbudget.kernels.stats import percentile


def _pcts(values: list[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=float)
    return {"p50": percentile(a, 50), "p95": percentile(a, 95), "p99": percentile(a, 99), "mean": float(a.mean())}


def _questions(folder: Path, n: int) -> list[str]:
    """The first ``n`` distinct questions of an answers folder."""
    return list(dict.fromkeys(load_questions(folder)))[:n]


def run(folder: str | Path, n: int = 100, config: Config | None = None) -> dict[str, Any]:
    folder = Path(folder)
    questions = _questions(folder, n)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = (config or Config()).with_overrides({"index.dir": tmp})
        rag = RAG(cfg, index="bench")
        rag.ingest(folder / "corpus.jsonl")
        rag.warm_up()
        rag.query("warm-up question about nothing in particular")
        fresh, cached, variant, stages = [], [], [], []
        for q in questions:
            a = rag.query(q)
            fresh.append(a.timings.total_ms)
            stages.append(a.timings.stages)
        layers = []
        for q in questions:
            a = rag.query(q)
            cached.append(a.timings.total_ms)
            layers.append(a.cache_layer)
        for q in questions:
            a = rag.query(q.upper().rstrip("?") + " ?")
            variant.append(a.timings.total_ms)
        rag.close()
    keys = sorted({k for s in stages for k in s})
    share = {k: statistics.fmean(s.get(k, 0.0) for s in stages) for k in keys}
    f, c = _pcts(fresh), _pcts(cached)
    return {"questions": len(questions), "fresh_ms": f, "cached_ms": c, "variant_cached_ms": _pcts(variant),
            "cache_hit_rate": sum(1 for x in layers if x) / max(len(layers), 1),
            "ratio_p50": f["p50"] / max(c["p50"], 1e-9), "ratio_p95": f["p95"] / max(c["p95"], 1e-9),
            "fresh_stage_mean_ms": share}


def compare_modes(folder: str | Path, n: int = 100, modes: tuple[str, ...] = ("concise", "detailed"),
                  config: Config | None = None) -> dict[str, Any]:
    """Prompt and completion tokens per response mode on the same questions (response cache off)."""
    folder = Path(folder)
    questions = _questions(folder, n)
    out: dict[str, Any] = {"questions": len(questions)}
    with tempfile.TemporaryDirectory() as tmp:
        cfg = (config or Config()).with_overrides({"index.dir": tmp, "cache.response": False})
        rag = RAG(cfg, index="bench")
        rag.ingest(folder / "corpus.jsonl")
        rows: dict[str, list[tuple[int, int, float]]] = {m: [] for m in modes}
        for q in questions:  # interleaved, so both modes see the same machine load
            for m in modes:
                a = rag.query(q, mode=m)
                rows[m].append((a.usage.prompt_tokens, a.usage.completion_tokens, a.timings.total_ms))
        rag.close()
    for m, r in rows.items():
        out[m] = {"prompt_tokens_mean": statistics.fmean(x[0] for x in r),
                  "completion_tokens_mean": statistics.fmean(x[1] for x in r),
                  "max_tokens": cfg.prompt.modes[m].max_tokens, "total_ms": _pcts([x[2] for x in r])}
    if "concise" in rows and "detailed" in rows:
        c, d = out["concise"], out["detailed"]
        out["completion_tokens_saved"] = 1 - c["completion_tokens_mean"] / max(d["completion_tokens_mean"], 1e-9)
        out["total_tokens_saved"] = 1 - ((c["prompt_tokens_mean"] + c["completion_tokens_mean"])
                                         / max(d["prompt_tokens_mean"] + d["completion_tokens_mean"], 1e-9))
    return out


def compare_count_cache(folder: str | Path, n: int = 100, config: Config | None = None) -> dict[str, Any]:
    """Fresh answers with the token-count memo on and off (``tokenizer.count_cache_entries``), one index,
    the same questions interleaved so both see the same machine load; response and retrieval caches off."""
    folder = Path(folder)
    questions = _questions(folder, n)
    with tempfile.TemporaryDirectory() as tmp:
        base = (config or Config()).with_overrides({"index.dir": tmp, "cache.response": False,
                                                    "cache.retrieval": False})
        rags = {"memo on": RAG(base, index="bench"),
                "memo off": RAG(base.with_overrides({"tokenizer.count_cache_entries": 0}), index="bench")}
        rags["memo on"].ingest(folder / "corpus.jsonl")
        for rag in rags.values():
            rag.warm_up()
            rag.query("warm-up question about nothing in particular")
        rows: dict[str, list[dict[str, float]]] = {k: [] for k in rags}
        answers: dict[str, list[str]] = {k: [] for k in rags}
        for q in questions:
            for k, rag in rags.items():
                a = rag.query(q)
                rows[k].append({"total": a.timings.total_ms, **a.timings.stages})
                answers[k].append(a.answer)
        info = rags["memo on"].tokenizer.cache_info()
        for rag in rags.values():
            rag.close()
    out: dict[str, Any] = {"questions": len(questions),
                           "same_answers": answers["memo on"] == answers["memo off"],
                           "memo_hits_misses": info[:2] if info else None}
    for k, r in rows.items():
        out[k] = {"total_ms": _pcts([x["total"] for x in r]),
                  "stage_mean_ms": {s: statistics.fmean(x.get(s, 0.0) for x in r)
                                    for s in ("retrieve", "rerank", "trim", "context", "generate")}}
    out["off_over_on_p50"] = out["memo off"]["total_ms"]["p50"] / max(out["memo on"]["total_ms"]["p50"], 1e-9)
    out["off_over_on_p95"] = out["memo off"]["total_ms"]["p95"] / max(out["memo on"]["total_ms"]["p95"], 1e-9)
    return out


def gc_pause(folder: str | Path, n: int = 20, repeats: int = 3) -> dict[str, Any]:
    """How long one full cyclic garbage collection stalls a process holding the models and an index,
    before and after :func:`gc.freeze` (what ``ragbudget serve`` does after start-up)."""
    folder = Path(folder)
    questions = _questions(folder, n)
    with tempfile.TemporaryDirectory() as tmp:
        rag = RAG((Config()).with_overrides({"index.dir": tmp}), index="bench")
        rag.ingest(folder / "corpus.jsonl")
        rag.warm_up()
        for q in questions:
            rag.query(q)

        def full_ms() -> list[float]:
            out = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                gc.collect()
                out.append((time.perf_counter() - t0) * 1000)
            return out

        tracked = len(gc.get_objects())
        before = full_ms()
        gc.freeze()
        try:
            frozen = gc.get_freeze_count()
            after = full_ms()
        finally:
            gc.unfreeze()
            rag.close()
    return {"tracked_objects": tracked, "frozen_objects": frozen, "full_collection_ms_before": before,
            "full_collection_ms_after_freeze": after,
            "ratio_median": statistics.median(before) / max(statistics.median(after), 1e-6)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", help="answers layout: corpus.jsonl + questions.jsonl")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--modes", action="store_true", help="compare response modes (concise vs detailed) instead")
    ap.add_argument("--count-cache", action="store_true",
                    help="compare fresh answers with the token-count memo on and off instead")
    ap.add_argument("--gc", action="store_true",
                    help="time a full garbage collection before and after gc.freeze instead")
    args = ap.parse_args(argv)
    data_dir(args.folder, "corpus.jsonl", "questions.jsonl")
    if args.gc:
        result = gc_pause(args.folder, args.n)
    elif args.count_cache:
        result = compare_count_cache(args.folder, args.n)
    else:
        result = compare_modes(args.folder, args.n) if args.modes else run(args.folder, args.n)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

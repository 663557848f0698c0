"""Retrieval benchmark: nDCG@10 per mode, ingest throughput, re-ingest speed-up, query latency.

    .venv/bin/python benchmarks/retrieval_modes.py ../shared/data/eval/cranfield ../shared/data/eval/cisi

For each BEIR folder: a cold ingest of the corpus into a temporary index with an empty embedding cache
(chunks/s), a re-ingest of the unchanged corpus (speed-up), then every judged query in bm25, dense and
hybrid mode on that one index (metrics and latency side by side). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from _common import data_dir  # first: puts the checkout on sys.path
from ragbudget.config import load_config
from ragbudget.embed.encoder import SentenceTransformerEmbedder
from ragbudget.eval.retrieval import evaluate, load_beir
from ragbudget.index import HybridIndex, default_embedder
from ragbudget.retrieval.search import HybridRetriever
from ragbudget.kernels.stats import percentile

MODES = ("bm25", "dense", "hybrid")


class _EncodeEveryQuery:
    """Bypasses the embedder's in-memory query memo so each timed query pays for its encoding."""

    def __init__(self, inner: SentenceTransformerEmbedder) -> None:
        self.inner, self.model_id = inner, inner.model_id

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.embed(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed([text])[0]  # cache disabled above: always encoded


def bench_one(folder: str, config_path: str | None = None) -> dict:
    beir = load_beir(folder)
    with tempfile.TemporaryDirectory(prefix="ragbudget-bench-") as tmp:
        # No embedding cache: a cold ingest embeds everything, and every timed query is really encoded.
        cfg = load_config(config_path).with_overrides({"index.dir": tmp, "embedding.cache": False})
        emb = default_embedder(cfg)
        emb.warm_up()  # model load is not ingest work
        index = HybridIndex.create("bench", cfg, model_id=emb.model_id, dim=emb.dim)
        t0 = time.perf_counter()
        cold = index.ingest(beir.corpus_path, emb)
        cold_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        again = HybridIndex.load("bench", cfg, model_id=emb.model_id)
        warm = again.ingest(beir.corpus_path, emb)
        warm_s = time.perf_counter() - t1
        retriever = HybridRetriever(again, cfg.retrieval, _EncodeEveryQuery(emb))
        metrics = {m: evaluate(retriever, beir, m) for m in MODES}
        latency = interleaved_latency(retriever, list(beir.queries.values()))
        retriever.close()
    n = cold.chunks_added
    return {"dataset": Path(folder).name, "documents": cold.documents, "chunks": n, "ingest_s": round(cold_s, 2),
            "chunks_per_s": round(n / cold_s, 1), "reingest_s": round(warm_s, 3),
            "reingest_embedded": warm.embedded, "reingest_speedup": round(cold_s / warm_s, 1), "modes": metrics,
            "latency": latency}


def interleaved_latency(retriever: HybridRetriever, queries: list[str], k: int = 10) -> dict[str, dict[str, float]]:
    """Dense-only vs hybrid top-``k`` latency, alternating which runs first per query (same conditions)."""
    lat: dict[str, list[float]] = {"dense": [], "hybrid": []}
    for i, q in enumerate(queries):
        for mode in (("dense", "hybrid") if i % 2 == 0 else ("hybrid", "dense")):
            t0 = time.perf_counter()
            retriever.retrieve(q, k=k, mode=mode)  # type: ignore[arg-type]
            lat[mode].append((time.perf_counter() - t0) * 1000)
    return {m: {"p50": round(percentile(v, 50), 2), "p99": round(percentile(v, 99), 2)} for m, v in lat.items()}


def markdown(results: list[dict]) -> str:
    lines = ["| data | mode | nDCG@10 | recall@10 | recall@100 | MRR@10 | queries | p50 ms | p95 ms | p99 ms |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        for m, v in r["modes"].items():
            lines.append(f"| {r['dataset']} | {m} | {v['ndcg@10']:.4f} | {v['recall@10']:.4f} | {v['recall@100']:.4f} "
                         f"| {v['mrr@10']:.4f} | {v['queries']} | {v['latency_ms_p50']:.1f} | {v['latency_ms_p95']:.1f} "
                         f"| {v['latency_ms_p99']:.1f} |")
    lines += ["", "| data | docs | chunks | cold ingest s | chunks/s | re-ingest unchanged s | re-embedded | speed-up |",
              "|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['dataset']} | {r['documents']} | {r['chunks']} | {r['ingest_s']} | {r['chunks_per_s']} "
                     f"| {r['reingest_s']} | {r['reingest_embedded']} | {r['reingest_speedup']}× |")
    lines += ["", "| data | dense p50 ms | hybrid p50 ms | hybrid/dense p50 | dense p99 ms | hybrid p99 ms | hybrid/dense p99 |",
              "|---|---|---|---|---|---|---|"]
    for r in results:
        d, h = r["latency"]["dense"], r["latency"]["hybrid"]
        lines.append(f"| {r['dataset']} | {d['p50']} | {h['p50']} | {h['p50'] / d['p50']:.2f}× | {d['p99']} | {h['p99']} "
                     f"| {h['p99'] / d['p99']:.2f}× |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--config", default=None)
    ap.add_argument("--json", default=None, help="also write the raw results to this JSON file")
    args = ap.parse_args(argv)
    for f in args.folders:
        data_dir(f, "corpus.jsonl", "queries.jsonl")
    results = [bench_one(f, args.config) for f in args.folders]
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

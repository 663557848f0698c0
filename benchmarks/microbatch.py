"""Query-embedding latency under concurrency, unbatched vs :class:`~ragbudget.embed.microbatch.MicroBatcher`.

    .venv/bin/python benchmarks/microbatch.py --requests 64 --concurrency 1 4 8 16 --wait 0 2 5 --rounds 3

Closed loop: C threads embed distinct real questions (Cranfield + SQuAD under ``--data``, default
../shared/data/eval) back to back; every cell sends the same ``--requests`` texts, ``--rounds`` times.
Reports P50/P95/P99 per call and throughput, one table from one run.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Sequence

from _common import EVAL_DATA, data_dir  # first: puts the checkout on sys.path
from ragbudget.config import EmbeddingConfig
from ragbudget.embed.encoder import SentenceTransformerEmbedder
from ragbudget.embed.microbatch import MicroBatcher
from ragbudget.kernels.stats import percentile


def questions(limit: int, data: Path = EVAL_DATA) -> list[str]:
    out: list[str] = []
    for f in (data / "cranfield" / "queries.jsonl", data / "squad2" / "questions.jsonl"):
        if f.is_file():
            out += [json.loads(x)["text"] for x in f.read_text(encoding="utf-8").splitlines() if x.strip()]
    return out[:limit]


def run_cell(embed_query: Callable[[str], Any], texts: Sequence[str], concurrency: int) -> tuple[list[float], float]:
    """Per-call latencies (ms) and wall time (s) of ``concurrency`` closed-loop threads over ``texts``."""
    lat: list[float] = []
    lock = threading.Lock()
    it = iter(texts)

    def worker() -> None:
        for t in it:
            t0 = time.perf_counter()
            embed_query(t)
            ms = (time.perf_counter() - t0) * 1000
            with lock:
                lat.append(ms)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        for f in [pool.submit(worker) for _ in range(concurrency)]:
            f.result()
    return lat, time.perf_counter() - t0


def run(n_requests: int, concurrency: Sequence[int], waits: Sequence[float], max_batch: int,
        rounds: int = 3, data: Path = EVAL_DATA) -> list[dict[str, Any]]:
    """Every (concurrency, mode) cell ``rounds`` times, modes interleaved round by round so that load from
    elsewhere on the machine hits all modes alike; percentiles over all rounds' calls."""
    texts = questions(n_requests, data)
    if not texts:
        raise SystemExit(f"no questions under {data} (cranfield/queries.jsonl, squad2/questions.jsonl)")
    # no persistent or in-memory text cache: every call below really runs the model
    emb = SentenceTransformerEmbedder(EmbeddingConfig(cache=False, memory_cache_entries=0))
    emb.warm_up()
    run_cell(emb.embed_query, texts[:16], 1)  # warm the model's kernels
    modes = ["unbatched"] + [f"batched wait={w:g}ms" for w in waits]
    lat: dict[tuple[int, str], list[float]] = {}
    wall: dict[tuple[int, str], float] = {}
    batch: dict[tuple[int, str], list[float]] = {}
    for _ in range(rounds):
        for c in concurrency:
            for name, w in zip(modes, [None, *waits]):
                mb = None if w is None else MicroBatcher(emb, max_batch=max_batch, max_wait_ms=w)
                emb._recent.clear()  # the embedder's recent-query memory would turn repeats into free hits
                got, secs = run_cell(emb.embed_query if mb is None else mb.embed_query, texts, c)
                lat.setdefault((c, name), []).extend(got)
                wall[(c, name)] = wall.get((c, name), 0.0) + secs
                if mb is not None:
                    batch.setdefault((c, name), []).append(mb.stats.mean_batch)
                    mb.close()
    rows = []
    for c in concurrency:
        for name in modes:
            v = lat[(c, name)]
            rows.append({"concurrency": c, "mode": name, "p50_ms": round(percentile(v, 50), 2),
                         "p95_ms": round(percentile(v, 95), 2), "p99_ms": round(percentile(v, 99), 2),
                         "qps": round(len(v) / wall[(c, name)], 1),
                         "mean_batch": round(sum(batch.get((c, name), [1.0])) / len(batch.get((c, name), [1.0])), 2)})
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    base = {r["concurrency"]: r for r in rows if r["mode"] == "unbatched"}
    out = ["| concurrency | mode | P50 ms | P95 ms | P99 ms | queries/s | mean batch | P95 vs unbatched |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = r["p95_ms"] / base[r["concurrency"]]["p95_ms"] if base[r["concurrency"]]["p95_ms"] else 0
        out.append(f"| {r['concurrency']} | {r['mode']} | {r['p50_ms']} | {r['p95_ms']} | {r['p99_ms']} | "
                   f"{r['qps']} | {r.get('mean_batch', 1)} | {ratio:.2f}× |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=96)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8, 16])
    ap.add_argument("--wait", type=float, nargs="+", default=[0.0, 2.0, 5.0], help="max_wait_ms values")
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--data", default=str(EVAL_DATA), help="folder holding cranfield/ and squad2/ (default: %(default)s)")
    args = ap.parse_args(argv)
    data = data_dir(args.data)
    rows = run(args.requests, args.concurrency, args.wait, args.max_batch, args.rounds, data)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2), encoding="utf-8")
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

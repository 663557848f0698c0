"""Lookup latency per cache layer and backend: ``.venv/bin/python benchmarks/cache_lookup.py [--redis-url URL]``.

Measures a hit in each layer (exact response, semantic response with and without the query embedding,
retrieval) on memory, SQLite and (with ``--redis-url``) Redis, over a realistic answer record.
Prints one table and a JSON line with median / p95 microseconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import _common  # noqa: F401 - first: puts the checkout on sys.path
from ragbudget.cache import (ExactResponseCache, KVBackend, MemoryBackend, RedisBackend, ResponseScope,
                             RetrievalCache, SemanticResponseCache, SQLiteBackend)
from ragbudget.config import EmbeddingConfig, SemanticCacheConfig
from ragbudget.embed.encoder import SentenceTransformerEmbedder

QUESTIONS = [f"How do I configure feature number {i} for my account?" for i in range(200)]


def _record(i: int) -> dict[str, Any]:
    ctx = [{"chunk_id": f"c{i}-{j}", "doc_id": f"d{j}", "source": f"docs/{j}.md", "title": "T", "position": j,
            "text": "lorem ipsum dolor sit amet " * 40, "score": 0.5} for j in range(5)]
    return {"question": QUESTIONS[i], "answer": "Open Settings and choose the option. [1]" * 5,
            "citations": [], "context": ctx, "ledger": {"sections": {}}, "route": "small",
            "usage": {"prompt_tokens": 1500, "cached_tokens": 0, "completion_tokens": 120, "total_tokens": 1620},
            "timings": {"stages": {}, "ttft_ms": 300.0, "itl_ms": [], "total_ms": 1800.0}}


def _time(fn: Callable[[], Any], n: int) -> dict[str, float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        assert fn() is not None
        out.append((time.perf_counter() - t0) * 1e6)
    out.sort()
    return {"median_us": round(statistics.median(out), 1), "p95_us": round(out[int(0.95 * (len(out) - 1))], 1)}


def bench(backends: dict[str, KVBackend], embedder: SentenceTransformerEmbedder, n: int) -> list[dict[str, Any]]:
    scope = ResponseScope("t", "v1", "p1", "small", 128)
    rows = []
    qvecs = embedder.embed(QUESTIONS)
    for name, be in backends.items():
        exact = ExactResponseCache(be)
        sem = SemanticResponseCache(be, embedder, SemanticCacheConfig())
        retr = RetrievalCache(be)
        for i, q in enumerate(QUESTIONS):
            exact.store(scope, q, _record(i))
            sem.store(scope, q, _record(i), embedding=qvecs[i])
            retr.set("v1", {"top_k": 10}, q, [(f"c{j}", 1.0 / (j + 1)) for j in range(10)])
        k = iter(range(10**9))
        rows.append({"backend": name, "layer": "exact",
                     **_time(lambda: exact.lookup(scope, QUESTIONS[next(k) % 200]), n)})
        rows.append({"backend": name, "layer": "semantic (embedding given)",
                     **_time(lambda: sem.lookup(scope, QUESTIONS[(j := next(k) % 200)], embedding=qvecs[j]), n)})
        rows.append({"backend": name, "layer": "semantic (embeds the query)",
                     **_time(lambda: sem.lookup(scope, QUESTIONS[next(k) % 200]), max(n // 10, 20))})
        rows.append({"backend": name, "layer": "retrieval",
                     **_time(lambda: retr.get("v1", {"top_k": 10}, QUESTIONS[next(k) % 200]), n)})
        be.clear()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--redis-url", default=None, help="also measure Redis (e.g. redis://127.0.0.1:6379/0)")
    ap.add_argument("-n", type=int, default=2000, help="lookups per measurement")
    args = ap.parse_args(argv)
    embedder = SentenceTransformerEmbedder(EmbeddingConfig(cache=False))
    embedder.warm_up()
    with tempfile.TemporaryDirectory() as tmp:
        backends: dict[str, KVBackend] = {"memory": MemoryBackend(),
                                          "sqlite": SQLiteBackend(Path(tmp) / "bench.sqlite")}
        if args.redis_url:
            backends["redis"] = RedisBackend(args.redis_url, prefix="ragbudget-bench:")
        rows = bench(backends, embedder, args.n)
        for be in backends.values():
            be.close()
    print(f"{'backend':8} {'layer':30} {'median µs':>10} {'p95 µs':>10}")
    for r in rows:
        print(f"{r['backend']:8} {r['layer']:30} {r['median_us']:>10} {r['p95_us']:>10}")
    print(json.dumps({"rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

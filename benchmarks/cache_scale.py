"""Semantic lookup latency at 100k entries: ``.venv/bin/python benchmarks/cache_scale.py [--entries 100000]``.

One response scope holds ``--entries`` stored questions (memory backend, the default verified lookup:
guards, contrast verifier, learned verifier). Their texts are real questions (the question and near-miss
pair sets in tests/data, plus ``--mined`` from benchmarks/cache_pairs.py when given); their embeddings are
those questions' MiniLM vectors, repeated with small Gaussian noise (σ ``--noise``, renormalised) up to
the entry count, so every lookup finds several candidates above the threshold and verifies them (the
worst case: verification is the per-candidate cost). Lookups ask the other side of each pair with its
real embedding given (the query's own embedding, ~15 ms of MiniLM on this CPU, is the embedder's cost,
not the cache's; see BENCHMARKS.md). Prints median / p95 / p99 ms, candidates per lookup and the
store time per entry, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import _common
from ragbudget.cache import MemoryBackend, ResponseScope, SemanticResponseCache
from ragbudget.config import EmbeddingConfig, SemanticCacheConfig
from ragbudget.embed.encoder import SentenceTransformerEmbedder
from ragbudget.eval.cache_eval import load_pairs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--lookups", type=int, default=2000)
    ap.add_argument("--noise", type=float, default=0.01)
    ap.add_argument("--mined", default=None, help="extra pairs TSV (benchmarks/cache_pairs.py output)")
    ap.add_argument("--verifier", choices=("learned", "lexical"), default="learned")
    ap.add_argument("--exact-max", type=int, default=SemanticCacheConfig().exact_search_max_entries,
                    help="cache.semantic.exact_search_max_entries (a huge value: every lookup scans every row)")
    args = ap.parse_args(argv)
    files = [_common.ROOT / "tests" / "data" / "question_pairs.tsv", _common.ROOT / "tests" / "data" / "near_miss_pairs.tsv"]
    pairs = [p for f in files + ([args.mined] if args.mined else []) for p in load_pairs(f)]
    emb = SentenceTransformerEmbedder(EmbeddingConfig(cache=False))
    va = emb.embed([p.text_a for p in pairs])
    vb = emb.embed([p.text_b for p in pairs])
    rng = np.random.default_rng(0)
    cfg = SemanticCacheConfig(max_entries=args.entries, verifier=args.verifier,
                              exact_search_max_entries=args.exact_max)
    cache = SemanticResponseCache(MemoryBackend(max_entries=args.entries + 1), emb, cfg)
    scope = ResponseScope("t", "v1", "p1", "small", 128)
    t0 = time.perf_counter()
    for i in range(args.entries):
        j = i % len(pairs)
        v = va[j] + (rng.normal(0, args.noise, va.shape[1]) if i >= len(pairs) else 0)
        text = pairs[j].text_a if i < len(pairs) else f"{pairs[j].text_a} ({i})"
        cache.store(scope, text, {"answer": f"a{i}"}, embedding=np.asarray(v, dtype=np.float32))
    store_us = (time.perf_counter() - t0) / args.entries * 1e6
    times, cands, hits, agree, checked = [], [], 0, 0, 0
    rows = cache._scopes[scope.id].rows_  # the exact answer, for the recall check (outside the timing)
    for k in range(args.lookups):
        j = k % len(pairs)
        t = time.perf_counter()
        hit, decisions = cache.lookup_explained(scope, pairs[j].text_b, embedding=vb[j])
        times.append((time.perf_counter() - t) * 1000.0)
        cands.append(len(decisions))
        hits += hit is not None
        if k % 5 == 0:  # recall of the search: its best cosine against a full exact scan's
            q = vb[j] / np.linalg.norm(vb[j])
            best = float(np.max(rows.vecs[:rows.n] @ q))
            found = cache.candidates(scope, pairs[j].text_b, embedding=vb[j])
            if best >= cfg.threshold:
                checked += 1
                agree += bool(found) and found[0][0] >= best - 1e-5
    ts = np.sort(np.array(times))
    row = {"entries": len(cache), "lookups": args.lookups, "verifier": args.verifier,
           "median_ms": round(float(np.median(ts)), 3), "p95_ms": round(float(ts[int(0.95 * (len(ts) - 1))]), 3),
           "p99_ms": round(float(ts[int(0.99 * (len(ts) - 1))]), 3), "max_ms": round(float(ts[-1]), 3),
           "candidates_mean": round(float(np.mean(cands)), 2), "exact_max": args.exact_max,
           "recall_at_1": round(agree / checked, 4) if checked else None, "recall_checked": checked, "hit_share": round(hits / args.lookups, 3),
           "store_us_per_entry": round(store_us, 1)}
    print(f"{row['entries']} entries, {args.lookups} lookups: median {row['median_ms']} ms, p95 {row['p95_ms']} ms, "
          f"p99 {row['p99_ms']} ms (candidates verified per lookup {row['candidates_mean']}; best cosine found "
          f"in {row['recall_at_1']} of {checked} checked); "
          f"store {row['store_us_per_entry']} µs/entry")
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

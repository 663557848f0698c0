"""Cold ingest, before/after in one run (issue 17): the library path and the CLI, same machine, same data.

    git worktree add /tmp/before 66d4659        # main before issue 17's work
    .venv/bin/python benchmarks/cold_ingest.py /tmp/before . DATA.jsonl [DATA.jsonl ...] [--rounds N]

Every measurement runs in a fresh process with an empty index folder and embedding cache, rounds
interleaved (before, after, before, after, ...) so that a noisy neighbour hits both sides alike.

* ``library``: ``IndexRegistry.ingest`` in-process (what ``RAG.ingest`` and the service's ingest jobs run):
  chunk embedding plus the sentence warm-up that keeps query-time trimming free of model calls, on both sides.
  Timed from the call to its return; model loading is not ingest work.
* ``cli``: ``python -m ragbudget ingest DATA --index-dir EMPTY`` wall time, start-up (imports, model load,
  ~5–10 s) included; the report's own ``seconds`` (load, chunk, embed chunks, index, save: no start-up, no
  sentence warm-up) is printed per run. Before issue 17 the CLI embedded chunks only; after it also warms
  sentences, so the like-for-like row is ``after, no warm-up`` (``embedding.warm_sentences: false``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LIBRARY = r'''
import sys, time, tempfile, json
sys.path.insert(0, sys.argv[1])
from ragbudget.config import Config
from ragbudget.index.local.hybrid import default_embedder
try:
    from ragbudget.retrieval.registry import IndexRegistry
except ImportError:  # code from before the issue-14 renames
    from ragbudget.indexes import IndexRegistry
d = tempfile.mkdtemp()
cfg = Config().with_overrides({"index.dir": d, **json.loads(sys.argv[3])})
emb = default_embedder(cfg); emb.warm_up()
reg = IndexRegistry(cfg, emb)
t = time.perf_counter()
rep = reg.ingest(sys.argv[2], "x")
print(json.dumps({"chunks": rep.chunks_added, "s": time.perf_counter() - t}))
'''


def library(repo: str, data: str, over: dict[str, object]) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", LIBRARY, str(Path(repo).resolve()), data, json.dumps(over)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"library ingest failed in {repo}:\n{out.stderr[-1500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def cli(repo: str, data: str, yaml_text: str | None) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        cmd = [sys.executable, "-m", "ragbudget", "ingest", str(Path(data).resolve()), "--quiet",
               "--index-dir", d]
        if yaml_text:
            cfg = Path(d) / "cfg.yaml"
            cfg.write_text(yaml_text)
            cmd += ["--config", str(cfg)]
        env = {**os.environ, "PYTHONPATH": str(Path(repo).resolve())}
        t = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=repo, env=env)
        wall = time.perf_counter() - t
    if out.returncode != 0:
        raise SystemExit(f"CLI ingest failed in {repo}:\n{out.stderr[-1500:]}")
    def row(name: str) -> str:
        return next(line.split("│")[2].strip() for line in out.stdout.splitlines() if f"│ {name} " in line)

    # "seconds" is the report's own clock: load, chunk, embed chunks, index, save (no start-up, no warm-up)
    return {"chunks": int(row("chunks embedded")), "s": wall, "ingest_s": float(row("seconds"))}


def label_of(data: str) -> str:
    """``cranfield`` for .../cranfield/corpus.jsonl (BEIR folders all name their corpus corpus.jsonl)."""
    p = Path(data)
    return p.parent.name if p.name == "corpus.jsonl" else p.name


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("data", nargs="+", help="JSONL corpora (id/title/text records)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--only", choices=("library", "cli"), help="one path only")
    args = ap.parse_args(argv)
    runs = []
    if args.only in (None, "library"):
        runs += [("library", "before", lambda d: library(args.before, d, {})),
                 ("library", "after", lambda d: library(args.after, d, {})),
                 ("library", "after, 1 core", lambda d: library(args.after, d, {"embedding.ingest_threads": 1}))]
    if args.only in (None, "cli"):
        runs += [("cli", "before", lambda d: cli(args.before, d, None)),
                 ("cli", "after", lambda d: cli(args.after, d, None)),
                 ("cli", "after, no warm-up", lambda d: cli(args.after, d, "embedding:\n  warm_sentences: false\n"))]
    rows = []
    for data in args.data:
        seconds: dict[tuple[str, str], list[float]] = {}
        chunks = 0
        for _ in range(args.rounds):
            for path, label, fn in runs:
                r = fn(data)
                chunks = int(r["chunks"])
                seconds.setdefault((path, label), []).append(r["s"])
                extra = f" (the report's ingest seconds: {r['ingest_s']:.2f})" if "ingest_s" in r else ""
                print(f"{label_of(data)} {path} {label}: {r['chunks']} chunks in {r['s']:.2f} s{extra}", flush=True)
        for (path, label), ss in seconds.items():
            s = statistics.median(ss)
            base = statistics.median(seconds[(path, "before")])
            rows.append((label_of(data), chunks, path, label, s, chunks / s, base / s))
    print("\n| data | chunks | path | code | seconds (median) | chunks/s | × before |\n|---|---|---|---|---|---|---|")
    for name, n, path, label, s, cps, x in rows:
        print(f"| {name} | {n} | {path} | {label} | {s:.1f} | {cps:.1f} | {x:.2f}× |")


if __name__ == "__main__":
    main()

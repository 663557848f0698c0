"""Freshness (issue 17): time from an ingest's commit to the first query answered from the new version, in
every serving process.

    .venv/bin/python benchmarks/freshness.py --backend local --base ../shared/data/eval/cranfield/corpus.jsonl
    .venv/bin/python benchmarks/freshness.py --backend postgres --base ../shared/data/eval/cranfield/corpus.jsonl

Two ``ragbudget serve`` processes (A: one process, B: two uvicorn workers) on loopback share one index (a
folder, or an embedded PostgreSQL). This process ingests the base collection, then ``--rounds`` times a
record holding a new fact (through the library, as a CLI ingest would), notes the commit time, and polls
each server with the fact's question until the answer quotes it. Each poll is a whole query (cache, version
check, retrieval, generation), so the figure is an upper bound at the resolution of one query.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ragbudget.config import load_config  # noqa: E402
from ragbudget.pipeline import RAG  # noqa: E402
from ragbudget.kernels.stats import percentile  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(cfg_path: Path, port: int, workers: int, log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGBUDGET_")}
    return subprocess.Popen([sys.executable, "-m", "ragbudget", "serve", "--config", str(cfg_path), "--port",
                             str(port), "--workers", str(workers), "--log-level", "warning"],
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env, start_new_session=True)


def wait_ready(url: str, proc: subprocess.Popen, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server {url} exited early")
        try:
            if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"server {url} not ready")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["local", "postgres"], default="local")
    ap.add_argument("--base", required=True, help="JSONL collection to build the index from")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fresh-", dir="/tmp"))
    conf: dict = {"index": {"dir": str(work / "indexes"), "name": "default"}}
    server = None
    if args.backend == "postgres":
        from ragbudget.index.postgres.embedded import EmbeddedPostgres
        server = EmbeddedPostgres(work / "pg", database="fresh")
        conf["index"].update(backend="postgres", dsn=server.start())
    cfg_path = work / "ragbudget.yaml"
    cfg_path.write_text(yaml.safe_dump(conf), encoding="utf-8")
    rag = RAG(load_config(cfg_path, environ={}))
    t = time.perf_counter()
    base = rag.ingest(args.base)
    print(f"base: {base.chunks_added} chunks in {time.perf_counter() - t:.1f}s", flush=True)
    procs, urls = [], []
    try:
        for workers in (1, 2):
            port = free_port()
            procs.append(serve(cfg_path, port, workers, work / f"serve{workers}.log"))
            urls.append(f"http://127.0.0.1:{port}")
        for u, p in zip(urls, procs):
            wait_ready(u, p)
        delays: dict[str, list[float]] = {"A (1 process)": [], "B (2 workers)": []}
        polls: list[int] = []  # one per stale answer seen after a commit
        for i in range(args.rounds):
            code = f"{7000 + i * 37}"
            fact = f"The Vexor-{i} actuator of the freshness rig runs at exactly {code} hertz."
            question = f"At how many hertz does the Vexor-{i} actuator run?"
            for u in urls:  # warm: each process has answered (and cached) the question before the write
                httpx.post(u + "/v1/query", json={"question": question}, timeout=60)
            rag.ingest([{"id": f"fresh-{i}", "text": fact}])
            committed = time.perf_counter()
            for label, u in zip(delays, urls):
                fresh_in_a_row, first = 0, None
                need = 1 if label.startswith("A") else 4  # B: 4 fresh answers in a row (both workers, surely)
                while fresh_in_a_row < need:
                    r = httpx.post(u + "/v1/query", json={"question": question}, timeout=60).json()
                    if code in r.get("answer", ""):
                        fresh_in_a_row += 1
                        first = first if first is not None else (time.perf_counter() - committed) * 1000
                    else:
                        fresh_in_a_row = 0
                        polls.append(1)
                    if time.perf_counter() - committed > 60:
                        raise SystemExit(f"{label}: the new fact was not answered within 60 s")
                delays[label].append(first)
        out = {"backend": args.backend, "base_chunks": base.chunks_added, "rounds": args.rounds,
               "stale_answers_after_commit": len(polls),
               **{k: {"p50_ms": round(percentile(v, 50), 1), "max_ms": round(max(v), 1)} for k, v in delays.items()}}
        print(json.dumps(out))
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(15)
        rag.close()
        if server is not None:
            server.destroy()


if __name__ == "__main__":
    main()

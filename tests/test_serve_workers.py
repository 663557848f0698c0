"""Issue 29: ``ragbudget serve --workers 2`` — two real uvicorn worker processes; ``/metrics`` from either
shows the sum over both (prometheus-client multiprocess mode), and the metrics folder is removed at exit."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from ragbudget import RAG, load_config

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _requests_total(text: str) -> float:
    return sum(s.value for f in text_string_to_metric_families(text) if f.name == "ragbudget_requests"
               for s in f.samples if s.name == "ragbudget_requests_total")


def _per_worker(metrics_dir: Path) -> dict[str, float]:
    """requests_total from each worker's own file (what the scrape must sum)."""
    out = {}
    for f in metrics_dir.glob("counter_*.db"):
        fams = MultiProcessCollector._read_metrics([str(f)])  # one process's values, nothing merged
        out[f.stem.split("_")[-1]] = sum(s.value for m in fams.values() for s in m.samples
                                         if s.name == "ragbudget_requests_total")
    return out


def test_serve_with_two_workers_aggregates_metrics(tmp_path, embedder):
    cfg = tmp_path / "serve.yaml"
    cfg.write_text(f"index:\n  dir: {tmp_path / 'indexes'}\nservice:\n  gc_freeze: false\n", encoding="utf-8")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "note.md").write_text("# Budgets\n\nA context budget caps the tokens each prompt section may use.\n")
    with RAG(load_config(cfg), embedder=embedder) as rag:  # the index the workers serve
        rag.ingest(docs, index="default")
    port = _free_port()
    metrics_dir = tmp_path / "prom"  # set by us, so the test can read each worker's file; serve keeps it
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "ragbudget", "serve", "--config", str(cfg), "--port", str(port),
                             "--workers", "2", "--log-level", "warning"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        ready = 0
        while ready < 6:  # both workers up: several fresh connections in a row answer ready
            assert proc.poll() is None and time.monotonic() < deadline, "serve did not start"
            try:
                ready = ready + 1 if httpx.get(url + "/readyz", timeout=5).status_code == 200 else 0
            except httpx.HTTPError:
                ready = 0
            time.sleep(0.25 if ready == 0 else 0.02)

        def ask(i: int) -> str:
            r = httpx.post(url + "/v1/query", json={"question": f"what is {i} * 7"}, timeout=60)
            return "ok" if r.status_code == 200 else f"{r.status_code} {r.text[:300]}"

        sent = 0
        with ThreadPoolExecutor(8) as pool:
            while True:  # until each worker has answered some (the kernel picks the worker per connection)
                codes = list(pool.map(ask, range(sent, sent + 16)))
                assert set(codes) == {"ok"}, codes
                sent += 16
                per = _per_worker(metrics_dir)
                if sum(1 for v in per.values() if v > 0) >= 2 or sent >= 320:
                    break
        assert sum(1 for v in per.values() if v > 0) == 2, per
        assert sum(per.values()) == sent
        totals = {_requests_total(httpx.get(url + "/metrics", timeout=10).text) for _ in range(12)}
        assert totals == {float(sent)}  # every scrape, whichever worker answers it, shows the sum
        text = httpx.get(url + "/metrics", timeout=10).text
        assert "ragbudget_request_duration_seconds_bucket" in text and "_ms" not in text
        # an ingest job in a worker (the BM25 rebuild opens a tqdm bar, whose lock was a leaked semaphore)
        job = httpx.post(url + "/v1/ingest", json={"records": [{"id": "n2", "text": "Output has its own cap."}]},
                         timeout=30).json()
        while (st := httpx.get(url + job["status_url"], timeout=10).json())["state"] not in ("done", "failed"):
            assert time.monotonic() < deadline + 120, st
            time.sleep(0.2)
        assert st["state"] == "done", st
    finally:
        proc.terminate()  # `kill PID` of serve: the parent stops its workers (the group gets nothing)
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
    # serve ends as cleanly as it ran: no resource-tracker warning about semaphores its workers left behind
    assert b"leaked semaphore" not in out, out.decode(errors="replace")[-2000:]


def test_serve_with_workers_removes_the_metrics_dir_it_made(tmp_path):
    """Without PROMETHEUS_MULTIPROC_DIR, serve makes a fresh folder for its workers and removes it at exit."""
    code = ("import os, sys\n"
            "from ragbudget.observe.metrics import MULTIPROC_ENV, multiprocess_dir\n"
            "with multiprocess_dir() as d:\n"
            "    assert os.environ[MULTIPROC_ENV] == d and os.path.isdir(d)\n"
            "print(d, MULTIPROC_ENV in os.environ, os.path.exists(d))\n")
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[1:] == ["False", "False"]

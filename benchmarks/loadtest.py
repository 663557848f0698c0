"""Bounded load test of ``ragbudget serve`` on loopback: TTFT and throughput unloaded, then open-loop
Poisson traffic at 2× the sustainable rate with admission control on and off, then batch traffic alongside.

    .venv/bin/python benchmarks/loadtest.py --docs 200 --duration 15 --json loadtest.json

Every phase is bounded in request count and wall time. The server runs in a subprocess
(``python -m ragbudget serve``) so the load generator does not share its interpreter. Data: the first
``--docs`` documents of a BEIR folder (``--data``, default ../shared/data/eval/cranfield), questions cycled
from its queries.jsonl.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from _common import EVAL_DATA, ROOT, data_dir  # first: puts the checkout on sys.path
from ragbudget.config import Config, dump_config
from ragbudget.pipeline import RAG
from ragbudget.kernels.stats import percentile

DATA = EVAL_DATA / "cranfield"
# A fresh server answers its first ~100-200 requests up to 2x slower (allocator, lazy imports, caches);
# both servers get the same warm-up so that unloaded and loaded phases compare like with like.
WARMUP = 200
MAX_IN_FLIGHT = 400  # client-side cap on concurrent requests (bounds the generator itself)


@dataclass
class Result:
    status: int
    ttft_ms: float | None
    e2e_ms: float
    degrade_level: int | None = None
    queue_wait_ms: float | None = None  # server-side, from the final event
    server_ttft_ms: float | None = None  # server-side TTFT (handler start → first token), queue included
    pipeline_ms: float | None = None  # the pipeline's own total (its thread, start to final event)


@dataclass
class Phase:
    name: str
    offered_rps: float
    wall_s: float
    results: list[Result] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        ok = [r for r in self.results if r.status == 200 and r.ttft_ms is not None]
        rej = [r for r in self.results if r.status == 429]
        ttft = sorted(r.ttft_ms for r in ok if r.ttft_ms is not None)
        e2e = sorted(r.e2e_ms for r in ok)
        levels = [r.degrade_level for r in ok if r.degrade_level is not None]
        waits = sorted(r.queue_wait_ms for r in ok if r.queue_wait_ms is not None)
        server_ttft = sorted(r.server_ttft_ms for r in ok if r.server_ttft_ms is not None)
        pipeline = sorted(r.pipeline_ms for r in ok if r.pipeline_ms is not None)
        # TTFT minus the time spent queued: what the request cost once it had a slot
        service = sorted(r.ttft_ms - (r.queue_wait_ms or 0.0) for r in ok)  # type: ignore[operator]
        return {
            "phase": self.name, "offered_rps": round(self.offered_rps, 2), "sent": len(self.results),
            "ok": len(ok), "rejected_429": len(rej),
            "other_errors": len(self.results) - len(ok) - len(rej),
            "throughput_rps": round(len(ok) / self.wall_s, 2) if self.wall_s else 0.0,
            "ttft_p50_ms": pct(ttft, 50), "ttft_p95_ms": pct(ttft, 95), "ttft_p99_ms": pct(ttft, 99),
            "e2e_p99_ms": pct(e2e, 99), "queue_wait_p99_ms": pct(waits, 99),
            "server_ttft_p50_ms": pct(server_ttft, 50), "server_ttft_p99_ms": pct(server_ttft, 99),
            "service_p50_ms": pct(service, 50), "service_p99_ms": pct(service, 99),
            "pipeline_p50_ms": pct(pipeline, 50), "pipeline_p99_ms": pct(pipeline, 99),
            "reject_p99_ms": pct(sorted(r.e2e_ms for r in rej), 99),
            "max_degrade_level": max(levels) if levels else None,
        }


def pct(values: list[float], q: float) -> float | None:
    """``stats.percentile`` rounded for the report; None for no values."""
    return round(percentile(values, q), 1) if values else None


async def one_request(client: httpx.AsyncClient, question: str, priority: str = "interactive") -> Result:
    """Stream one query; TTFT = first ``token`` event (or the final event if no token came)."""
    t0 = time.perf_counter()
    ttft = None
    level = None
    wait = server_ttft = pipeline = None
    try:
        async with client.stream("POST", "/v1/query", json={"question": question, "stream": True,
                                                            "priority": priority}) as r:
            if r.status_code != 200:
                await r.aread()
                return Result(r.status_code, None, (time.perf_counter() - t0) * 1000)
            event = ""
            async for line in r.aiter_lines():
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:") and event in ("token", "final"):
                    if ttft is None:
                        ttft = (time.perf_counter() - t0) * 1000
                    if event == "final":
                        final = json.loads(line[5:])
                        level, wait = final.get("degrade_level"), final.get("queue_wait_ms")
                        server_ttft = final.get("server_ttft_ms")
                        pipeline = (final.get("timings") or {}).get("total_ms")
                elif line.startswith("data:") and event == "error":
                    # In-band error after the status line: an admission rejection (queue timeout while
                    # waiting for a slot) counts as a 429; anything else as an error.
                    kind = json.loads(line[5:]).get("error", {}).get("type", "")
                    code = 429 if kind == "AdmissionError" else 599
                    return Result(code, None, (time.perf_counter() - t0) * 1000)
    except httpx.HTTPError:
        return Result(598, None, (time.perf_counter() - t0) * 1000)
    return Result(200, ttft, (time.perf_counter() - t0) * 1000, level, wait, server_ttft, pipeline)


async def closed_loop(url: str, questions: list[str], concurrency: int, n: int, max_s: float, name: str) -> Phase:
    """``concurrency`` workers back to back, ``n`` requests at most, ``max_s`` seconds at most."""
    phase = Phase(name, 0.0, 0.0)
    it = iter(range(n))
    deadline = time.monotonic() + max_s
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        async def worker() -> None:
            for i in it:
                if time.monotonic() > deadline:
                    return
                phase.results.append(await one_request(client, questions[i % len(questions)]))
        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        phase.wall_s = time.perf_counter() - t0
    phase.offered_rps = len(phase.results) / phase.wall_s
    return phase


async def open_loop(url: str, questions: list[str], rps: float, duration_s: float, name: str,
                    seed: int = 0) -> Phase:
    """Poisson arrivals at ``rps`` for ``duration_s`` (at most rps×duration×1.5 requests)."""
    rng = random.Random(seed)
    phase = Phase(name, rps, 0.0)
    limit = int(rps * duration_s * 1.5) + 1
    sem = asyncio.Semaphore(MAX_IN_FLIGHT)
    async with httpx.AsyncClient(base_url=url, timeout=120,
                                 limits=httpx.Limits(max_connections=MAX_IN_FLIGHT)) as client:
        async def fire(q: str) -> None:
            async with sem:
                phase.results.append(await one_request(client, q))
        tasks = []
        t0 = time.perf_counter()
        next_at = 0.0
        for i in range(limit):
            next_at += rng.expovariate(rps)
            if next_at > duration_s:
                break
            await asyncio.sleep(max(0.0, next_at - (time.perf_counter() - t0)))
            tasks.append(asyncio.create_task(fire(questions[i % len(questions)])))
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=duration_s + 120)
        phase.wall_s = time.perf_counter() - t0
    return phase


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """``python -m ragbudget serve`` (this checkout's) in a subprocess; waits for /readyz (bounded)."""

    def __init__(self, config_path: Path, timeout_s: float = 300, cpus: set[int] | None = None) -> None:
        self.cpus = cpus
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [sys.executable, "-m", "ragbudget", "serve", "--config", str(config_path), "--port",
                    str(self.port), "--log-level", "warning"]
        self.timeout_s = timeout_s

    def __enter__(self) -> "ServerProcess":
        cpus = self.cpus
        pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        self.proc = subprocess.Popen(self.cmd, preexec_fn=pin, env={**os.environ, "PYTHONPATH": path})
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}")
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.proc.kill()
        raise RuntimeError("server did not become ready")

    def __exit__(self, *exc: Any) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def build(work: Path, n_docs: int, data: Path = DATA) -> tuple[Config, list[str]]:
    corpus = (data / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:n_docs]
    (work / "docs.jsonl").write_text("\n".join(corpus) + "\n", encoding="utf-8")
    questions = [json.loads(x)["text"] for x in (data / "queries.jsonl").read_text(encoding="utf-8").splitlines()]
    cfg = Config().with_overrides({
        "index.dir": str(work / "indexes"), "cache.response": False, "cache.retrieval": False,
        "cache.semantic.enabled": False, "service.batch_dir": str(work / "batches"),
        "service.tenants": [{"name": "default", "requests_per_s": 10000, "burst": 10000,
                             "tokens_per_s": 1e9, "token_burst": 10**9}],
    })
    rag = RAG(cfg)
    rag.warm_up()
    rag.ingest(work / "docs.jsonl", index=cfg.index.name)
    return cfg, questions


def phase_config(cfg: Config, work: Path, name: str, **over: Any) -> Path:
    path = work / f"{name}.yaml"
    dump_config(cfg.with_overrides(over), path)
    return path


async def submit_batch(url: str, questions: list[str], n: int) -> str:
    body = "".join(json.dumps({"id": f"b{i}", "question": questions[-1 - i % len(questions)]}) + "\n"
                   for i in range(n))
    async with httpx.AsyncClient(base_url=url, timeout=30) as c:
        r = await c.post("/v1/batches", content=body.encode())
        r.raise_for_status()
        return r.json()["status_url"]


async def batch_progress(url: str, status_url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, timeout=30) as c:
        return (await c.get(status_url)).json()


def run(n_docs: int, duration_s: float, slots: int, server_cpus: set[int] | None = None,
        client_cpus: set[int] | None = None, data: Path = DATA) -> dict[str, Any]:
    """All phases. ``server_cpus`` / ``client_cpus`` pin the server and this load generator to disjoint
    cores, so the generator's own CPU use does not show up as server latency."""
    with tempfile.TemporaryDirectory(prefix="ragbudget-load-") as tmp:
        work = Path(tmp)
        cfg, questions = build(work, n_docs, data)
        if client_cpus:
            os.sched_setaffinity(0, client_cpus)
        base = {"service.limits.max_concurrent": slots}
        phases: list[Phase] = []
        with ServerProcess(phase_config(cfg, work, "off", **base, **{"service.admission.enabled": False}),
                           cpus=server_cpus) as srv:
            asyncio.run(closed_loop(srv.url, questions, 1, WARMUP, 120, "warmup"))
            unloaded = asyncio.run(closed_loop(srv.url, questions, 1, 200, 120, "unloaded (1 client)"))
            saturated = asyncio.run(closed_loop(srv.url, questions, slots * 2, 60, 90, f"closed loop ({slots * 2})"))
            sustainable = saturated.summary()["throughput_rps"]  # answered requests only
            phases += [unloaded, saturated]
            phases.append(asyncio.run(open_loop(srv.url, questions, 2 * sustainable, duration_s,
                                                "2x sustainable, admission OFF")))
        u = unloaded.summary()
        slo_ttft = 1.5 * (u["ttft_p95_ms"] or 100.0)
        # The goal is admitted P99 TTFT <= 1.5x unloaded P99, so a request may wait at most the
        # difference (0.5x unloaded P99) for a slot: a request whose service time is at the unloaded
        # P99 and that waited that long still meets it. Waiting longer only produces a late answer.
        queue_timeout_s = max(0.005, 0.5 * (u["ttft_p99_ms"] or 100.0) / 1000)
        adm = {**base, "service.admission.enabled": True, "service.admission.slo_ttft_p95_ms": slo_ttft,
               "service.admission.slo_queue_wait_ms": 0.5 * slo_ttft,
               "service.admission.queue_size": slots, "service.admission.window_s": 5.0,
               "service.admission.min_samples": 10,
               "service.admission.queue_timeout_s": queue_timeout_s}
        with ServerProcess(phase_config(cfg, work, "on", **adm), cpus=server_cpus) as srv:
            asyncio.run(closed_loop(srv.url, questions, 1, WARMUP, 120, "warmup"))
            phases.append(asyncio.run(open_loop(srv.url, questions, 2 * sustainable, duration_s,
                                                "2x sustainable, admission ON", seed=1)))
            time.sleep(6)  # let the ladder's window forget the overload
            status_url = asyncio.run(submit_batch(srv.url, questions, 400))
            phases.append(asyncio.run(open_loop(srv.url, questions, 0.7 * sustainable, duration_s,
                                                "0.7x sustainable + batch job, admission ON", seed=2)))
            batch = asyncio.run(batch_progress(srv.url, status_url))
        return {"docs": n_docs, "slots": slots, "sustainable_rps": round(sustainable, 2),
                "slo_ttft_p95_ms": round(slo_ttft, 1),
                "queue_timeout_ms": round(queue_timeout_s * 1000, 1),
                "server_cpus": sorted(server_cpus or []), "client_cpus": sorted(client_cpus or []),
                "phases": [p.summary() for p in phases],
                "batch_during_last_phase": {"finished": batch.get("detail", {}).get("finished"),
                                            "total": batch.get("detail", {}).get("total")}}


def cpu_set(spec: str | None) -> set[int] | None:
    """``"0"``, ``"0,2"`` or ``"0-3"`` → a set of core numbers; checked against this machine."""
    if not spec:
        return None
    cpus: set[int] = set()
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        try:
            cpus.update(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            raise SystemExit(f"bad CPU list {spec!r}: use e.g. 0 or 0,1 or 0-3") from None
    have = os.sched_getaffinity(0)
    if not cpus <= have:
        raise SystemExit(f"CPU list {spec!r} names cores this process cannot use (available: {sorted(have)})")
    return cpus


def markdown(report: dict[str, Any]) -> str:
    cols = ["phase", "offered_rps", "sent", "ok", "rejected_429", "other_errors", "throughput_rps",
            "ttft_p50_ms", "ttft_p95_ms", "ttft_p99_ms", "queue_wait_p99_ms", "server_ttft_p50_ms",
            "server_ttft_p99_ms", "pipeline_p50_ms", "pipeline_p99_ms", "service_p50_ms",
            "service_p99_ms", "reject_p99_ms", "max_degrade_level"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(p[c]) for c in cols) + " |" for p in report["phases"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=200)
    ap.add_argument("--duration", type=float, default=15.0, help="seconds per open-loop phase")
    ap.add_argument("--slots", type=int, default=2, help="service.limits.max_concurrent")
    ap.add_argument("--server-cpus", default=None, help="pin the server to these cores, e.g. 0 or 0-1")
    ap.add_argument("--client-cpus", default=None, help="pin this load generator to these cores, e.g. 1")
    ap.add_argument("--json", default=None, help="write the report here")
    ap.add_argument("--data", default=str(DATA), help="BEIR folder: corpus.jsonl + queries.jsonl (default: %(default)s)")
    args = ap.parse_args(argv)
    data = data_dir(args.data, "corpus.jsonl", "queries.jsonl")
    report = run(args.docs, args.duration, args.slots, cpu_set(args.server_cpus), cpu_set(args.client_cpus), data)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(json.dumps({k: v for k, v in report.items() if k != "phases"}))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Replay on a real RAG (50 Cranfield abstracts, extractive backend): in process and over real HTTP."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from pathlib import Path

import pytest
import uvicorn

from ragbudget.config import Config
from ragbudget.eval.replay import HttpTarget, LibraryTarget, ReplayReport, plot, replay, rich_table
from ragbudget.eval.traffic import generate, load_questions, parse_lines
from ragbudget.pipeline import RAG
from ragbudget.service.app import create_app

N_DOCS = 50


@pytest.fixture(scope="module")
def rag(shared_data: Path, tmp_path_factory: pytest.TempPathFactory, embedder) -> RAG:
    src = shared_data / "eval" / "cranfield" / "corpus.jsonl"
    work = tmp_path_factory.mktemp("replay")
    (work / "docs.jsonl").write_text("\n".join(src.read_text(encoding="utf-8").splitlines()[:N_DOCS]) + "\n",
                                     encoding="utf-8")
    cfg = Config().with_overrides({"index.dir": str(work / "indexes"), "embedding.cache": False,
                                   "service.batch_dir": str(work / "batches")})
    r = RAG(cfg, embedder=embedder)
    r.warm_up()
    r.ingest(work / "docs.jsonl")
    yield r
    r.close()


@pytest.fixture(scope="module")
def traffic(shared_data: Path):
    qs = load_questions(shared_data / "eval" / "cranfield")[:40]
    return generate(qs, 14, rate=200.0, repeat=0.3, paraphrase_rate=0.2, seed=5, history_max=2, max_tokens=64)


def _check(report: ReplayReport, traffic) -> dict:
    s = report.summary()
    assert s["sent"] == s["ok"] == len(traffic), s["errors_by_status"]
    assert s["ttft_p50_ms"] is not None and s["e2e_p99_ms"] >= s["e2e_p50_ms"] > 0
    assert s["ttft_p95_ms"] <= s["e2e_p99_ms"]
    by_id = {r.id: r for r in report.results}
    firsts: set[str] = set()
    for rec in traffic:  # sent one at a time: an exact repeat of an answered question hits the cache
        res = by_id[rec.id]
        if rec.kind == "repeat" and rec.history_len == 0 and rec.question in firsts:
            assert res.cache_layer is not None, rec
        if rec.history_len == 0:
            firsts.add(rec.question)
        if res.cache_layer is None:
            assert res.prompt_tokens > 0 and res.stages.get("generate") is not None
            assert 0 < res.overhead_ms < res.total_ms + 1e-6 and res.search_ms > 0
    assert s["cache_hit_rate"] == round(sum(1 for r in report.results if r.cache_layer) / len(traffic), 4)
    assert s["prompt_tokens_total"] == sum(r.prompt_tokens for r in report.results)
    return s


def test_replay_library(rag: RAG, traffic, tmp_path: Path) -> None:
    assert any(r.kind == "repeat" for r in traffic)
    report = asyncio.run(replay(traffic, LibraryTarget(rag), max_in_flight=1, max_s=120))
    s = _check(report, traffic)
    png = plot(report.results, tmp_path / "replay.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads(report.to_json())
    assert data["summary"]["ok"] == s["ok"] and len(data["requests"]) == len(traffic)
    assert rich_table(s).row_count > 10


def test_replay_bounds(rag: RAG) -> None:
    recs = parse_lines([json.dumps({"t": t, "question": "wing flutter at supersonic speed"}) for t in (0, 0, 50)])
    report = asyncio.run(replay(recs, LibraryTarget(rag), max_s=2))
    assert report.summary()["sent"] == 2 and report.skipped == 1
    assert len(asyncio.run(replay(recs, LibraryTarget(rag), max_requests=1)).results) == 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_replay_http(rag: RAG, traffic) -> None:
    rag.cache.clear() if hasattr(rag.cache, "clear") else None
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(rag), host="127.0.0.1", port=port, log_level="warning"))
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        async def go() -> ReplayReport:
            target = HttpTarget(f"http://127.0.0.1:{port}")
            try:
                # a fresh tenant-independent question set: prefix so the library run's cache does not answer
                recs = [r.__class__(**{**r.to_dict(), "question": "Over HTTP: " + r.question}) for r in traffic]
                return await replay(recs, target, max_in_flight=1, max_s=120), recs
            finally:
                await target.aclose()
        report, recs = asyncio.run(go())
        _check(report, recs)
        bad = asyncio.run(replay(parse_lines(['{"t": 0, "question": "x", "max_tokens": 100000000}']),
                                 HttpTarget(f"http://127.0.0.1:{port}"), max_s=30))
        assert bad.results[0].status == 422 and bad.summary()["errors_by_status"] == {"422": 1}
    finally:
        server.should_exit = True
        th.join(10)

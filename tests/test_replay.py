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
from ragbudget.eval.compare import RATIO_KEYS, compare_table, markdown, run_compare
from ragbudget.eval.replay import (SUMMARY_ROWS, HttpTarget, LibraryTarget, ReplayReport, RequestResult, plot, replay,
                                   rich_table, summarize)
from ragbudget.eval.traffic import generate, load_questions, parse_lines
from ragbudget.pipeline import RAG
from ragbudget.service.app import create_app

N_DOCS = 50


@pytest.fixture(scope="module")
def rag(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> RAG:
    src = shared_data / "eval" / "cranfield" / "corpus.jsonl"
    work = tmp_path_factory.mktemp("replay")
    (work / "docs.jsonl").write_text("\n".join(src.read_text(encoding="utf-8").splitlines()[:N_DOCS]) + "\n",
                                     encoding="utf-8")
    # small candidate sets and the embedding cache keep the bi-encoder rerank/trim cheap on 2 cores
    cfg = Config().with_overrides({"index.dir": str(work / "indexes"), "retrieval.top_k": 4, "rerank.top_n": 4,
                                   "service.batch_dir": str(work / "batches")})
    r = RAG(cfg)
    r.warm_up()
    r.ingest(work / "docs.jsonl")
    yield r
    r.close()


@pytest.fixture(scope="module")
def traffic(shared_data: Path):
    qs = load_questions(shared_data / "eval" / "cranfield")[:40]
    return generate(qs, 10, rate=200.0, repeat=0.3, paraphrase_rate=0.2, seed=5, history_max=2, max_tokens=64)


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
            assert 0 < res.overhead_ms < res.total_ms + 1e-6
            assert (res.search_ms > 0) != res.retrieval_hit  # a retrieval-cache hit skips the searches
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


def test_overhead_row_says_it_covers_fresh_answers_only() -> None:
    # the e2e row covers every request, cache hits included; overhead only the answers generated fresh, so a
    # replay with many hits prints an overhead above its end-to-end P50 — the label must say which requests
    hit = RequestResult(id="a", kind="repeat", e2e_ms=1.0, total_ms=1.0, cache_layer="exact")
    fresh = RequestResult(id="b", kind="fresh", e2e_ms=100.0, total_ms=100.0, stages={"generate": 10.0})
    s = summarize([hit, hit, fresh], wall_s=1.0)
    assert s["overhead_p50_ms"] == 90.0 and s["e2e_p50_ms"] == 1.0
    rows = {label: fn(s) for label, fn in SUMMARY_ROWS}
    (label,) = [k for k in rows if k.startswith("overhead")]
    assert "answered-fresh" in label and rows[label] == "90.0 / 90.0"


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


def test_compare_cache_on_off(rag: RAG, traffic) -> None:
    off = RAG(rag.config.with_overrides({"cache.response": False, "cache.retrieval": False,
                                         "cache.semantic.enabled": False}), embedder=rag.embedder)
    try:
        recs = [r.__class__(**{**r.to_dict(), "question": "A/B: " + r.question, "history_len": 0}) for r in traffic]
        assert any(r.kind == "repeat" for r in recs[1:])
        rep = run_compare(recs, LibraryTarget(rag, name="on"), LibraryTarget(off, name="off"), max_s=300)
    finally:
        off.close()
    s = rep.summary()
    assert [r.id for r in rep.a] == [r.id for r in rep.b] == [r.id for r in recs]
    assert s["b"]["cache_hit_rate"] == 0.0 and s["a"]["cache_hit_rate"] > 0
    assert s["ratio_b_over_a"]["cache_hit_rate"] == 0.0
    assert s["ratio_b_over_a"]["e2e_p50_ms"] == round(s["b"]["e2e_p50_ms"] / s["a"]["e2e_p50_ms"], 3)
    assert "B/A" in markdown(s) and compare_table(s).row_count > len(RATIO_KEYS)

"""Issue 25 (4): no request can stall the rest — limits on embeddings, index-lock waits off the query pool,
health that reports a stalled pool, abandoned requests cancelled. Real uvicorn server on loopback, real RAG."""

from __future__ import annotations

import time

import httpx
import pytest
from service_fixtures import SlowGenerator
from test_tenant_safety import QUESTION, _client, server  # noqa: F401  (module fixture)

from ragbudget.pipeline import RAG
from ragbudget.service.app import BackgroundServer, create_app


# 4 ------------------------------------------------------------------------------------------------
def test_embeddings_cap_inputs_and_obey_the_tenants_rate(server):
    with _client(server, "acme") as c:
        r = c.post("/v1/embeddings", json={"input": ["x"] * 1000})
        assert r.status_code == 400 and "max_embedding_inputs" in r.json()["error"]["fix"]
        r = c.post("/v1/embeddings", content='{"input": ["a \\udfff"]}', headers={"content-type": "application/json"})
        assert 400 <= r.status_code < 500
    with _client(server, "tiny") as c:  # 'tiny': burst 2, then 0.0005 requests/s
        answers = [c.post("/v1/embeddings", json={"input": "wing lift"}) for _ in range(4)]
    codes = [r.status_code for r in answers]
    assert 429 in codes and codes.count(200) <= 2, codes
    assert all("retry-after" in r.headers for r in answers if r.status_code == 429)


def test_ingest_jobs_waiting_on_the_index_lock_never_stall_queries(cranfield_rag, service_config):
    import threading  # noqa: PLC0415

    from ragbudget.pipeline import RAG  # noqa: PLC0415

    cfg = service_config.with_overrides({"index.lock_timeout_s": 60})
    rag = RAG(cfg, embedder=cranfield_rag.embedder)
    release, held = threading.Event(), threading.Event()

    def hold() -> None:  # another writer holds the index's lock (as a CLI ingest would)
        with rag.indexes.backend.write_lock("default", 5):
            held.set()
            release.wait(90)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert held.wait(10)
    try:
        with BackgroundServer(create_app(rag, cfg)) as srv, _client(srv, "acme") as c:
            for i in range(12):  # more waiting writes than the default thread pool has threads
                r = c.post("/v1/ingest", json={"index": "default", "records": [{"id": f"w{i}", "text": f"wait {i}"}]})
                assert r.status_code == 202, r.text
            time.sleep(0.5)
            t0 = time.monotonic()
            r = c.post("/v1/query", json={"question": QUESTION}, timeout=30)
            assert r.status_code == 200 and time.monotonic() - t0 < 10
            assert httpx.get(srv.url + "/healthz", timeout=10).status_code == 200
    finally:
        release.set()


def test_healthz_reports_a_stalled_worker_pool():
    import asyncio  # noqa: PLC0415
    import threading  # noqa: PLC0415
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    from ragbudget.service import ops  # noqa: PLC0415

    async def scenario() -> tuple[int, object]:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
        unblock = threading.Event()
        blocked = loop.run_in_executor(None, unblock.wait)  # the only worker is stuck (a lock wait)
        stalled = await ops.healthz()
        unblock.set()
        await blocked
        return stalled.status_code, await ops.healthz()

    status, healthy = asyncio.run(scenario())
    assert status == 503 and healthy == {"status": "ok"}


@pytest.fixture(scope="module")
def slow_server(cranfield_rag, service_config):
    cfg = service_config.with_overrides({"llm.tiers": [{"name": "slow", "backend": "scripted", "model": "slow"}],
                                         "cache.response": False, "service.limits.max_concurrent": 1})
    gen = SlowGenerator()
    rag = RAG(cfg, generators={"slow": gen}, embedder=cranfield_rag.embedder)
    with BackgroundServer(create_app(rag, cfg)) as srv:
        yield srv, gen


def test_abandoned_non_streaming_request_stops_generating_and_frees_its_slot(slow_server):
    srv, gen = slow_server
    with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes the connection
        with _client(srv) as c:
            c.post("/v1/query", json={"question": QUESTION, "max_tokens": 200}, timeout=1.0)
    assert gen.finished.wait(timeout=5), "generation still running after the client left"
    assert gen.requested >= 100 and gen.produced < gen.requested
    state = srv.app.state.svc
    deadline = time.monotonic() + 5
    while (state.in_flight or state.admission.limiter.active) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert state.in_flight == 0 and state.admission.limiter.active == 0
    with _client(srv) as c:  # the one slot is free again
        assert c.post("/v1/query", json={"question": QUESTION, "max_tokens": 5}).status_code == 200

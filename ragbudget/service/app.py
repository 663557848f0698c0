"""``create_app``: the FastAPI app over one :class:`~ragbudget.pipeline.RAG` (routes hold no business logic).

Models load in the app's startup (``warm_up`` in a worker thread); until then ``/readyz`` answers 503 and
query routes answer 503 with Retry-After. Unfinished batch jobs resume at startup.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import threading
import time
from typing import Any, AsyncIterator, Callable

import uvicorn
from fastapi import FastAPI

from ..config import Config, load_config
from ..errors import RagBudgetError
from ..eval.capture import open_capture
from ..pipeline import RAG
from . import batch_jobs, heap, ingest, openai_compat, ops, query
from .errors import error_body, install_error_handlers
from .state import ServiceState

log = logging.getLogger(__name__)
CONFIG_ENV = "RAGBUDGET_SERVE_CONFIG"  # config path for worker processes (``ragbudget serve --workers N``)


class BodyLimit:
    """Refuse request bodies over ``max_bytes`` with 413 JSON (declared length or streamed bytes)."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            return await self._refuse(send)
        seen = 0
        too_big = False

        async def limited_receive() -> dict:
            nonlocal seen, too_big
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.max_bytes:
                    too_big = True
                    return {"type": "http.disconnect"}
            return msg

        started = False

        async def tracking_send(msg: dict) -> None:
            nonlocal started
            if too_big and not started:
                return
            started = started or msg["type"] == "http.response.start"
            await send(msg)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except Exception:
            if not too_big:
                raise
        if too_big and not started:
            await self._refuse(send)

    async def _refuse(self, send: Callable) -> None:
        body = json.dumps(error_body("payload_too_large", f"request body over {self.max_bytes} bytes",
                                     "send a smaller body (service.limits.max_body_bytes)")).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def create_app(rag: RAG | Callable[[], RAG] | None = None, config: Config | None = None, *,
               environ: dict[str, str] | None = None, freeze_heap: bool = False) -> FastAPI:
    """The API app. ``rag``: a RAG, a factory returning one, or None (``RAG(config)``).

    ``freeze_heap``: for a process that exists to serve this app (``ragbudget serve``): once models and
    indexes are loaded, :func:`gc.freeze` them, so the cyclic collector never walks the ~600k objects of
    torch, transformers and the indexes again (a full collection over them takes ~0.4 s, BENCHMARKS.md).
    Leave it off when embedding the app in another program: freezing is process-wide."""
    if config is None:
        config = rag.config if isinstance(rag, RAG) else load_config()
    if rag is None:
        factory: Callable[[], RAG] = lambda: RAG(config)  # noqa: E731
    elif isinstance(rag, RAG):
        factory = lambda: rag  # noqa: E731
    else:
        factory = rag
    state = ServiceState.build(config, factory, environ)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            state.rag = await asyncio.to_thread(factory)
            state.metrics = state.rag.metrics  # one metrics path: the pipeline records answers there
            state.rag.indexes.bulk_threads = None  # ingest jobs keep embedding.threads: queries share the process
            await asyncio.to_thread(state.rag.warm_up)
            if config.service.preload_indexes:
                await asyncio.to_thread(preload_indexes, state.rag)
            if freeze_heap:
                await asyncio.to_thread(heap.freeze)
                state.heap_frozen = True
            state.capture = open_capture(config.service.capture.path, config.service.capture.redact)
            state.ready = True
            resumed = batch_jobs.resume_pending(state)
            if resumed:
                log.info("resumed batch jobs: %s", resumed)
        except RagBudgetError as err:
            state.startup_error = str(err)
            log.error("ragbudget service not ready: %s", err)
        yield
        for job in list(state.jobs.values()):
            if job.task is not None and not job.task.done():
                job.task.cancel()
        await asyncio.gather(*(j.task for j in state.jobs.values() if j.task), return_exceptions=True)
        state.writer.shutdown(wait=False, cancel_futures=True)
        if state.capture is not None:  # every captured line is on disk before the app is gone
            await asyncio.to_thread(state.capture.close)
        state.metrics.close()  # a worker under `serve --workers N`: its live gauges stop counting

    app = FastAPI(title="ragbudget", version="0.1.0", lifespan=lifespan,
                  description="RAG under explicit token budgets: query, OpenAI-compatible chat, ingest, batches.")
    app.state.svc = state
    install_error_handlers(app)
    for r in (query.router, openai_compat.router, ingest.router, batch_jobs.router, ops.router):
        app.include_router(r)
    app.add_middleware(BodyLimit, max_bytes=config.service.limits.max_body_bytes)
    return app


def preload_indexes(rag: RAG) -> list[str]:
    """Load every index under ``index.dir`` now, so no request pays for it; one that cannot be loaded
    (e.g. built with another embedding model) is logged and left for its queries to report."""
    loaded = []
    for name in rag.list_indexes():
        try:
            rag.indexes.get(name)
            loaded.append(name)
        except RagBudgetError as err:
            log.warning("index %r not preloaded: %s", name, err)
    return loaded


def _no_process_locks_for_progress_bars() -> None:
    """bm25s (the local index's BM25 rebuild) opens a tqdm bar even with its progress off, and tqdm's first bar
    makes a multiprocessing lock: a named semaphore registered with the parent's resource tracker, which a
    uvicorn worker does not release at exit, so ``serve --workers N`` ended with "resource_tracker: There appear
    to be N leaked semaphore objects". A worker never shares a bar with another process: a thread lock does."""
    from tqdm import tqdm  # noqa: PLC0415 - a dependency of bm25s, sentence-transformers and llama-index

    tqdm.set_lock(threading.RLock())


def app_from_env() -> FastAPI:
    """uvicorn factory for worker processes: config from ``$RAGBUDGET_SERVE_CONFIG`` (or defaults)."""
    _no_process_locks_for_progress_bars()
    cfg = load_config(os.environ.get(CONFIG_ENV) or None)
    return create_app(None, cfg, freeze_heap=cfg.service.gc_freeze)


class BackgroundServer:
    """Run an app under uvicorn in a daemon thread on 127.0.0.1 (tests, notebooks, load tests)::

        with BackgroundServer(create_app(rag, cfg)) as srv:
            httpx.get(srv.url + "/healthz")
    """

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0, *, start_timeout_s: float = 120.0,
                 log_level: str = "warning") -> None:
        if port == 0:
            with socket.socket() as s:
                s.bind((host, 0))
                port = s.getsockname()[1]
        self.url = f"http://{host}:{port}"
        self.app = app
        self.start_timeout_s = start_timeout_s
        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level,
                                                    lifespan="on", timeout_graceful_shutdown=5))
        self.thread = threading.Thread(target=self.server.run, daemon=True, name=f"ragbudget-server-{port}")

    def __enter__(self) -> "BackgroundServer":
        self.thread.start()
        deadline = time.monotonic() + self.start_timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"server at {self.url} did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)

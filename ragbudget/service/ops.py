"""``GET /v1/indexes``, ``/metrics``, ``/healthz``, ``/readyz``."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse

from ..config import TenantConfig
from .auth import authenticate, current_tenant, get_state
from .errors import error_body
from .run import require_rag

router = APIRouter()


@router.get("/v1/indexes", summary="Indexes this tenant may query")
async def indexes(request: Request, tenant: TenantConfig = Depends(current_tenant)) -> dict[str, Any]:
    state = get_state(request)
    rag = require_rag(state)
    allowed = [n for n in rag.list_indexes() if n in tenant.indexes or "*" in tenant.indexes]
    return {"tenant": tenant.name, "indexes": [{"name": n, **rag.index_info(n)} for n in allowed]}


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    """Needs a valid API key whenever auth is on (tenant names and per-tenant counts are in it), unless
    ``service.metrics_public`` opts out."""
    state = get_state(request)
    if state.auth and not state.config.service.metrics_public:
        authenticate(state, request)
    state.update_load_metrics()
    body, ctype = state.metrics.render()
    return Response(body, media_type=ctype)


HEALTH_POOL_TIMEOUT_S = 2.0  # the worker pool must start a no-op within this, or /healthz answers 503


@router.get("/healthz", summary="Liveness: the event loop and the worker thread pool both make progress")
async def healthz() -> Any:
    """503 ``stalled`` when the thread pool that queries and embeddings run on cannot start a no-op within
    ``HEALTH_POOL_TIMEOUT_S`` (every thread busy or blocked): the process is up but serves nothing."""
    loop = asyncio.get_running_loop()
    try:
        await asyncio.wait_for(loop.run_in_executor(None, _noop), HEALTH_POOL_TIMEOUT_S)
    except asyncio.TimeoutError:
        return JSONResponse(error_body("stalled", f"the worker thread pool started nothing in {HEALTH_POOL_TIMEOUT_S:g} s",
                                       "every worker thread is busy or blocked; see the logs, restart if it persists"),
                            status_code=503, headers={"Retry-After": "5"})
    return {"status": "ok"}


def _noop() -> None:
    return None


@router.get("/readyz", summary="Readiness: models loaded, indexes listed")
async def readyz(request: Request) -> Any:
    state = get_state(request)
    if not state.ready:
        return JSONResponse(error_body("not_ready", state.startup_error or "still loading models",
                                       "retry shortly"), status_code=503, headers={"Retry-After": "2"})
    return {"status": "ready", "degrade_level": state.admission.level, "queue_depth": state.admission.queue_depth}

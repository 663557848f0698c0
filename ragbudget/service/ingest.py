"""``POST /v1/ingest`` (a background job) and ``GET /v1/ingest/{job_id}``.

Paths resolve inside ``service.document_root``; anything outside (``..``, absolute paths, symlinks that
lead out) is refused with 403 before any file is opened.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Request

from ..config import TenantConfig
from ..types import Document
from . import heap
from .auth import current_tenant, get_state, tenant_index
from .errors import ApiError
from .jobs import get_job, start_job
from .run import require_rag
from .schemas import IngestRequest
from .state import Job

router = APIRouter()


def resolve_inside(root: str, path: str) -> Path:
    """``path`` resolved under ``root``; 403 when it leads outside, 400 when it does not exist."""
    try:
        base = Path(root).resolve()
        p = (base / path).resolve()
    except (OSError, ValueError) as err:
        raise ApiError(400, "IngestError", f"unusable path {path!r}: {err}", "send a path under the document root")
    if p != base and not p.is_relative_to(base):
        raise ApiError(403, "path_outside_root", f"path {path!r} is outside the document root",
                       "send a path relative to service.document_root, without '..'")
    if not p.exists():
        raise ApiError(400, "IngestError", f"path {path!r} does not exist under the document root",
                       "check the path; GET /v1/indexes lists what is ingested")
    return p


@router.post("/v1/ingest", status_code=202, summary="Ingest a path or records into an index (background job)")
async def ingest(body: IngestRequest, request: Request, tenant: TenantConfig = Depends(current_tenant)
                 ) -> dict[str, Any]:
    state = get_state(request)
    rag = require_rag(state)
    if (body.path is None) == (body.records is None):
        raise ApiError(400, "IngestError", "send exactly one of 'path' or 'records'", "")
    if body.index is not None and body.index not in tenant.indexes and "*" not in tenant.indexes:
        raise ApiError(404, "IndexNotFoundError", f"no index named {body.index!r} for this tenant",
                       "ingest into one of your tenant's indexes")
    index = tenant_index(state, tenant, body.index)
    source: Any
    if body.path is not None:
        source = resolve_inside(state.config.service.document_root, body.path)
    else:
        source = [Document(id=r.id, text=r.text, metadata=r.metadata) for r in body.records or []]

    async def work(job: Job) -> Any:
        job.detail.update({"index": index, "source": str(body.path or f"{len(source)} records")})
        report = await asyncio.to_thread(rag.ingest, source, index=index)
        if state.heap_frozen:  # the old index is unreachable now: free its cycles, freeze the new one
            await asyncio.to_thread(heap.refreeze)
        return report

    job = start_job(state, "ingest", tenant.name, work)
    return {"id": job.id, "state": job.state, "status_url": f"/v1/ingest/{job.id}"}


@router.get("/v1/ingest/{job_id}", summary="Status of an ingest job")
async def ingest_status(job_id: str, request: Request, tenant: TenantConfig = Depends(current_tenant)
                        ) -> dict[str, Any]:
    return get_job(get_state(request), "ingest", tenant.name, job_id).to_dict()

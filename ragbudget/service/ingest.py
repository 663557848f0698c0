"""``POST /v1/ingest`` (a background job) and ``GET /v1/ingest/{job_id}``.

Paths resolve inside the tenant's document root (``service.tenants[].document_root``, relative to
``service.document_root``; else ``service.document_root`` itself). Anything outside (``..``, absolute
paths) is refused with 403 ``path_outside_root``, and symbolic links — the requested path's components or
any entry of the folder it names — with 403 ``symlink_refused`` (``service.follow_symlinks: true`` follows
links that stay inside the root), before any file is opened; the loader checks each file again as it
opens it (no link is followed, nothing outside the root is read).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Request

from ..config import ServiceConfig, TenantConfig
from ..errors import PathRefusedError
from ..ingest.paths import PathPolicy
from ..kernels.safe_values import unsafe_reason
from ..types import Document
from . import heap
from .auth import current_tenant, get_state, tenant_index
from .errors import ApiError
from .jobs import get_job, start_job
from .run import charge_request, require_rag
from .schemas import DeleteRequest, IngestRequest
from .state import Job

router = APIRouter()


def tenant_policy(svc: ServiceConfig, tenant: TenantConfig) -> PathPolicy:
    """What ``tenant`` may ingest: its own root (or the shared one), links refused unless configured."""
    base = Path(svc.document_root)
    root = base / tenant.document_root if tenant.document_root else base
    return PathPolicy.at(root, follow_symlinks=svc.follow_symlinks)


def resolve_inside(policy: PathPolicy, path: str) -> Path:
    """``path`` under the policy's root, every component and (for a folder) every entry checked;
    403 naming the rule when refused, 400 when it does not exist."""
    try:
        p = policy.resolve(path)
        if not p.exists():
            raise ApiError(400, "IngestError", f"path {path!r} does not exist under the document root",
                           "check the path; GET /v1/indexes lists what is ingested")
        policy.scan(p)
    except PathRefusedError as err:
        raise ApiError(403, err.rule, str(err).split("\n  fix:")[0], err.fix or "") from None
    except (OSError, ValueError) as err:
        raise ApiError(400, "IngestError", f"unusable path {path!r}: {err}", "send a path under the document root")
    return p


@router.post("/v1/ingest", status_code=202, summary="Ingest a path or records into an index (background job)")
async def ingest(body: IngestRequest, request: Request, tenant: TenantConfig = Depends(current_tenant)
                 ) -> dict[str, Any]:
    state = get_state(request)
    rag = require_rag(state)
    if (body.path is None) == (body.records is None):
        raise ApiError(400, "IngestError", "send exactly one of 'path' or 'records'",
                       'send {"path": "folder/or/file"} or {"records": [{"id", "text", "title"?}]}, not both')
    index = tenant_index(state, tenant, body.index, must_exist=False)  # an ingest may create it
    source: Any
    policy = tenant_policy(state.config.service, tenant)
    if body.path is not None:
        source = resolve_inside(policy, body.path)
    else:
        for i, r in enumerate(body.records or []):
            why = unsafe_reason([r.id, r.title or "", r.text, r.metadata])
            if why:
                raise ApiError(400, "IngestError", f"records[{i}] ({r.id[:100]!r}): a value {why}",
                               "remove NUL characters, unpaired surrogates, NaN and Infinity from the record")
        source = [Document(id=r.id, text=r.text, metadata={**r.metadata, **({"title": r.title} if r.title else {})})
                  for r in body.records or []]

    charge_request(state, tenant.name)

    async def work(job: Job) -> Any:
        job.detail.update({"index": index, "source": str(body.path or f"{len(source)} records")})
        report = await state.run_write(rag.ingest, source, index=index, policy=policy)  # off the query pool
        if state.heap_frozen:  # the old index is unreachable now: free its cycles, freeze the new one
            await asyncio.to_thread(heap.refreeze)
        return report

    job = start_job(state, "ingest", tenant.name, work)
    return {"id": job.id, "state": job.state, "status_url": f"/v1/ingest/{job.id}"}


@router.get("/v1/ingest/{job_id}", summary="Status of an ingest job")
async def ingest_status(job_id: str, request: Request, tenant: TenantConfig = Depends(current_tenant)
                        ) -> dict[str, Any]:
    return get_job(get_state(request), "ingest", tenant.name, job_id).to_dict()


@router.post("/v1/documents/delete", summary="Delete documents by id or source from an index")
async def delete_documents(body: DeleteRequest, request: Request, tenant: TenantConfig = Depends(current_tenant)
                           ) -> dict[str, Any]:
    """Synchronous: the answer says how many chunks went; every process serving the index stops citing them
    by its next query (cached answers made before are keyed by the older index version)."""
    state = get_state(request)
    rag = require_rag(state)
    if not body.doc_ids and not body.sources:
        raise ApiError(400, "QueryError", "nothing to delete", 'send {"doc_ids": [...]} and/or {"sources": [...]}')
    index = tenant_index(state, tenant, body.index)
    charge_request(state, tenant.name)
    removed = await state.run_write(rag.delete, doc_ids=body.doc_ids, sources=body.sources, index=index)
    return {"index": index, "chunks_removed": removed,
            "content_version": rag.indexes.get(index).index.version}

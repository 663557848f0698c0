"""``POST /v1/batches`` (a JSONL body of queries, run at batch priority), status and results.

Jobs live under ``service.batch_dir/<tenant>/<id>/`` (``in.jsonl``, ``out.jsonl``, ``meta.json``); a job not
marked done is resumed when the app starts again, skipping the ids already answered.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import uuid
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse

from .batch_queries import BatchItem, arun_batch, parse_lines, read_batch
from ..config import TenantConfig
from ..errors import RagBudgetError
from .auth import current_tenant, get_state, tenant_index
from .errors import ApiError
from .jobs import get_job, start_job
from .run import charge_request, check_limits, require_rag
from .state import Job, ServiceState

log = logging.getLogger(__name__)
router = APIRouter()
JOB_ID = re.compile(r"batch-[0-9a-f]{16}")  # fullmatch: "$" would accept a trailing "\n"
JSONL_BODY = {"requestBody": {"required": True, "content": {"text/plain": {"schema": {
    "type": "string", "description": 'one JSON object per line: {"id", "question", "mode"?, "index"?}'}}}}}


def _job_dir(state: ServiceState, tenant: str, job_id: str) -> Path:
    return Path(state.config.service.batch_dir) / tenant / job_id


def _write_meta(d: Path, meta: dict[str, Any]) -> None:
    tmp = d / "meta.json.tmp"
    tmp.write_text(json.dumps(meta), encoding="utf-8")
    tmp.replace(d / "meta.json")


def resolve_items(state: ServiceState, tenant: TenantConfig, items: list[BatchItem]) -> list[BatchItem]:
    """Each line with the index it will be answered from, resolved for ``tenant`` as a single query's is
    (a line naming no index gets the tenant's default, never the server's)."""
    out = []
    for it in items:
        try:
            out.append(dataclasses.replace(it, index=tenant_index(state, tenant, it.index)))
        except ApiError as err:
            raise ApiError(err.status, err.type, f"query {it.id!r}: {err.message}", err.fix) from None
    return out


def launch(state: ServiceState, tenant: str, job_id: str, items: list[BatchItem]) -> Job:
    d = _job_dir(state, tenant, job_id)
    rag = require_rag(state)

    def admit(item: BatchItem) -> Any:
        est = state.tokenizer.count(item.question) + (item.max_tokens or state.config.service.limits.max_output_tokens)
        return state.admission.admit(tenant, priority="batch", est_tokens=est)

    async def work(job: Job) -> Any:
        job.detail.update({"total": len(items), "finished": 0})

        def progress(done: int, total: int) -> None:
            job.detail["finished"] = done

        report = await arun_batch(rag, items, d / "out.jsonl", tenant=tenant, admit=admit, progress=progress)
        _write_meta(d, {"tenant": tenant, "id": job_id, "total": len(items), "state": "done"})
        return report

    return start_job(state, "batches", tenant, work, job_id=job_id)


def resume_pending(state: ServiceState) -> list[str]:
    """Restart batch jobs a previous process left unfinished; returns their ids."""
    root = Path(state.config.service.batch_dir)
    resumed = []
    for meta_path in sorted(root.glob("*/*/meta.json")) if root.is_dir() else []:
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if meta.get("state") == "done" or meta.get("tenant") not in state.tenants:
            continue
        try:
            items = resolve_items(state, state.tenants[meta["tenant"]], read_batch(meta_path.parent / "in.jsonl"))
        except (ApiError, RagBudgetError) as err:
            log.warning("batch %s not resumed: %s", meta.get("id"), err)
            continue
        launch(state, meta["tenant"], meta["id"], items)
        resumed.append(meta["id"])
    return resumed


@router.post("/v1/batches", status_code=202, openapi_extra=JSONL_BODY,
             summary="Submit a JSONL batch of queries (low priority, resumable)")
async def create_batch(request: Request, tenant: TenantConfig = Depends(current_tenant)) -> dict[str, Any]:
    state = get_state(request)
    require_rag(state)
    raw = await request.body()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, "QueryError", "the batch body is not UTF-8 text", "send JSONL encoded as UTF-8") from None
    items = parse_lines(text.splitlines(), "batch")
    if not items:
        raise ApiError(400, "QueryError", "the batch has no queries", "send one JSON object per line")
    limit = state.config.service.max_batch_lines
    if len(items) > limit:
        raise ApiError(400, "limit_exceeded", f"the batch has {len(items)} queries, over the limit of {limit}",
                       "split it into smaller batches")
    for it in items:  # every line passes the limits a single query does
        check_limits(state, history_turns=len(it.history), max_tokens=it.max_tokens, mode=it.mode,
                     where=f"query {it.id!r}: ")
    items = resolve_items(state, tenant, items)
    charge_request(state, tenant.name)
    job_id = f"batch-{uuid.uuid4().hex[:16]}"
    d = _job_dir(state, tenant.name, job_id)
    d.mkdir(parents=True, exist_ok=True)
    (d / "in.jsonl").write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    _write_meta(d, {"tenant": tenant.name, "id": job_id, "total": len(items), "state": "pending"})
    job = launch(state, tenant.name, job_id, items)
    return {"id": job.id, "state": job.state, "total": len(items), "status_url": f"/v1/batches/{job.id}"}


@router.get("/v1/batches/{job_id}", summary="Status and progress of a batch")
async def batch_status(job_id: str, request: Request, tenant: TenantConfig = Depends(current_tenant)
                       ) -> dict[str, Any]:
    return get_job(get_state(request), "batches", tenant.name, job_id).to_dict()


@router.get("/v1/batches/{job_id}/results", summary="The batch's output so far (JSONL)",
            response_class=FileResponse)
async def batch_results(job_id: str, request: Request, tenant: TenantConfig = Depends(current_tenant)) -> Any:
    state = get_state(request)
    get_job(state, "batches", tenant.name, job_id)
    out = _job_dir(state, tenant.name, job_id) / "out.jsonl"
    if not JOB_ID.fullmatch(job_id) or not out.exists():
        raise ApiError(404, "not_found", f"batch {job_id!r} has no results yet", "poll its status first")
    return FileResponse(out, media_type="application/x-ndjson")

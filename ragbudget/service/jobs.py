"""Background jobs shared by ingest and batches: start, look up (per tenant), serialise reports."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from typing import Any, Awaitable, Callable

from ..errors import RagBudgetError
from .errors import ApiError, error_body, split_message
from .state import Job, ServiceState

log = logging.getLogger(__name__)


def to_jsonable(report: Any) -> dict[str, Any]:
    if report is None:
        return {}
    if hasattr(report, "to_dict"):
        return dict(report.to_dict())
    if dataclasses.is_dataclass(report) and not isinstance(report, type):
        return dataclasses.asdict(report)
    return dict(report) if isinstance(report, dict) else {"result": str(report)}


def start_job(state: ServiceState, kind: str, tenant: str, work: Callable[[Job], Awaitable[Any]],
              job_id: str | None = None) -> Job:
    job = Job(id=job_id or f"{kind}-{uuid.uuid4().hex[:16]}", kind=kind, tenant=tenant)
    state.jobs[job.id] = job

    async def runner() -> None:
        job.state = "running"
        try:
            result = await work(job)
            job.detail.update(to_jsonable(result))
            job.state = "done"
        except RagBudgetError as err:
            job.state, job.error = "failed", error_body(type(err).__name__, split_message(err), err.fix)["error"]
        except asyncio.CancelledError:
            job.state = "interrupted"
            raise
        except Exception as err:  # noqa: BLE001 - a job must report, not vanish
            log.exception("job %s failed", job.id)
            job.state, job.error = "failed", {"type": "internal_error", "message": f"{type(err).__name__}: {err}",
                                              "fix": "this is a bug in ragbudget; please report it"}

    job.task = asyncio.get_running_loop().create_task(runner(), name=job.id)
    return job


def get_job(state: ServiceState, kind: str, tenant: str, job_id: str) -> Job:
    job = state.jobs.get(job_id)
    if job is None or job.kind != kind or job.tenant != tenant:
        raise ApiError(404, "not_found", f"no {kind} job {job_id!r}", f"use the id returned by POST /v1/{kind}")
    return job

"""Background jobs shared by ingest and batches: start, look up (per tenant), serialise reports.

Every state change is also written to the index backend's job store (files under ``index.dir`` on
``local``, a table on ``postgres``), so ``GET /v1/ingest/{id}`` answers from any worker or server
process that shares the backend, not only from the one running the job.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
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


def _publish(state: ServiceState, job: Job) -> None:
    """Write ``job`` to the shared job store; a store that cannot be written is logged, never fatal."""
    store = _store(state)
    if store is None:
        return
    try:
        store.put(job.id, {**job.to_dict(), "tenant": job.tenant, "pid": os.getpid(), "host": socket.gethostname()})
    except Exception as err:  # noqa: BLE001 - the job itself goes on; only other workers lose sight of it
        log.warning("could not publish job %s to the shared job store: %s", job.id, err)


def _store(state: ServiceState) -> Any:
    rag = state.rag
    if rag is None:
        return None
    try:
        return rag.indexes.backend.jobs()
    except Exception as err:  # noqa: BLE001
        log.warning("job store unavailable: %s", err)
        return None


def start_job(state: ServiceState, kind: str, tenant: str, work: Callable[[Job], Awaitable[Any]],
              job_id: str | None = None) -> Job:
    job = Job(id=job_id or f"{kind}-{uuid.uuid4().hex[:16]}", kind=kind, tenant=tenant)
    state.jobs[job.id] = job
    _publish(state, job)

    async def runner() -> None:
        job.state = "running"
        await asyncio.to_thread(_publish, state, job)
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
        finally:
            await asyncio.to_thread(_publish, state, job)

    job.task = asyncio.get_running_loop().create_task(runner(), name=job.id)
    return job


def _alive(pid: Any) -> bool:
    try:
        os.kill(int(pid), 0)
    except (TypeError, ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def get_job(state: ServiceState, kind: str, tenant: str, job_id: str) -> Job:
    """This process's job, else the shared store's record (a job started by another worker)."""
    job = state.jobs.get(job_id)
    if job is None:
        job = _from_store(state, job_id)
    if job is None or job.kind != kind or job.tenant != tenant:
        raise ApiError(404, "not_found", f"no {kind} job {job_id!r}", f"use the id returned by POST /v1/{kind}")
    return job


def _from_store(state: ServiceState, job_id: str) -> Job | None:
    store = _store(state)
    if store is None:
        return None
    try:
        rec = store.get(job_id)
    except Exception as err:  # noqa: BLE001 - an unreadable store is an unknown job here, not a 500
        log.warning("job store read failed for %s: %s", job_id, err)
        return None
    if not rec:
        return None
    if rec.get("state") in ("queued", "running") and rec.get("host") == socket.gethostname() \
            and not _alive(rec.get("pid")):
        rec["state"] = "interrupted"  # its process is gone: the job will never finish (re-submit it)
    return Job(id=str(rec.get("id", job_id)), kind=str(rec.get("kind", "")), tenant=str(rec.get("tenant", "")),
               state=str(rec.get("state", "unknown")), detail=dict(rec.get("detail") or {}), error=rec.get("error"))

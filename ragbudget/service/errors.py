"""Every error the API returns is 4xx/5xx JSON ``{"error": {"type", "message", "fix"}}``.

Library errors (:class:`~ragbudget.errors.RagBudgetError`) map to a status by class; request validation
errors are 422; admission rejections are 429 with ``Retry-After``. Nothing the client sends can produce a
500: anything unexpected is logged and answered 500 JSON (and is a bug to fix).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import errors as E
from .openai_surface import UnknownModelError

log = logging.getLogger(__name__)

# First match wins: subclasses before their bases.
STATUS_BY_ERROR: tuple[tuple[type[E.RagBudgetError], int], ...] = (
    (E.AdmissionError, 429),
    (UnknownModelError, 404),  # OpenAI answers an unknown model with 404 model_not_found
    (E.IndexUnavailableError, 503),  # the index's database is down: come back later (Retry-After)
    (E.IndexNotFoundError, 404),
    (E.IndexMismatchError, 409),
    (E.IndexBusyError, 409),
    (E.QuestionTooLongError, 413),
    (E.PathRefusedError, 403),
    (E.IdCollisionError, 409),
    (E.GenerationTimeoutError, 504),
    (E.GenerationError, 503),
    (E.ModelNotFoundError, 503),
    (E.CacheError, 503),
    (E.RagBudgetError, 400),  # QueryError, BudgetError, ConfigError, IngestError, RoutingError, …
)


RETRY_AFTER_UNAVAILABLE_S = 5  # Retry-After on a 503/504 from a backend (circuit breakers reset in seconds)

HTTP_FIXES = {404: "check the URL; the routes are listed at /docs (OpenAPI at /openapi.json)",
              405: "use the HTTP method the route documents at /docs"}


class ApiError(Exception):
    """An HTTP-level refusal raised by the service itself (auth, limits, paths, unknown jobs)."""

    def __init__(self, status: int, type_: str, message: str, fix: str = "",
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.type, self.message, self.fix, self.headers = status, type_, message, fix, headers


def error_body(type_: str, message: str, fix: str | None = "", param: str | None = None) -> dict[str, Any]:
    """``{"error": {"type", "message", "fix"}}``, plus ``param`` (as in OpenAI's errors) when one request
    parameter is at fault."""
    body: dict[str, Any] = {"type": type_, "message": message, "fix": fix or ""}
    if param is not None:
        body["param"] = param
    return {"error": body}


def split_message(err: E.RagBudgetError) -> str:
    """The message without the ``fix:`` line that RagBudgetError appends."""
    return str(err).split("\n  fix:")[0]


def status_for(err: E.RagBudgetError) -> int:
    for cls, status in STATUS_BY_ERROR:
        if isinstance(err, cls):
            return status
    return 400


def rag_error_payload(err: E.RagBudgetError) -> tuple[int, dict[str, Any], dict[str, str]]:
    """Status, body and headers for a library error (also used for SSE ``error`` events)."""
    status = status_for(err)
    headers: dict[str, str] = {}
    if isinstance(err, (E.AdmissionError, E.IndexUnavailableError)):
        headers["Retry-After"] = str(max(1, math.ceil(getattr(err, "retry_after_s", RETRY_AFTER_UNAVAILABLE_S))))
    elif status in (503, 504):  # a backend is down or slow: every 503 says when to come back
        headers["Retry-After"] = str(RETRY_AFTER_UNAVAILABLE_S)
    return status, error_body(type(err).__name__, split_message(err), err.fix, getattr(err, "param", None)), headers


def _validation_message(err: RequestValidationError) -> str:
    parts = []
    for e in err.errors()[:5]:
        loc = ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body"
        parts.append(f"{loc}: {e.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(E.RagBudgetError)
    async def _rag(request: Request, err: E.RagBudgetError) -> JSONResponse:
        status, body, headers = rag_error_payload(err)
        _count(request, body["error"]["type"])
        return JSONResponse(body, status_code=status, headers=headers)

    @app.exception_handler(ApiError)
    async def _api(request: Request, err: ApiError) -> JSONResponse:
        _count(request, err.type)
        headers = dict(err.headers or {})
        if err.status == 503:
            headers.setdefault("Retry-After", str(RETRY_AFTER_UNAVAILABLE_S))
        return JSONResponse(error_body(err.type, err.message, err.fix), status_code=err.status,
                            headers=headers or None)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, err: RequestValidationError) -> JSONResponse:
        _count(request, "validation_error")
        return JSONResponse(error_body("validation_error", _validation_message(err),
                                       "see the request schema at /docs or /openapi.json"), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, err: StarletteHTTPException) -> JSONResponse:
        _count(request, f"http_{err.status_code}")
        fix = HTTP_FIXES.get(err.status_code, "see the API reference at /docs")
        return JSONResponse(error_body(f"http_{err.status_code}", str(err.detail), fix),
                            status_code=err.status_code, headers=getattr(err, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, err: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        _count(request, "internal_error")
        return JSONResponse(error_body("internal_error", f"{type(err).__name__}: {err}",
                                       "this is a bug in ragbudget; please report it"), status_code=500)


def _count(request: Request, type_: str) -> None:
    state = getattr(request.app.state, "svc", None)
    if state is not None:
        state.metrics.observe_error(type_)

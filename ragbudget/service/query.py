"""``POST /v1/query``: a JSON answer, or Server-Sent Events with ``stream: true``.

SSE events: ``progress`` ({stage, detail}) while admitting/retrieving/reranking/generating, ``token``
({text, index}), then ``final`` (the answer with ledger, usage, timings, route, cache layer, degrade
level), or ``error`` ({error: {type, message, fix}}) if the stream fails after it started.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, AsyncIterator

from fastapi import APIRouter, Depends, Request
from sse_starlette import EventSourceResponse

from ..config import TenantConfig
from ..errors import RagBudgetError
from ..types import Message
from .auth import current_tenant, get_state
from .errors import error_body, rag_error_payload
from .run import answer_once, answer_stream_chunks, event_payload, precheck, prepare, sse_bytes
from .schemas import QueryRequest

log = logging.getLogger(__name__)
router = APIRouter()
SSE_SEND_TIMEOUT_S = 30.0  # a client that stops reading for this long is dropped (generation cancelled)


@router.post("/v1/query", summary="Answer a question (JSON, or SSE with stream=true)")
async def query(body: QueryRequest, request: Request, tenant: TenantConfig = Depends(current_tenant)) -> Any:
    state = get_state(request)
    pq = prepare(state, tenant, question=body.question,
                 history=[Message(m.role, m.content) for m in body.history], mode=body.mode, index=body.index,
                 priority=body.priority, max_tokens=body.max_tokens, filters=body.filters)
    if not body.stream:
        answer, extras = await answer_once(state, pq, request)
        return {**answer.to_dict(), **extras}
    # Fail fast with a real 429 status before the stream starts when the request cannot be admitted now.
    precheck(state, pq)

    async def events() -> AsyncIterator[bytes]:
        try:
            # every event that is ready goes out in one write: a burst of tokens costs one send, not one each
            async with contextlib.aclosing(answer_stream_chunks(state, pq)) as batches:  # client gone: close now
                async for batch in batches:
                    yield b"".join(sse_bytes(*event_payload(ev, extras)) for ev, extras in batch)
        except RagBudgetError as err:
            _, payload, _ = rag_error_payload(err)
            yield sse_bytes("error", payload)
        except Exception as err:  # noqa: BLE001 - the status line is sent; report in-band, never hang
            log.exception("stream failed")
            payload = error_body("internal_error", f"{type(err).__name__}: {err}", "this is a bug; please report it")
            yield sse_bytes("error", payload)

    return EventSourceResponse(events(), send_timeout=SSE_SEND_TIMEOUT_S, ping=15)

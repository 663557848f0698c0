"""``POST /v1/chat/completions``: OpenAI-compatible, streaming and not, answered by the RAG pipeline.

The last user message is the question; earlier user/assistant/system messages are the history.
``model`` picks a mode when it names one (``rag.modes()``), else the default mode. Extra body fields
``index`` and ``mode`` (OpenAI SDK: ``extra_body=``) choose the index and mode. The response also carries
a ``ragbudget`` object (citations, ledger, route, cache layer, degrade level).
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from typing import Any, AsyncIterator

from fastapi import APIRouter, Depends, Request
from sse_starlette import EventSourceResponse

from ..config import TenantConfig
from ..errors import RagBudgetError
from ..types import Answer, FinalEvent, Message, TokenEvent
from .auth import current_tenant, get_state
from .errors import ApiError, error_body, rag_error_payload
from .query import SSE_SEND_TIMEOUT_S
from .run import answer_once, answer_stream_chunks, precheck, prepare, require_rag, sse_bytes
from .schemas import ChatCompletionRequest, ChatMessage

log = logging.getLogger(__name__)
router = APIRouter()


def _text(m: ChatMessage) -> str:
    if m.content is None:
        return ""
    if isinstance(m.content, str):
        return m.content
    return "".join(str(p.get("text", "")) for p in m.content if isinstance(p, dict) and p.get("type") == "text")


def split_messages(messages: list[ChatMessage]) -> tuple[str, list[Message]]:
    """(question, history) from OpenAI messages; tool/developer messages are not history."""
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=None)
    if last_user is None:
        raise ApiError(400, "QueryError", "no user message in messages", "add a message with role 'user'")
    history = [Message(m.role, _text(m)) for m in messages[:last_user]  # type: ignore[arg-type]
               if m.role in ("user", "assistant", "system") and _text(m)]
    return _text(messages[last_user]), history


def _usage(answer: Answer) -> dict[str, Any]:
    u = answer.usage
    return {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
            "total_tokens": u.total_tokens, "prompt_tokens_details": {"cached_tokens": u.cached_tokens}}


def finish_reason(answer: Answer) -> str:
    """OpenAI's finish_reason: "length" when the output hit its token cap (or broke off), else "stop"."""
    return "length" if answer.finish_reason == "length" or answer.partial else "stop"


def _extension(answer: Answer, extras: dict[str, Any]) -> dict[str, Any]:
    d = answer.to_dict()
    return {k: d[k] for k in ("citations", "ledger", "route", "cache_layer", "timings", "extractive", "partial")
            } | extras


@router.post("/v1/chat/completions", summary="OpenAI-compatible chat completions over the RAG pipeline")
async def chat_completions(body: ChatCompletionRequest, request: Request,
                           tenant: TenantConfig = Depends(current_tenant)) -> Any:
    state = get_state(request)
    rag = require_rag(state)
    question, history = split_messages(body.messages)
    mode = body.mode or (body.model if body.model in rag.modes() else None)
    pq = prepare(state, tenant, question=question, history=history, mode=mode, index=body.index,
                 priority="interactive", max_tokens=body.max_completion_tokens or body.max_tokens,
                 filters=body.filters)
    cid, created = f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time())
    if not body.stream:
        answer, extras = await answer_once(state, pq)
        return {"id": cid, "object": "chat.completion", "created": created, "model": body.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": answer.answer},
                             "finish_reason": finish_reason(answer), "logprobs": None}],
                "usage": _usage(answer), "ragbudget": _extension(answer, extras)}
    precheck(state, pq)

    def chunk(delta: dict[str, Any], finish: str | None = None, **more: Any) -> bytes:
        payload = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": body.model,
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}], **more}
        return sse_bytes(None, payload)

    async def events() -> AsyncIterator[bytes]:
        yield chunk({"role": "assistant", "content": ""})
        try:
            # every event that is ready goes out in one write (one chunk object per token, as OpenAI sends)
            async with contextlib.aclosing(answer_stream_chunks(state, pq)) as batches:  # client gone: close now
                async for batch in batches:
                    out = []
                    for ev, extras in batch:
                        if isinstance(ev, TokenEvent):
                            out.append(chunk({"content": ev.text}))
                        elif isinstance(ev, FinalEvent):
                            a = ev.answer
                            out.append(chunk({}, finish_reason(a), usage=_usage(a),
                                             ragbudget=_extension(a, extras)))
                    if out:
                        yield b"".join(out)
        except RagBudgetError as err:
            _, payload, _ = rag_error_payload(err)
            yield sse_bytes(None, payload)
        except Exception as err:  # noqa: BLE001 - the status line is sent; report in-band, never hang
            log.exception("stream failed")
            payload = error_body("internal_error", f"{type(err).__name__}: {err}", "this is a bug; please report it")
            yield sse_bytes(None, payload)
        yield sse_bytes(None, "[DONE]")

    return EventSourceResponse(events(), send_timeout=SSE_SEND_TIMEOUT_S)

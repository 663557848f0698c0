"""The OpenAI-compatible routes: ``POST /v1/chat/completions`` (streaming and not), ``GET /v1/models``
and ``POST /v1/embeddings``. What they accept, refuse and select is :mod:`ragbudget.service.openai_surface`.

The last user message is the question; earlier user/assistant/system messages are the history. ``model``
names the default (``ragbudget``), a mode, an index or ``INDEX:MODE`` (GET /v1/models lists them); extra body
fields ``index``, ``mode`` and ``filters`` (OpenAI SDK: ``extra_body=``) choose too. The response also carries
a ``ragbudget`` object (citations, ledger, route, cache layer, degrade level).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from typing import Any, AsyncIterator

from fastapi import APIRouter, Depends, Request
from sse_starlette import EventSourceResponse

from . import openai_surface as oai
from ..config import TenantConfig
from ..errors import RagBudgetError
from ..types import Answer, FinalEvent, TokenEvent
from .auth import current_tenant, get_state, visible_indexes
from ..kernels.safe_values import unsafe_reason
from .errors import ApiError, error_body, rag_error_payload
from .query import SSE_SEND_TIMEOUT_S
from .run import answer_once, answer_stream_chunks, precheck, prepare, require_rag, sse_bytes
from .schemas import ChatCompletionRequest, EmbeddingRequest

log = logging.getLogger(__name__)
router = APIRouter()

_usage, finish_reason = oai.usage, oai.finish_reason


def _extension(answer: Answer, extras: dict[str, Any]) -> dict[str, Any]:
    d = answer.to_dict()
    return {k: d[k] for k in ("citations", "ledger", "route", "cache_layer", "timings", "extractive", "partial")
            } | extras


@router.get("/v1/models", summary="OpenAI-compatible model list: ragbudget, each mode, each index, INDEX:MODE")
async def models(request: Request, tenant: TenantConfig = Depends(current_tenant)) -> dict[str, Any]:
    state = get_state(request)
    rag = require_rag(state)
    ids = oai.model_ids(rag.modes(), visible_indexes(tenant, rag.list_indexes()),
                        oai.embedding_model_id(state.config.embedding.model))
    return oai.models_response(ids)


@router.post("/v1/embeddings", summary="OpenAI-compatible embeddings from the configured embedder")
async def embeddings(body: EmbeddingRequest, request: Request,
                     tenant: TenantConfig = Depends(current_tenant)) -> dict[str, Any]:
    state = get_state(request)
    rag = require_rag(state)
    model_id = oai.embedding_model_id(state.config.embedding.model)
    texts = oai.embedding_inputs(body.model_dump(exclude_unset=True), model_id)
    limit = state.config.service.limits.max_embedding_inputs
    if len(texts) > limit:
        raise ApiError(400, "limit_exceeded", f"input has {len(texts)} strings, over the limit of {limit}",
                       "send fewer strings per request (service.limits.max_embedding_inputs)")
    for i, t in enumerate(texts):
        why = unsafe_reason(t)
        if why:
            raise ApiError(400, "invalid_request_error", f"input[{i}] {why}", "send plain text")
    est = sum(state.tokenizer.count(t) for t in texts)
    # the same admission as a query: the tenant's request and token buckets, a concurrency slot, the queue
    async with state.admission.admit(tenant.name, priority="interactive", est_tokens=est) as ticket:
        state.metrics.observe_admission(tenant.name, "interactive", ticket.decision, ticket.queue_wait_ms)
        vectors = await asyncio.to_thread(rag.embedder.embed, texts)
    return oai.embeddings_response(vectors, texts, model_id, state.tokenizer.count,
                                   body.encoding_format or "float", body.dimensions)


@router.post("/v1/chat/completions", summary="OpenAI-compatible chat completions over the RAG pipeline")
async def chat_completions(body: ChatCompletionRequest, request: Request,
                           tenant: TenantConfig = Depends(current_tenant)) -> Any:
    state = get_state(request)
    rag = require_rag(state)
    fields = body.model_dump(exclude_unset=True)
    oai.check_chat_parameters(fields)
    question, history = oai.split_messages(fields.get("messages") or [])
    index, mode = oai.resolve_model(body.model, modes=rag.modes(), index=body.index, mode=body.mode,
                                    indexes=visible_indexes(tenant, rag.list_indexes()))
    pq = prepare(state, tenant, question=question, history=history, mode=mode, index=index,
                 priority="interactive", max_tokens=body.max_completion_tokens or body.max_tokens,
                 filters=body.filters, sampling=oai.sampling_from(fields))
    cid, created = f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time())
    if not body.stream:
        answer, extras = await answer_once(state, pq, request)
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

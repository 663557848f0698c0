"""Shared by the query and OpenAI-compatible routes: limits, admission, the call into RAG, metrics."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import Any, AsyncGenerator, AsyncIterator, Awaitable, TypeVar

from fastapi import Request

from sse_starlette.event import ServerSentEvent

from ..stages.accounting import check_question
from ..config import TenantConfig
from ..errors import AdmissionError, QueryError
from ..index.filters import parse_filters
from ..pipeline import RAG
from ..kernels.safe_values import unsafe_reason
from ..types import Answer, FinalEvent, Message, ProgressEvent, Sampling, StreamEvent, TokenEvent
from .auth import tenant_index
from .errors import ApiError
from .state import ServiceState

T = TypeVar("T")


@dataclass
class PreparedQuery:
    """A request that passed every limit; nothing has run yet."""

    question: str
    history: list[Message]
    mode: str | None
    index: str
    tenant: str
    priority: str
    max_tokens: int | None
    est_tokens: int
    input_tokens: int = 0  # question + history; the actual charge adds the completion tokens generated
    checked: bool = False  # admission.check already ran (streaming: before the response started)
    filters: dict[str, Any] | None = None  # metadata filters, validated by prepare()
    sampling: Sampling | None = None  # temperature, top_p, stop, seed (OpenAI route)
    arrival: float = field(default_factory=time.time)  # when it passed the limits (Unix s; traffic capture)
    started: float = field(default_factory=time.perf_counter)

    def actual_tokens(self, answer: Answer) -> int:
        """What the request really took from the token bucket: its input plus what the model generated
        (a cache hit generated nothing)."""
        return self.input_tokens + answer.usage.completion_tokens

    def kwargs(self, degrade_level: int) -> dict[str, Any]:
        return {"history": self.history or None, "mode": self.mode, "index": self.index, "tenant": self.tenant,
                "degrade_level": degrade_level, "max_tokens": self.max_tokens, "filters": self.filters,
                "sampling": self.sampling}


def require_rag(state: ServiceState) -> RAG:
    if state.rag is None or not state.ready:
        raise ApiError(503, "not_ready", state.startup_error or "the service is still loading its models",
                       "retry when GET /readyz answers 200", headers={"Retry-After": "2"})
    return state.rag


def charge_request(state: ServiceState, tenant: str, est_tokens: int = 1) -> None:
    """Work that holds no query slot (an ingest, a delete, a batch submission) still takes one request from
    the tenant's bucket: 429 with Retry-After when the tenant is over its rate."""
    if state.config.service.admission.enabled:
        try:
            state.admission.check_rate(tenant, est_tokens)
        except AdmissionError:
            state.metrics.observe_admission(tenant, "batch", "rejected_rate")
            raise


def check_limits(state: ServiceState, *, history_turns: int, max_tokens: int | None, mode: str | None,
                 where: str = "") -> None:
    """The per-request limits every way in shares (query, chat, each batch line): 400 naming the limit."""
    limits = state.config.service.limits
    modes = require_rag(state).modes()
    if history_turns > limits.max_history_turns:
        raise ApiError(400, "limit_exceeded",
                       f"{where}history has {history_turns} messages, over the limit of {limits.max_history_turns}",
                       "send fewer past messages")
    if max_tokens is not None and max_tokens > limits.max_output_tokens:
        raise ApiError(400, "limit_exceeded",
                       f"{where}max_tokens={max_tokens} is over the limit of {limits.max_output_tokens}",
                       f"ask for at most {limits.max_output_tokens}")
    if mode is not None and mode not in modes:
        raise ApiError(400, "unknown_mode", f"{where}unknown mode {mode!r}", f"use one of {modes}")


def prepare(state: ServiceState, tenant: TenantConfig, *, question: str, history: list[Message],
            mode: str | None, index: str | None, priority: str, max_tokens: int | None,
            filters: dict[str, Any] | None = None, sampling: Sampling | None = None) -> PreparedQuery:
    """Enforce the configured limits before any work (400/404 on refusal)."""
    require_rag(state)
    if not question.strip():
        raise ApiError(400, "QueryError", "the question is empty", "send a non-empty question")
    for where, text in [("question", question)] + [(f"history[{i}]", m.content) for i, m in enumerate(history)]:
        why = unsafe_reason(text)
        if why:
            raise ApiError(400, "QueryError", f"{where} {why}", "send plain text without NUL or unpaired surrogates")
    q_tokens = check_question(question, state.config, state.tokenizer)  # the library's limit: 413 naming it
    check_limits(state, history_turns=len(history), max_tokens=max_tokens, mode=mode)
    try:
        parse_filters(filters)
    except QueryError as err:
        raise ApiError(400, "invalid_filters", str(err).split("\n  fix:")[0], err.fix or "") from None
    idx = tenant_index(state, tenant, index)
    h_tokens = sum(state.tokenizer.count(m.content) for m in history)
    # charge what this request can produce, the response mode's cap (not the API's max); settle after
    mode_cap = state.config.prompt.modes[mode or state.config.prompt.default_mode].max_tokens
    out = min(max_tokens, mode_cap) if max_tokens is not None else mode_cap
    return PreparedQuery(question, history, mode, idx, tenant.name, priority, max_tokens,
                         est_tokens=q_tokens + h_tokens + out, input_tokens=q_tokens + h_tokens,
                         filters=filters or None, sampling=sampling)


def _extras(answer: Answer, pq: PreparedQuery, queue_wait_ms: float, level: int,
            server_ttft_ms: float | None = None) -> dict[str, Any]:
    extras = {"tenant": pq.tenant, "index": pq.index, "degrade_level": max(level, answer.ledger.degrade_level),
              "queue_wait_ms": round(queue_wait_ms, 3)}
    if server_ttft_ms is not None:  # streaming: handler start → first token or final event, queue included
        extras["server_ttft_ms"] = round(server_ttft_ms, 3)
    return extras



def _capture(state: ServiceState, pq: PreparedQuery, answer: Answer | None, *, arrival: float, t0: float,
             ttft_ms: float | None, wait_ms: float, level: int, stream: bool, status: int = 200) -> None:
    """Queue the request's line in the traffic capture, if one is on (never blocks on the file)."""
    if state.capture is not None:
        state.capture.record(answer, question=pq.question, arrival=arrival, tenant=pq.tenant, index=pq.index,
                             mode=pq.mode, priority=pq.priority,
                             history_len=sum(m.role == "user" for m in pq.history), max_tokens=pq.max_tokens,
                             stream=stream, question_tokens=state.tokenizer.count(pq.question), ttft_ms=ttft_ms,
                             e2e_ms=(time.perf_counter() - t0) * 1000, queue_wait_ms=wait_ms,
                             degrade_level=max(level, answer.ledger.degrade_level if answer else 0),
                             status=status)


def _admission_rejected(state: ServiceState, pq: PreparedQuery, err: AdmissionError, stream: bool) -> None:
    msg = str(err)
    decision = "shed" if "shed" in msg else "rejected_queue" if "queue" in msg else "rejected_rate"
    state.metrics.observe_admission(pq.tenant, pq.priority, decision)
    state.update_load_metrics()
    _capture(state, pq, None, arrival=pq.arrival, t0=pq.started, ttft_ms=None, wait_ms=0.0,
             level=state.admission.level, stream=stream, status=429)


@contextlib.asynccontextmanager
async def admitted(state: ServiceState, pq: PreparedQuery) -> AsyncIterator[tuple[int, float]]:
    """Hold an admission slot; yields (degrade_level, queue_wait_ms). Keeps the load gauges current."""
    t_admit = time.perf_counter()
    tracer = state.rag.tracer if state.rag is not None else None
    try:
        async with state.admission.admit(pq.tenant, priority=pq.priority, est_tokens=pq.est_tokens,
                                         checked=pq.checked) as t:
            state.metrics.observe_admission(pq.tenant, pq.priority, t.decision, t.queue_wait_ms)
            if tracer is not None:
                tracer.record("admission", t_admit, None, **{"ragbudget.stages.admission.decision": t.decision,
                                                       "ragbudget.stages.admission.queue_wait_ms": t.queue_wait_ms,
                                                       "ragbudget.degrade_level": t.degrade_level,
                                                       "ragbudget.priority": pq.priority})
            state.in_flight += 1
            state.update_load_metrics()
            try:
                yield t.degrade_level, t.queue_wait_ms
            finally:
                state.in_flight -= 1
                state.update_load_metrics()
    except AdmissionError as err:
        if tracer is not None:
            tracer.record("admission", t_admit, None, **{"ragbudget.stages.admission.decision": "rejected",
                                                   "ragbudget.priority": pq.priority})
        _admission_rejected(state, pq, err, stream=pq.checked)  # only a stream is prechecked
        raise


def precheck(state: ServiceState, pq: PreparedQuery) -> None:
    """Run the instant admission refusals now (so a stream can still answer a real 429)."""
    try:
        state.admission.check(pq.tenant, pq.priority, pq.est_tokens)
    except AdmissionError as err:
        _admission_rejected(state, pq, err, stream=True)
        raise
    pq.checked = True


DISCONNECT_POLL_S = 0.25  # how often a non-streaming request checks that its client is still there


async def _final_answer(rag: RAG, pq: PreparedQuery, level: int) -> Answer:
    """The answer through the pipeline's cancellable stream: cancelling the awaiting task closes the stream,
    which stops generation between tokens (``rag.aquery`` would keep its worker thread generating)."""
    final = None
    async with contextlib.aclosing(rag.astream_chunks(pq.question, escalate=True, **pq.kwargs(level))) as chunks:
        async for chunk in chunks:
            for ev in chunk:
                if isinstance(ev, FinalEvent):
                    final = ev.answer
    if final is None:  # pragma: no cover - the pipeline always ends with a FinalEvent
        raise RuntimeError("the pipeline ended without an answer")
    return final


async def _until_disconnected(request: Request) -> None:
    while not await request.is_disconnected():
        await asyncio.sleep(DISCONNECT_POLL_S)


async def cancel_if_abandoned(work: Awaitable[T], request: Request | None) -> T:
    """``await work``, unless the client disconnects first: then the work is cancelled (its admission slot
    is given back, generation stops) and the request ends as 499 ``client_closed_request``."""
    task = asyncio.ensure_future(work)
    if request is None:
        return await task
    watch = asyncio.ensure_future(_until_disconnected(request))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        watch.cancel()
    if task.cancelled():
        raise ApiError(499, "client_closed_request", "the client closed the connection before the answer",
                       "keep the connection open, or use stream=true")
    return task.result()


async def answer_once(state: ServiceState, pq: PreparedQuery, request: Request | None = None
                      ) -> tuple[Answer, dict[str, Any]]:
    """Admit, answer (non-streaming), record metrics. With ``request``: a client that disconnects stops
    its generation and frees its slot at once."""
    rag = require_rag(state)
    arrival, t0 = pq.arrival, pq.started  # TTFT counts from arrival: admission queue included

    async def work() -> tuple[Answer, int, float]:
        async with admitted(state, pq) as (level, wait_ms):
            return await _final_answer(rag, pq, level), level, wait_ms

    with rag.tracer.request("request", **{"ragbudget.tenant": pq.tenant, "ragbudget.stream": False}):
        answer, level, wait_ms = await cancel_if_abandoned(work(), request)
    state.admission.settle(pq.tenant, charged=pq.est_tokens, actual=pq.actual_tokens(answer))
    # the ladder sees what the client saw (queue wait included); the pipeline records the answer in Metrics
    ttft_ms = (time.perf_counter() - t0) * 1000
    state.admission.record_ttft(ttft_ms)
    state.metrics.observe_server_ttft(answer.route, ttft_ms, stream=False)
    _capture(state, pq, answer, arrival=arrival, t0=t0, ttft_ms=ttft_ms, wait_ms=wait_ms, level=level, stream=False)
    return answer, _extras(answer, pq, wait_ms, level)


async def answer_stream_chunks(state: ServiceState, pq: PreparedQuery
                               ) -> AsyncGenerator[list[tuple[StreamEvent, dict[str, Any]]], None]:
    """Admit, then yield the pipeline's events as they become ready, a list at a time (see
    :meth:`RAG.astream_chunks`): a route writes each list as one chunk. Closing this generator (client
    gone) closes the pipeline's stream, which cancels generation, and gives the admission slot back."""
    rag = require_rag(state)
    arrival, t0 = pq.arrival, pq.started  # TTFT counts from arrival: admission queue included
    ttft_ms = None
    with rag.tracer.request("request", **{"ragbudget.tenant": pq.tenant, "ragbudget.stream": True}):
        async with admitted(state, pq) as (level, wait_ms):
            yield [(ProgressEvent("admitted", f"degrade level {level}, queued {wait_ms:.0f} ms"), {})]
            async with contextlib.aclosing(rag.astream_chunks(pq.question, **pq.kwargs(level))) as chunks:
                async for chunk in chunks:
                    out: list[tuple[StreamEvent, dict[str, Any]]] = []
                    for ev in chunk:
                        if ttft_ms is None and isinstance(ev, (TokenEvent, FinalEvent)):
                            ttft_ms = (time.perf_counter() - t0) * 1000
                            state.admission.record_ttft(ttft_ms)
                        extras = {}
                        if isinstance(ev, FinalEvent):
                            extras = _extras(ev.answer, pq, wait_ms, level, ttft_ms)
                            state.metrics.observe_server_ttft(ev.answer.route, ttft_ms or 0.0, stream=True)
                            state.admission.settle(pq.tenant, charged=pq.est_tokens, actual=pq.actual_tokens(ev.answer))
                            _capture(state, pq, ev.answer, arrival=arrival, t0=t0, ttft_ms=ttft_ms, wait_ms=wait_ms,
                                     level=level, stream=True)
                        out.append((ev, extras))
                    yield out


def sse_bytes(event: str | None, data: Any) -> bytes:
    """One Server-Sent Event, encoded (``data`` JSON-encoded unless it is already a string)."""
    text = data if isinstance(data, str) else json.dumps(data, default=str)
    return ServerSentEvent(data=text, event=event).encode()


def event_payload(ev: StreamEvent, extras: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """SSE event name and JSON data for a pipeline event."""
    if isinstance(ev, TokenEvent):
        return "token", {"text": ev.text, "index": ev.index}
    if isinstance(ev, ProgressEvent):
        return "progress", {"stage": ev.stage, "detail": ev.detail}
    return "final", {**ev.answer.to_dict(), **extras}

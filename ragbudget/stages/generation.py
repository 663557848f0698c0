"""The generation stage: route the built prompt to a tier (or, at degrade level 4, answer extractively with
no model), stream its tokens, stop the engine when the consumer leaves, and time the route and generate
steps apart."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Generator, Iterator, Protocol

from .context import Fitted
from ..llm.base import Generator as Engine
from ..llm.base import GenerationStream
from .request import QueryRequest
from ..route import RouteDecision, Routed, Router
from ..types import Ledger, Timings, TokenEvent


class _Stream(Protocol):
    routed: Routed | None

    def __iter__(self) -> Iterator[TokenEvent]: ...

    def close(self) -> None: ...


class _Extractive:
    """A plain extractive stream presented like a routed one (degrade level 4: extractive only)."""

    def __init__(self, stream: GenerationStream) -> None:
        self.stream = stream
        self.routed: Routed | None = None

    def __iter__(self) -> Iterator[TokenEvent]:
        yield from self.stream
        gen = self.stream.generation
        assert gen is not None
        self.routed = Routed(gen, RouteDecision(tier="extractive", reason="degrade level 4: extractive answer only",
                                                backend="extractive", model="extractive", usage_estimated=True))

    def close(self) -> None:
        self.stream.close()


class GenerationStage:
    def __init__(self, router: Callable[[], Router], extractive: Engine) -> None:
        self._router = router
        self._extractive = extractive

    def _start(self, req: QueryRequest, fitted: Fitted, ledger: Ledger) -> _Stream:
        built = fitted.built
        kw: dict[str, Any] = req.sampling.engine_kwargs()
        if req.degrade.extractive_only:  # last rung before rejecting: the budgeted context, no model
            ledger.flags.append("degraded:extractive_only")
            return _Extractive(self._extractive.stream(built.prompt, max_tokens=built.allocation.output,
                                                       context=built.context, **kw))
        small = req.degrade.small_model  # level 3: the smallest tier, and no escalation past it
        return self._router().stream(built.prompt, question=req.question, max_tokens=built.allocation.output,
                                     context=built.context, task=req.task, refit=fitted.refit,
                                     escalate=req.escalate and not small, small=small, **kw)

    def stream(self, req: QueryRequest, fitted: Fitted, ledger: Ledger, timings: Timings,
               cancel: threading.Event | None = None) -> Generator[TokenEvent, None, Routed | None]:
        """Yield the tokens; return the :class:`Routed` result, or None when ``cancel`` was set."""
        t0 = time.perf_counter()
        rs = self._start(req, fitted, ledger)
        timings.stages["route"] = (time.perf_counter() - t0) * 1000.0  # the tier plan: window checks, refits
        t0 = time.perf_counter()
        finished = False
        try:
            for ev in rs:
                yield ev
                if cancel is not None and cancel.is_set():
                    return None
            finished = True
        finally:
            timings.stages["generate"] = (time.perf_counter() - t0) * 1000.0
            if not finished:  # consumer left or cancelled: stop the backend now, not at garbage collection
                rs.close()
        assert rs.routed is not None
        return rs.routed

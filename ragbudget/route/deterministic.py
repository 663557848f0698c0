"""Deterministic handlers as a route: questions code answers exactly (FAQ, arithmetic, units, dates), no
model and no retrieval. Answers that do not depend on the clock go through the tool cache."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from typing import Any

from ..cache.keys import digest
from ..config import RouterConfig
from ..errors import CacheError
from .handlers import VERSION as HANDLERS_VERSION
from .handlers import HandlerAnswer
from .handlers import answer as handler_answer
from ..types import Generation, Timings, Usage
from .decision import RouteDecision, Routed

log = logging.getLogger("ragbudget")


class Handlers:
    def __init__(self, config: RouterConfig) -> None:
        self.config = config
        self._faq_fp: str | None = None

    def handle(self, question: str, *, tool_cache: Any = None, max_output_bytes: int | None = None) -> Routed | None:
        """A deterministic handler's answer (no model), or None.

        ``tool_cache`` (a :class:`~ragbudget.cache.ToolCache`) memoises answers that do not depend on the
        clock, keyed by the normalised question and the FAQ table, shared by every process on the same cache
        backend; an output over ``max_output_bytes`` (``service.limits.max_tool_output_bytes``) is not
        used: the question goes on to retrieval and a model (logged)."""
        if not self.config.deterministic_handlers:
            return None
        t0 = time.perf_counter()
        hit = self._answer(question, tool_cache)
        if hit is None:
            return None
        size = len(hit.text.encode("utf-8"))
        if max_output_bytes is not None and size > max_output_bytes:
            log.warning("%s handler output of %d bytes is over service.limits.max_tool_output_bytes=%d: not used",
                        hit.handler, size, max_output_bytes)
            return None
        ms = (time.perf_counter() - t0) * 1000
        gen = Generation(text=hit.text, usage=Usage(), timings=Timings(stages={"handler": ms}, ttft_ms=ms,
                                                                      total_ms=ms),
                         model=hit.handler, backend="handler")
        return Routed(gen, RouteDecision(tier=f"handler:{hit.handler}", reason=f"{hit.handler} handler",
                                         backend="handler", model=hit.handler, handler=hit.handler))

    def _answer(self, question: str, tool_cache: Any) -> HandlerAnswer | None:
        faq = self.config.faq
        if self._faq_fp is None:
            self._faq_fp = digest(sorted(faq.items()))  # config is immutable: once per router
        args = {"question": " ".join(question.lower().split()), "faq": self._faq_fp}
        if tool_cache is not None:
            try:
                found, value = tool_cache.get("handlers", args, HANDLERS_VERSION)
            except CacheError as err:  # a broken cache never stops a handler
                log.warning("tool cache lookup failed: %s", err)
                found, value = False, None
            if found and isinstance(value, dict):
                return HandlerAnswer(**value)
        hit = handler_answer(question, faq=faq)
        if tool_cache is not None and hit is not None and hit.cacheable:  # only answers: no write per query
            try:
                tool_cache.set("handlers", args, asdict(hit), HANDLERS_VERSION)
            except CacheError as err:
                log.warning("could not cache a handler answer: %s", err)
        return hit

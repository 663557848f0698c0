"""The :class:`Router`: one object over the tiers, the planner, the handlers and the fallback chain."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Mapping, Sequence

from ..config import LLMConfig, TierConfig
from ..llm import AsyncGenerationStream, Generator
from ..kernels.tokens import Tokenizer
from ..types import Prompt, Scored
from .decision import Refit, RouteDecision, Routed
from .deterministic import Handlers
from .fallback import RoutedStream, generate
from .planner import Planner
from .tiers import TierSet


class Router:
    """Routes generations over ``config.tiers``. ``generators`` overrides the backend built for a tier name
    (tests script a backend there; a service shares loaded models)."""

    def __init__(self, config: LLMConfig, *, generators: Mapping[str, Generator] | None = None,
                 tokenizer: Tokenizer | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.tierset = TierSet(config, generators=generators, tokenizer=tokenizer, clock=clock)
        self.planner = Planner(config.router, self.tierset)
        self.handlers = Handlers(config.router)
        self.tiers = self.tierset.tiers
        self.generators = self.tierset.generators
        self.breakers = self.tierset.breakers

    def close(self) -> None:
        """Stop and free the in-process engines (a generator with a ``close``: llama.cpp); the rest hold nothing."""
        for gen in self.generators.values():
            close = getattr(gen, "close", None)
            if callable(close):
                close()

    # ------------------------------------------------------------ decisions
    def difficulty(self, question: str, confidence: float | None = None) -> float:
        return self.planner.difficulty(question, confidence)

    confidence_of = staticmethod(Planner.confidence_of)

    def engine_tokens(self, tier: TierConfig, prompt: Prompt) -> tuple[int, bool]:
        return self.tierset.engine_tokens(tier, prompt)

    def plan(self, prompt: Prompt, **kw: Any) -> tuple[list[TierConfig], RouteDecision]:
        return self.planner.plan(prompt, **kw)

    def check_answer(self, text: str, context: Sequence[Scored] | None) -> str | None:
        return self.planner.check_answer(text, context)

    def handle(self, question: str, *, tool_cache: Any = None, max_output_bytes: int | None = None) -> Routed | None:
        """A deterministic handler's answer (no model), or None (see :class:`~.deterministic.Handlers`)."""
        return self.handlers.handle(question, tool_cache=tool_cache, max_output_bytes=max_output_bytes)

    # ------------------------------------------------------------ generation
    def _start(self, prompt: Prompt, *, question: str, max_tokens: int, context: Sequence[Scored] | None,
               task: str | None, confidence: float | None, refit: Refit | None, temperature: float,
               stop: Sequence[str] | None, small: bool,
               sampling: Mapping[str, Any]) -> tuple[list[TierConfig], RouteDecision, dict[str, Any]]:
        if confidence is None and context:
            confidence = self.planner.confidence_of(context)
        order, dec = self.planner.plan(prompt, question=question, max_tokens=max_tokens, task=task,
                                       confidence=confidence, refit=refit, small=small)
        kw = dict(max_tokens=max_tokens, temperature=temperature, stop=stop, context=context,
                  **{k: v for k, v in sampling.items() if v is not None})  # top_p, seed: only when set
        return order, dec, kw

    def generate(self, prompt: Prompt, *, question: str, max_tokens: int, context: Sequence[Scored] | None = None,
                 task: str | None = None, confidence: float | None = None, refit: Refit | None = None,
                 temperature: float = 0.0, stop: Sequence[str] | None = None, small: bool = False,
                 **sampling: Any) -> Routed:
        """Route, fall back, escalate; never hangs (tier timeouts). Raises :class:`GenerationError` when
        every tier failed and nothing was produced, :class:`RoutingError` when no tier fits."""
        order, dec, kw = self._start(prompt, question=question, max_tokens=max_tokens, context=context, task=task,
                                     confidence=confidence, refit=refit, temperature=temperature, stop=stop,
                                     small=small, sampling=sampling)
        return generate(self.tierset, self.planner.check_answer, order, prompt, dec, refit,
                        escalate=self.config.router.escalate_on_failed_check and not small, **kw)

    def stream(self, prompt: Prompt, *, question: str, max_tokens: int, context: Sequence[Scored] | None = None,
               task: str | None = None, confidence: float | None = None, refit: Refit | None = None,
               temperature: float = 0.0, stop: Sequence[str] | None = None,
               escalate: bool = False, small: bool = False, **sampling: Any) -> RoutedStream:
        """Stream tokens from the routed tier. Fallback happens only before the first token; a failure
        after it ends the stream with a partial Generation. ``escalate=True`` (and
        ``router.escalate_on_failed_check``) holds a smaller tier's tokens until its answer passes the
        check, else streams the next larger tier."""
        order, dec, kw = self._start(prompt, question=question, max_tokens=max_tokens, context=context, task=task,
                                     confidence=confidence, refit=refit, temperature=temperature, stop=stop,
                                     small=small, sampling=sampling)
        return RoutedStream(self.tierset, self.planner.check_answer, order, prompt, dec, refit, kw,
                            escalate=escalate and self.config.router.escalate_on_failed_check)

    async def agenerate(self, prompt: Prompt, **kw: Any) -> Routed:
        return await asyncio.to_thread(lambda: self.generate(prompt, **kw))

    async def astream(self, prompt: Prompt, **kw: Any) -> AsyncGenerationStream:
        """Async view of :meth:`stream`; ``.stream.routed`` holds the result when it ends."""
        return AsyncGenerationStream(self.stream(prompt, **kw))

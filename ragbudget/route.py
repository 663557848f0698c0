"""Router: pick a tier per request, fall back on errors and timeouts, escalate weak small answers.

Tiers are listed in ``llm.tiers`` from small (cheap) to large. Per request:

1. plan — rules (``task`` in ``router.small_tasks`` → smallest tier), else a difficulty estimate
   (question length, words like why/compare/explain, low retrieval confidence) against
   ``router.difficulty_threshold``: hard → largest tier, easy → smallest. A tier whose
   ``context_window`` cannot hold prompt + max_tokens is never chosen; the next larger one is.
2. fallback chain — the chosen tier, then larger tiers, then smaller ones (nearest first). A tier whose
   circuit breaker is open is skipped; on a smaller window the caller's ``refit(window) -> Prompt``
   re-fits the context. Every call runs under a first-token and a total timeout, so nothing hangs.
3. escalation — when a smaller tier's answer fails the check (empty, refusal, low grounding in the
   context) the next larger tier answers instead.

The result is a :class:`Routed`: the :class:`Generation` plus a :class:`RouteDecision` (tier, reason,
escalation, fallbacks and errors, estimated cost vs always-large) for ``ledger.route``.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import re
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Iterator, Mapping, Sequence

from .config import LLMConfig, TierConfig
from .errors import BackendUnavailableError, GenerationError, GenerationTimeoutError, RoutingError
from .breaker import CircuitBreaker
from .cache.keys import digest
from .errors import CacheError
from .handlers import VERSION as HANDLERS_VERSION
from .handlers import HandlerAnswer
from .handlers import answer as handler_answer
from .llm import AsyncGenerationStream, Generator, make_generator
from .llm.counting import RatioCalibration, make_counter
from .llm.extractive import terms
from .tokens import Tokenizer
from .types import Generation, Prompt, Scored, Timings, TokenEvent, Usage

log = logging.getLogger("ragbudget")

Refit = Callable[[int], Prompt]


@dataclass
class RouteDecision:
    """Why a request went where it went; ``to_dict()`` goes into ``ledger.route``."""

    tier: str
    reason: str
    backend: str = ""
    model: str = ""
    difficulty: float = 0.0
    confidence: float | None = None
    task: str | None = None
    handler: str | None = None
    escalated: bool = False
    escalated_from: str | None = None
    escalation_reason: str | None = None
    fallbacks: list[str] = field(default_factory=list)  # tiers tried (and failed or skipped) first
    errors: list[str] = field(default_factory=list)
    refitted: bool = False
    partial: bool = False
    prompt_tokens_counted: int | None = None  # the served tier's engine tokens, counted before the call
    prompt_tokens_estimated: bool = False  # True when no exact counter: builder tokens × learned ratio
    usage_estimated: bool = False  # the engine reported no usage: the usage counts are ragbudget's
    estimated_cost: float = 0.0  # from the real usage of every call made, in the tiers' prices
    always_large_cost: float = 0.0  # the same tokens priced at the largest tier

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Routed:
    generation: Generation
    decision: RouteDecision
    prompt: Prompt | None = None  # the prompt the serving tier was sent (after any window refit)


def tier_cost(tier: TierConfig, usage: Usage) -> float:
    return usage.prompt_tokens / 1000 * tier.price_in_per_1k + usage.completion_tokens / 1000 * tier.price_out_per_1k


class Router:
    """Routes generations over ``config.tiers``. ``generators`` overrides the backend built for a tier name
    (tests script a backend there; a service shares loaded models)."""

    def __init__(self, config: LLMConfig, *, generators: Mapping[str, Generator] | None = None,
                 tokenizer: Tokenizer | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.tiers = list(config.tiers)
        self._by_name = {t.name: t for t in self.tiers}
        given = dict(generators or {})
        unknown = set(given) - set(self._by_name)
        if unknown:
            raise RoutingError(f"generators given for unknown tiers {sorted(unknown)}",
                               fix=f"use tier names from llm.tiers: {sorted(self._by_name)}")
        self.generators: dict[str, Generator] = {
            t.name: given[t.name] if t.name in given else make_generator(t, tokenizer=tokenizer) for t in self.tiers}
        r = config.router
        self.breakers = {t.name: CircuitBreaker(r.breaker_failures, r.breaker_reset_s, clock) for t in self.tiers}
        self.counters = {t.name: make_counter(t.tokenizer, backend=t.backend, model=t.model, base_url=t.base_url,
                                              engine=getattr(self.generators[t.name], "count_prompt", None))
                         for t in self.tiers if t.backend != "extractive"}
        self.calibration = RatioCalibration()
        self._counts: dict[tuple[str, str], tuple[int, bool]] = {}

    # ------------------------------------------------------------ decisions
    def difficulty(self, question: str, confidence: float | None = None) -> float:
        """0 (easy) … 1 (hard) from question length, hard words, several questions, retrieval confidence."""
        r = self.config.router
        words = re.findall(r"[\w'-]+", question.lower())
        d = 0.35 * min(1.0, len(words) / 40)
        hard = sum(1 for w in words if w in set(r.hard_words))
        d += 0.35 if hard == 1 else 0.5 if hard > 1 else 0.0
        if question.count("?") > 1:
            d += 0.1
        if confidence is not None and confidence < r.low_confidence:
            d += 0.3 * (1 - max(0.0, confidence) / r.low_confidence)
        return round(min(1.0, d), 3)

    @staticmethod
    def confidence_of(context: Sequence[Scored]) -> float | None:
        """Top rerank score, else top score; None without context."""
        if not context:
            return None
        reranked = [s.rerank_score for s in context if s.rerank_score is not None]
        return max(reranked) if reranked else max(s.score for s in context)

    def engine_tokens(self, tier: TierConfig, prompt: Prompt) -> tuple[int, bool]:
        """(prompt tokens as ``tier``'s engine counts them, whether that is an estimate). Memoised for the
        last prompts, since plan and fallback ask for the same prompt more than once."""
        key = (tier.name, prompt.text)
        hit = self._counts.get(key)
        if hit is not None:
            return hit
        counter = self.counters.get(tier.name)
        n = None
        if counter is not None:
            try:
                n = counter.count_prompt(prompt)
            except GenerationError:
                n = None
        out = (int(n), False) if n is not None else (self.calibration.estimate(tier.name, prompt.total_tokens), True)
        if len(self._counts) > 256:
            self._counts.clear()
        self._counts[key] = out
        return out

    def _fits(self, tier: TierConfig, prompt: Prompt, max_tokens: int) -> bool:
        n, _ = self.engine_tokens(tier, prompt)
        return n + min(max_tokens, tier.max_output_tokens) <= tier.context_window

    def plan(self, prompt: Prompt, *, question: str, max_tokens: int, task: str | None = None,
             confidence: float | None = None, refit: Refit | None = None,
             small: bool = False) -> tuple[list[TierConfig], RouteDecision]:
        """The tiers to try in order and the initial decision. Raises :class:`RoutingError` when no tier
        can hold the prompt and there is no ``refit``. ``small=True`` (degrade level 3) starts at the
        smallest tier whatever the task or difficulty."""
        r = self.config.router
        diff = self.difficulty(question, confidence)
        if small:
            start, reason = 0, "degrade level 3 → small tier"
        elif task and task in r.small_tasks:
            start, reason = 0, f"task {task!r} → small tier"
        elif not r.enabled:
            start, reason = len(self.tiers) - 1, "router disabled → largest tier"
        elif diff >= r.difficulty_threshold:
            start, reason = len(self.tiers) - 1, f"difficulty {diff} ≥ {r.difficulty_threshold} → large tier"
        else:
            start, reason = 0, f"difficulty {diff} < {r.difficulty_threshold} → small tier"
        order = self.tiers[start:] + self.tiers[:start][::-1]
        first_fit = next((t for t in order if self._fits(t, prompt, max_tokens)), None)
        if first_fit is None and refit is None:
            need = prompt.total_tokens + max_tokens
            raise RoutingError(
                f"prompt of {prompt.total_tokens} tokens + {max_tokens} output tokens ({need}) is over every "
                f"tier's window ({', '.join(f'{t.name}={t.context_window}' for t in self.tiers)})",
                fix="lower the budget (budget.context_window / section caps) or add a larger tier")
        if first_fit is not None and first_fit is not order[0]:
            reason += f"; {order[0].name} window {order[0].context_window} too small → {first_fit.name}"
            order.remove(first_fit)
            order.insert(0, first_fit)
        if max_tokens > order[0].max_output_tokens:
            reason += f"; max_tokens {max_tokens} capped at {order[0].name}'s limit {order[0].max_output_tokens}"
        dec = RouteDecision(tier=order[0].name, reason=reason, difficulty=diff, confidence=confidence, task=task)
        return order, dec

    def check_answer(self, text: str, context: Sequence[Scored] | None) -> str | None:
        """Why an answer fails the check (``empty``, ``refusal``, ``low grounding``), or None if it passes."""
        r = self.config.router
        if not text.strip():
            return "empty"
        low = text.lower()
        if r.escalate_on_no_answer and any(p in low for p in r.refusal_phrases):
            return "refusal"
        if context:
            ans = set(terms(text))
            ctx: set[str] = set()
            for s in context:
                ctx.update(terms(s.chunk.text))
            if ans and len(ans & ctx) / len(ans) < r.min_grounding:
                return f"low grounding ({len(ans & ctx)}/{len(ans)} answer terms in context)"
        return None

    def handle(self, question: str, *, tool_cache: Any = None, max_output_bytes: int | None = None) -> Routed | None:
        """A deterministic handler's answer (no model), or None.

        ``tool_cache`` (a :class:`~ragbudget.cache.ToolCache`) memoises answers that do not depend on the
        clock, keyed by the normalised question and the FAQ table, shared by every process on the same cache
        backend; an output over ``max_output_bytes`` (``service.limits.max_tool_output_bytes``) is not
        used: the question goes on to retrieval and a model (logged)."""
        if not self.config.router.deterministic_handlers:
            return None
        t0 = time.perf_counter()
        hit = self._handler_answer(question, tool_cache)
        if hit is None:
            return None
        if max_output_bytes is not None and len(hit.text.encode("utf-8")) > max_output_bytes:
            log.warning("%s handler output of %d bytes is over service.limits.max_tool_output_bytes=%d: not used",
                        hit.handler, len(hit.text.encode("utf-8")), max_output_bytes)
            return None
        ms = (time.perf_counter() - t0) * 1000
        gen = Generation(text=hit.text, usage=Usage(), timings=Timings(stages={"handler": ms}, ttft_ms=ms,
                                                                      total_ms=ms),
                         model=hit.handler, backend="handler")
        return Routed(gen, RouteDecision(tier=f"handler:{hit.handler}", reason=f"{hit.handler} handler",
                                         backend="handler", model=hit.handler, handler=hit.handler))

    def _handler_answer(self, question: str, tool_cache: Any) -> HandlerAnswer | None:
        faq = self.config.router.faq
        if getattr(self, "_faq_fp", None) is None:
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

    # ------------------------------------------------------------ running one tier
    def _events(self, tier: TierConfig, prompt: Prompt, *, max_tokens: int, temperature: float,
                stop: Sequence[str] | None, context: Sequence[Scored] | None,
                **sampling: Any) -> Iterator[TokenEvent | Generation]:
        """Token events then the final Generation, from a worker thread under the tier's timeouts."""
        gen = self.generators[tier.name]
        if tier.backend == "extractive":
            # Local, bounded and deterministic: no timeout to enforce, so no worker thread and no
            # per-token hand-off between threads (that cost ~20 ms per answer under load).
            s = gen.stream(prompt, max_tokens=min(max_tokens, tier.max_output_tokens), temperature=temperature,
                           stop=stop, context=context, **sampling)
            try:
                yield from s
            finally:
                if s.generation is None:
                    s.close()
            yield s.generation
            return
        q: queue.Queue[tuple[str, Any]] = queue.Queue()
        cancel = threading.Event()

        def work() -> None:
            try:
                s = gen.stream(prompt, max_tokens=min(max_tokens, tier.max_output_tokens),
                               temperature=temperature, stop=stop, context=context, **sampling)
                for ev in s:
                    q.put(("tok", ev))
                    if cancel.is_set():
                        s.close()
                        return
                q.put(("done", s.generation))
            except BaseException as err:  # noqa: BLE001 - handed to the consumer
                q.put(("err", err))

        threading.Thread(target=work, daemon=True, name=f"ragbudget-{tier.name}").start()
        start = time.monotonic()
        first_deadline = start + tier.first_token_timeout_s
        deadline = start + tier.timeout_s
        got_first = False
        try:
            while True:
                wait = (deadline if got_first else min(first_deadline, deadline)) - time.monotonic()
                try:
                    kind, val = q.get(timeout=max(0.0, wait))
                except queue.Empty:
                    what = "total" if got_first else "first-token"
                    limit = tier.timeout_s if got_first else tier.first_token_timeout_s
                    raise GenerationTimeoutError(f"tier {tier.name!r}: {what} timeout after {limit}s",
                                                 fix="raise the tier's timeout or use a faster tier") from None
                if kind == "err":
                    raise val
                if kind == "done":
                    yield val
                    return
                got_first = True
                yield val
        finally:
            cancel.set()

    # ------------------------------------------------------------ public entry points
    def generate(self, prompt: Prompt, *, question: str, max_tokens: int, context: Sequence[Scored] | None = None,
                 task: str | None = None, confidence: float | None = None, refit: Refit | None = None,
                 temperature: float = 0.0, stop: Sequence[str] | None = None, small: bool = False,
                 **sampling: Any) -> Routed:
        """Route, fall back, escalate; never hangs (tier timeouts). Raises :class:`GenerationError` when
        every tier failed and nothing was produced, :class:`RoutingError` when no tier fits."""
        if confidence is None and context:
            confidence = self.confidence_of(context)
        order, dec = self.plan(prompt, question=question, max_tokens=max_tokens, task=task,
                               confidence=confidence, refit=refit, small=small)
        kw = dict(max_tokens=max_tokens, temperature=temperature, stop=stop, context=context,
                  **{k: v for k, v in sampling.items() if v is not None})  # top_p, seed: only when set
        routed = self._chain(order, prompt, dec, refit, **kw)
        large = self.tiers[-1]
        idx = self.tiers.index(self._by_name[dec.tier])
        if (self.config.router.escalate_on_failed_check and idx < len(self.tiers) - 1
                and not routed.generation.partial and not small):
            why = self.check_answer(routed.generation.text, context)
            if why:
                try:
                    up = self._chain(self.tiers[idx + 1:], prompt, RouteDecision(tier="", reason=""), refit, **kw)
                except (GenerationError, RoutingError) as err:
                    dec.errors.append(f"escalation failed: {err}")
                else:
                    dec.escalated, dec.escalated_from, dec.escalation_reason = True, dec.tier, why
                    dec.fallbacks += up.decision.fallbacks
                    dec.errors += up.decision.errors
                    dec.tier, dec.backend, dec.model = up.decision.tier, up.decision.backend, up.decision.model
                    dec.refitted = dec.refitted or up.decision.refitted
                    dec.estimated_cost += up.decision.estimated_cost
                    dec.usage_estimated = up.decision.usage_estimated
                    routed = Routed(up.generation, dec, up.prompt)
        dec.always_large_cost = tier_cost(large, routed.generation.usage)
        dec.partial = routed.generation.partial
        return Routed(routed.generation, dec, routed.prompt)

    def _prepare(self, tier: TierConfig, prompt: Prompt, max_tokens: int, refit: Refit | None,
                 dec: RouteDecision) -> Prompt | None:
        if not self.breakers[tier.name].allow():
            dec.fallbacks.append(tier.name)
            dec.errors.append(f"{tier.name}: circuit open")
            return None
        if self._fits(tier, prompt, max_tokens):
            return prompt
        if refit is not None:
            # the builder counts in its own tokens: scale the engine's window by this prompt's ratio
            window = tier.context_window
            for _ in range(3):
                n, _est = self.engine_tokens(tier, prompt)
                window = int(window * min(1.0, prompt.total_tokens / max(n, 1)))
                prompt = refit(window)
                if self._fits(tier, prompt, max_tokens):
                    dec.refitted = True
                    return prompt
                window = int(window * 0.9)
        self.breakers[tier.name].success()  # not the backend's fault; release a half-open trial
        dec.fallbacks.append(tier.name)
        dec.errors.append(f"{tier.name}: prompt does not fit window {tier.context_window}")
        return None

    def _chain(self, order: Sequence[TierConfig], prompt: Prompt, dec: RouteDecision, refit: Refit | None,
               **kw: Any) -> Routed:
        partial: tuple[TierConfig, Generation] | None = None
        for tier in order:
            p = self._prepare(tier, prompt, kw["max_tokens"], refit, dec)
            if p is None:
                continue
            try:
                final = None
                for item in self._events(tier, p, **kw):
                    if isinstance(item, Generation):
                        final = item
                assert final is not None
            except GenerationError as err:
                self.breakers[tier.name].failure()
                dec.fallbacks.append(tier.name)
                dec.errors.append(f"{tier.name}: {type(err).__name__}: {str(err).splitlines()[0]}")
                text = getattr(err, "partial_text", "")
                if text and partial is None:
                    partial = (tier, Generation(text=text, usage=Usage(prompt_tokens=p.total_tokens),
                                                timings=Timings(), model=tier.model, backend=tier.backend,
                                                finish_reason="error", partial=True))
                continue
            self.breakers[tier.name].success()
            return self._served(tier, final, dec, p)
        if partial is not None:
            return self._served(partial[0], partial[1], dec)
        raise BackendUnavailableError("every tier failed: " + "; ".join(dec.errors),
                                      fix="check the backends (servers up, model names) or add a fallback tier")

    def _served(self, tier: TierConfig, gen: Generation, dec: RouteDecision, prompt: Prompt | None = None) -> Routed:
        if dec.fallbacks and tier.name != dec.tier and dec.tier:
            dec.reason += f"; fell back to {tier.name}"
        dec.tier, dec.backend, dec.model = tier.name, gen.backend or tier.backend, gen.model or tier.model
        dec.estimated_cost += tier_cost(tier, gen.usage)
        dec.partial = gen.partial
        dec.usage_estimated = gen.usage_estimated or tier.backend == "extractive"  # no engine counted it
        if prompt is not None and tier.backend != "extractive":
            n, est = self.engine_tokens(tier, prompt)
            dec.prompt_tokens_counted, dec.prompt_tokens_estimated = n, est
            if gen.usage_estimated:
                # the engine reported nothing: its own tokenizer's count beats the builder's estimate
                if not est:
                    gen = replace(gen, usage=replace(gen.usage, prompt_tokens=n))
            elif not gen.partial and gen.usage.prompt_tokens > 0:
                self.calibration.observe(tier.name, prompt.total_tokens, gen.usage.prompt_tokens)
        return Routed(gen, dec, prompt)

    def stream(self, prompt: Prompt, *, question: str, max_tokens: int, context: Sequence[Scored] | None = None,
               task: str | None = None, confidence: float | None = None, refit: Refit | None = None,
               temperature: float = 0.0, stop: Sequence[str] | None = None,
               escalate: bool = False, small: bool = False, **sampling: Any) -> "RoutedStream":
        """Stream tokens from the routed tier. Fallback happens only before the first token; a failure
        after it ends the stream with a partial Generation. ``escalate=True`` (and
        ``router.escalate_on_failed_check``) holds a smaller tier's tokens until its answer passes the
        check, else streams the next larger tier."""
        if confidence is None and context:
            confidence = self.confidence_of(context)
        order, dec = self.plan(prompt, question=question, max_tokens=max_tokens, task=task,
                               confidence=confidence, refit=refit, small=small)
        kw = dict(max_tokens=max_tokens, temperature=temperature, stop=stop, context=context,
                  **{k: v for k, v in sampling.items() if v is not None})  # top_p, seed: only when set
        return RoutedStream(self, order, prompt, dec, refit, kw,
                            escalate=escalate and self.config.router.escalate_on_failed_check)

    async def agenerate(self, prompt: Prompt, **kw: Any) -> Routed:
        return await asyncio.to_thread(lambda: self.generate(prompt, **kw))

    async def astream(self, prompt: Prompt, **kw: Any) -> AsyncGenerationStream:
        """Async view of :meth:`stream`; ``.stream.routed`` holds the result when it ends."""
        return AsyncGenerationStream(self.stream(prompt, **kw))


class RoutedStream(Iterator[TokenEvent]):
    """Token events of a routed stream; ``.routed`` holds Generation + decision when it ends.

    With ``escalate=True`` a tier below the largest is buffered: its answer is checked before any token
    is released, and a failed check streams the next larger tier instead (TTFT of small answers then
    equals their total time)."""

    def __init__(self, router: Router, order: Sequence[TierConfig], prompt: Prompt, dec: RouteDecision,
                 refit: Refit | None, kw: dict[str, Any], *, escalate: bool = False) -> None:
        self.routed: Routed | None = None
        self._router, self._prompt, self._refit, self._kw = router, prompt, refit, kw
        self._sent: Prompt | None = None  # the prompt of the tier that served (after a refit)
        self._it = self._run(order, dec, escalate)

    def __iter__(self) -> "RoutedStream":
        return self

    def __next__(self) -> TokenEvent:
        return next(self._it)

    @property
    def generation(self) -> Generation | None:
        return self.routed.generation if self.routed else None

    def _run(self, order: Sequence[TierConfig], dec: RouteDecision, escalate: bool) -> Iterator[TokenEvent]:
        router = self._router
        last = router.tiers[-1]
        buffer = escalate and order[0] is not last
        held: list[TokenEvent] = []
        gen = yield from self._chain(order, dec, held if buffer else None)
        if buffer and not gen.partial and dec.tier != last.name:
            why = router.check_answer(gen.text, self._kw.get("context"))
            idx = router.tiers.index(router._by_name[dec.tier])
            if why:
                up = RouteDecision(tier="", reason="")
                try:
                    gen2 = yield from self._chain(router.tiers[idx + 1:], up, None)
                except (GenerationError, RoutingError) as err:
                    dec.errors.append(f"escalation failed: {err}")
                else:
                    dec.escalated, dec.escalated_from, dec.escalation_reason = True, dec.tier, why
                    dec.fallbacks += up.fallbacks
                    dec.errors += up.errors
                    dec.tier, dec.backend, dec.model = up.tier, up.backend, up.model
                    dec.estimated_cost += up.estimated_cost
                    gen = gen2
                    held = []
        yield from held
        dec.always_large_cost = tier_cost(last, gen.usage)
        dec.partial = gen.partial
        dec.usage_estimated = gen.usage_estimated or dec.backend == "extractive"  # no engine counted it
        self.routed = Routed(gen, dec, self._sent)

    def _chain(self, order: Sequence[TierConfig], dec: RouteDecision,
               held: list[TokenEvent] | None) -> Iterator[TokenEvent]:
        """Stream (or hold) the first tier in ``order`` that answers; returns its Generation."""
        router = self._router
        for tier in order:
            p = router._prepare(tier, self._prompt, self._kw["max_tokens"], self._refit, dec)
            if p is None:
                continue
            emitted: list[str] = []
            try:
                for item in router._events(tier, p, **self._kw):
                    if isinstance(item, Generation):
                        router.breakers[tier.name].success()
                        served = router._served(tier, item, dec, p)
                        self._sent = served.prompt
                        return served.generation
                    emitted.append(item.text)
                    if held is None:
                        yield item
                    else:
                        held.append(item)
            except GenerationError as err:
                router.breakers[tier.name].failure()
                dec.errors.append(f"{tier.name}: {type(err).__name__}: {str(err).splitlines()[0]}")
                if emitted and held is None:  # tokens are out: end with a partial answer
                    gen = Generation(text="".join(emitted), usage=Usage(prompt_tokens=p.total_tokens,
                                                                        completion_tokens=len(emitted)),
                                     timings=Timings(), model=tier.model, backend=tier.backend,
                                     finish_reason="error", partial=True)
                    served = router._served(tier, gen, dec, p)
                    self._sent = served.prompt
                    return served.generation
                if held is not None:
                    held.clear()
                dec.fallbacks.append(tier.name)
        raise BackendUnavailableError("every tier failed: " + "; ".join(dec.errors),
                                      fix="check the backends (servers up, model names) or add a fallback tier")

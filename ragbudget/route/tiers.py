"""The model tiers of one router: their generators, circuit breakers and prompt counters, and how one tier
is run — under its first-token and total timeouts — and accounted for when it served."""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import replace
from typing import Any, Callable, Iterator, Mapping, Sequence

from ..kernels.breaker import CircuitBreaker
from ..config import LLMConfig, TierConfig
from ..errors import GenerationError, GenerationTimeoutError, RoutingError
from ..llm import Generator, make_generator
from ..llm.counting import RatioCalibration, make_counter
from ..kernels.tokens import Tokenizer
from ..types import Generation, Prompt, Scored, TokenEvent
from .decision import Refit, RouteDecision, Routed, tier_cost

log = logging.getLogger("ragbudget")


class TierSet:
    """``config.tiers`` from small (cheap) to large, ready to run. ``generators`` overrides the backend built
    for a tier name (tests script a backend there; a service shares loaded models)."""

    def __init__(self, config: LLMConfig, *, generators: Mapping[str, Generator] | None = None,
                 tokenizer: Tokenizer | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.tiers = list(config.tiers)
        self.by_name = {t.name: t for t in self.tiers}
        given = dict(generators or {})
        unknown = set(given) - set(self.by_name)
        if unknown:
            raise RoutingError(f"generators given for unknown tiers {sorted(unknown)}",
                               fix=f"use tier names from llm.tiers: {sorted(self.by_name)}")
        self.generators: dict[str, Generator] = {
            t.name: given[t.name] if t.name in given else make_generator(t, tokenizer=tokenizer) for t in self.tiers}
        r = config.router
        self.breakers = {t.name: CircuitBreaker(r.breaker_failures, r.breaker_reset_s, clock) for t in self.tiers}
        self.counters = {t.name: make_counter(t.tokenizer, backend=t.backend, model=t.model, base_url=t.base_url,
                                              engine=getattr(self.generators[t.name], "count_prompt", None))
                         for t in self.tiers if t.backend != "extractive"}
        self.calibration = RatioCalibration()
        self._counts: dict[tuple[str, str], tuple[int, bool]] = {}

    @property
    def largest(self) -> TierConfig:
        return self.tiers[-1]

    def above(self, name: str) -> list[TierConfig]:
        """The tiers larger than ``name``, nearest first (where an escalation goes)."""
        return self.tiers[self.tiers.index(self.by_name[name]) + 1:]

    # ------------------------------------------------------------ prompt size per engine
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

    def fits(self, tier: TierConfig, prompt: Prompt, max_tokens: int) -> bool:
        n, _ = self.engine_tokens(tier, prompt)
        return n + min(max_tokens, tier.max_output_tokens) <= tier.context_window

    # ------------------------------------------------------------ one tier
    def prepare(self, tier: TierConfig, prompt: Prompt, max_tokens: int, refit: Refit | None,
                dec: RouteDecision) -> Prompt | None:
        """The prompt to send ``tier`` (re-fitted to its window if needed), or None to skip it (circuit open,
        or no fit); a skip is recorded in ``dec``."""
        if not self.breakers[tier.name].allow():
            dec.fallbacks.append(tier.name)
            dec.errors.append(f"{tier.name}: circuit open")
            return None
        if self.fits(tier, prompt, max_tokens):
            return prompt
        if refit is not None:
            # the builder counts in its own tokens: scale the engine's window by this prompt's ratio
            window = tier.context_window
            for _ in range(3):
                n, _est = self.engine_tokens(tier, prompt)
                window = int(window * min(1.0, prompt.total_tokens / max(n, 1)))
                prompt = refit(window)
                if self.fits(tier, prompt, max_tokens):
                    dec.refitted = True
                    return prompt
                window = int(window * 0.9)
        self.breakers[tier.name].success()  # not the backend's fault; release a half-open trial
        dec.fallbacks.append(tier.name)
        dec.errors.append(f"{tier.name}: prompt does not fit window {tier.context_window}")
        return None

    def run(self, tier: TierConfig, prompt: Prompt, *, max_tokens: int, temperature: float,
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
            assert s.generation is not None
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
                    first = not got_first and first_deadline < deadline  # which limit ran out
                    what = "first-token" if first else "total"
                    limit = tier.first_token_timeout_s if first else tier.timeout_s
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

    def failed(self, tier: TierConfig, err: GenerationError, dec: RouteDecision) -> None:
        self.breakers[tier.name].failure()
        dec.errors.append(f"{tier.name}: {type(err).__name__}: {str(err).splitlines()[0]}")

    def served(self, tier: TierConfig, gen: Generation, dec: RouteDecision, prompt: Prompt | None = None) -> Routed:
        """Account for ``tier`` having answered: decision, cost, usage (the engine's own count when it reported
        none), and the calibration of the builder's counts against the engine's."""
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

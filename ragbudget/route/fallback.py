"""The fallback chain: try tiers in order until one answers — whole answers (:func:`chain`) or streamed
tokens (:class:`RoutedStream`, which falls back only before its first token is out) — and escalate a
smaller tier's answer that fails the check to the next larger tiers."""

from __future__ import annotations

from typing import Any, Callable, Generator as Gen, Iterator, Sequence

from ..config import TierConfig
from ..errors import BackendUnavailableError, GenerationError, RoutingError
from ..types import Generation, Prompt, Scored, Timings, TokenEvent, Usage
from .decision import Refit, RouteDecision, Routed, tier_cost
from .tiers import TierSet

Check = Callable[[str, "Sequence[Scored] | None"], "str | None"]  # why an answer fails, or None


def _every_tier_failed(dec: RouteDecision) -> BackendUnavailableError:
    return BackendUnavailableError("every tier failed: " + "; ".join(dec.errors),
                                   fix="check the backends (servers up, model names) or add a fallback tier")


def chain(tiers: TierSet, order: Sequence[TierConfig], prompt: Prompt, dec: RouteDecision, refit: Refit | None,
          **kw: Any) -> Routed:
    """The first tier in ``order`` that answers, whole. A tier that fails mid-answer falls back like one that
    failed at once; its partial text is served only when no tier answers."""
    partial: tuple[TierConfig, Generation] | None = None
    for tier in order:
        p = tiers.prepare(tier, prompt, kw["max_tokens"], refit, dec)
        if p is None:
            continue
        try:
            final = None
            for item in tiers.run(tier, p, **kw):
                if isinstance(item, Generation):
                    final = item
            assert final is not None
        except GenerationError as err:
            tiers.failed(tier, err, dec)
            dec.fallbacks.append(tier.name)
            text = getattr(err, "partial_text", "")
            if text and partial is None:
                partial = (tier, Generation(text=text, usage=Usage(prompt_tokens=p.total_tokens),
                                            timings=Timings(), model=tier.model, backend=tier.backend,
                                            finish_reason="error", partial=True))
            continue
        tiers.breakers[tier.name].success()
        return tiers.served(tier, final, dec, p)
    if partial is not None:
        return tiers.served(partial[0], partial[1], dec)
    raise _every_tier_failed(dec)


def generate(tiers: TierSet, check: Check, order: Sequence[TierConfig], prompt: Prompt, dec: RouteDecision,
             refit: Refit | None, *, escalate: bool, **kw: Any) -> Routed:
    """:func:`chain`, then — with ``escalate`` — the next larger tiers when the answer fails ``check``."""
    routed = chain(tiers, order, prompt, dec, refit, **kw)
    if escalate and dec.tier != tiers.largest.name and not routed.generation.partial:
        why = check(routed.generation.text, kw.get("context"))
        if why:
            try:
                up = chain(tiers, tiers.above(dec.tier), prompt, RouteDecision(tier="", reason=""), refit, **kw)
            except (GenerationError, RoutingError) as err:
                dec.errors.append(f"escalation failed: {err}")
            else:
                dec.escalated_to(up.decision, why)
                routed = Routed(up.generation, dec, up.prompt)
    dec.always_large_cost = tier_cost(tiers.largest, routed.generation.usage)
    dec.partial = routed.generation.partial
    return Routed(routed.generation, dec, routed.prompt)


class RoutedStream(Iterator[TokenEvent]):
    """Token events of a routed stream; ``.routed`` holds Generation + decision when it ends.

    With ``escalate=True`` a tier below the largest is buffered: its answer is checked before any token
    is released, and a failed check streams the next larger tier instead (TTFT of small answers then
    equals their total time)."""

    def __init__(self, tiers: TierSet, check: Check, order: Sequence[TierConfig], prompt: Prompt,
                 dec: RouteDecision, refit: Refit | None, kw: dict[str, Any], *, escalate: bool = False) -> None:
        self.routed: Routed | None = None
        self._tiers, self._check, self._prompt, self._refit, self._kw = tiers, check, prompt, refit, kw
        self._sent: Prompt | None = None  # the prompt of the tier that served (after a refit)
        self._it = self._run(order, dec, escalate)

    def __iter__(self) -> "RoutedStream":
        return self

    def __next__(self) -> TokenEvent:
        return next(self._it)

    def close(self) -> None:
        """Stop now (the consumer left): the running tier's worker is told to stop."""
        self._it.close()

    @property
    def generation(self) -> Generation | None:
        return self.routed.generation if self.routed else None

    def _run(self, order: Sequence[TierConfig], dec: RouteDecision, escalate: bool) -> Gen[TokenEvent, None, None]:
        tiers = self._tiers
        last = tiers.largest
        buffer = escalate and order[0] is not last
        held: list[TokenEvent] = []
        gen = yield from self._chain(order, dec, held if buffer else None)
        if buffer and not gen.partial and dec.tier != last.name:
            why = self._check(gen.text, self._kw.get("context"))
            if why:
                up = RouteDecision(tier="", reason="")
                try:
                    gen2 = yield from self._chain(tiers.above(dec.tier), up, None)
                except (GenerationError, RoutingError) as err:
                    dec.errors.append(f"escalation failed: {err}")
                else:
                    dec.escalated_to(up, why)
                    gen = gen2
                    held = []
        yield from held
        dec.always_large_cost = tier_cost(last, gen.usage)
        dec.partial = gen.partial
        dec.usage_estimated = gen.usage_estimated or dec.backend == "extractive"  # no engine counted it
        self.routed = Routed(gen, dec, self._sent)

    def _chain(self, order: Sequence[TierConfig], dec: RouteDecision,
               held: list[TokenEvent] | None) -> Gen[TokenEvent, None, Generation]:
        """Stream (or hold) the first tier in ``order`` that answers; returns its Generation."""
        tiers = self._tiers
        for tier in order:
            p = tiers.prepare(tier, self._prompt, self._kw["max_tokens"], self._refit, dec)
            if p is None:
                continue
            emitted: list[str] = []
            try:
                for item in tiers.run(tier, p, **self._kw):
                    if isinstance(item, Generation):
                        tiers.breakers[tier.name].success()
                        served = tiers.served(tier, item, dec, p)
                        self._sent = served.prompt
                        return served.generation
                    emitted.append(item.text)
                    if held is None:
                        yield item
                    else:
                        held.append(item)
            except GenerationError as err:
                tiers.failed(tier, err, dec)
                if emitted and held is None:  # tokens are out: end with a partial answer
                    gen = Generation(text="".join(emitted), usage=Usage(prompt_tokens=p.total_tokens,
                                                                        completion_tokens=len(emitted)),
                                     timings=Timings(), model=tier.model, backend=tier.backend,
                                     finish_reason="error", partial=True)
                    served = tiers.served(tier, gen, dec, p)
                    self._sent = served.prompt
                    return served.generation
                if held is not None:
                    held.clear()
                dec.fallbacks.append(tier.name)
        raise _every_tier_failed(dec)

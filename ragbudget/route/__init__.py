"""Routing: pick a tier per request, fall back on errors and timeouts, escalate weak small answers.

Tiers are listed in ``llm.tiers`` from small (cheap) to large. Per request:

1. plan (:mod:`.planner`) — rules (``task`` in ``router.small_tasks`` → smallest tier), else a difficulty
   estimate (question length, words like why/compare/explain, low retrieval confidence) against
   ``router.difficulty_threshold``: hard → largest tier, easy → smallest. A tier whose ``context_window``
   cannot hold prompt + max_tokens is never chosen; the next larger one is.
2. fallback chain (:mod:`.fallback`) — the chosen tier, then larger tiers, then smaller ones (nearest
   first). A tier whose circuit breaker is open is skipped; on a smaller window the caller's
   ``refit(window) -> Prompt`` re-fits the context. Every call runs under a first-token and a total
   timeout (:mod:`.tiers`), so nothing hangs.
3. escalation — when a smaller tier's answer fails the check (empty, refusal, low grounding in the
   context) the next larger tier answers instead.

Deterministic handlers (:mod:`.deterministic`) answer before any of this, without a model. The result is a
:class:`Routed`: the :class:`Generation` plus a :class:`RouteDecision` (tier, reason, escalation, fallbacks
and errors, estimated cost vs always-large) for ``ledger.route``.
"""

from ..kernels.breaker import CircuitBreaker
from .decision import Refit, RouteDecision, Routed, tier_cost
from .fallback import RoutedStream
from .router import Router

__all__ = ["CircuitBreaker", "Refit", "RouteDecision", "Routed", "RoutedStream", "Router", "tier_cost"]

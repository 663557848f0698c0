"""What routing decided and why: :class:`RouteDecision` (into ``ledger.route``), :class:`Routed`, prices."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from ..config import TierConfig
from ..types import Generation, Prompt, Usage

Refit = Callable[[int], Prompt]  # window → the context re-fitted to it (the pipeline's builder)


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

    def escalated_to(self, up: "RouteDecision", why: str) -> None:
        """Record that the next larger tiers (decided in ``up``) answered instead, because of ``why``."""
        self.escalated, self.escalated_from, self.escalation_reason = True, self.tier, why
        self.fallbacks += up.fallbacks
        self.errors += up.errors
        self.tier, self.backend, self.model = up.tier, up.backend, up.model
        self.refitted = self.refitted or up.refitted
        self.estimated_cost += up.estimated_cost
        self.usage_estimated = up.usage_estimated


@dataclass
class Routed:
    generation: Generation
    decision: RouteDecision
    prompt: Prompt | None = None  # the prompt the serving tier was sent (after any window refit)


def tier_cost(tier: TierConfig, usage: Usage) -> float:
    return usage.prompt_tokens / 1000 * tier.price_in_per_1k + usage.completion_tokens / 1000 * tier.price_out_per_1k

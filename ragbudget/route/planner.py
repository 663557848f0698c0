"""Where a request starts and whether a small tier's answer may stand: difficulty, retrieval confidence,
the tier order (never a tier whose window cannot hold the prompt), and the answer check."""

from __future__ import annotations

from typing import Sequence

from ..config import RouterConfig, TierConfig
from ..errors import RoutingError
from ..llm.extractive import terms
from ..kernels.text import route_words
from ..types import Prompt, Scored
from .decision import Refit, RouteDecision
from .tiers import TierSet


class Planner:
    def __init__(self, config: RouterConfig, tiers: TierSet) -> None:
        self.config = config
        self.tiers = tiers

    def difficulty(self, question: str, confidence: float | None = None) -> float:
        """0 (easy) … 1 (hard) from question length, hard words, several questions, retrieval confidence."""
        r = self.config
        words = route_words(question.lower())
        d = 0.35 * min(1.0, len(words) / 40)
        hard_words = set(r.hard_words)
        hard = sum(1 for w in words if w in hard_words)
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

    def plan(self, prompt: Prompt, *, question: str, max_tokens: int, task: str | None = None,
             confidence: float | None = None, refit: Refit | None = None,
             small: bool = False) -> tuple[list[TierConfig], RouteDecision]:
        """The tiers to try in order and the initial decision. Raises :class:`RoutingError` when no tier
        can hold the prompt and there is no ``refit``. ``small=True`` (degrade level 3) starts at the
        smallest tier whatever the task or difficulty."""
        r, tiers = self.config, self.tiers.tiers
        diff = self.difficulty(question, confidence)
        if small:
            start, reason = 0, "degrade level 3 → small tier"
        elif task and task in r.small_tasks:
            start, reason = 0, f"task {task!r} → small tier"
        elif not r.enabled:
            start, reason = len(tiers) - 1, "router disabled → largest tier"
        elif diff >= r.difficulty_threshold:
            start, reason = len(tiers) - 1, f"difficulty {diff} ≥ {r.difficulty_threshold} → large tier"
        else:
            start, reason = 0, f"difficulty {diff} < {r.difficulty_threshold} → small tier"
        order = tiers[start:] + tiers[:start][::-1]
        first_fit = next((t for t in order if self.tiers.fits(t, prompt, max_tokens)), None)
        if first_fit is None and refit is None:
            need = prompt.total_tokens + max_tokens
            raise RoutingError(
                f"prompt of {prompt.total_tokens} tokens + {max_tokens} output tokens ({need}) is over every "
                f"tier's window ({', '.join(f'{t.name}={t.context_window}' for t in tiers)})",
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
        r = self.config
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

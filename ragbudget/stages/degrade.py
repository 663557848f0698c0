"""The degradation ladder: what each level that admission control picks changes in one query.

Levels: 0 normal, 1 smaller context (half the top-k and half the retrieved budget), 2 no reranking,
3 the smallest model tier and no escalation, 4 a cached or extractive answer only (no model), 5 reject.
Each level includes the ones below it. The pipeline computes a :class:`DegradePlan` once per query and
asks it; nothing else compares levels.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import AdmissionError

SMALLER_CONTEXT, NO_RERANK, SMALL_MODEL, EXTRACTIVE_ONLY, REJECT = 1, 2, 3, 4, 5


@dataclass(frozen=True)
class DegradePlan:
    level: int = 0

    @classmethod
    def at(cls, level: int) -> "DegradePlan":
        """The plan for ``level``; :class:`AdmissionError` (429) at :data:`REJECT` and above."""
        if level >= REJECT:
            raise AdmissionError(f"degrade level {level}: overloaded, request rejected", fix="retry after Retry-After")
        return cls(max(0, int(level)))

    @property
    def smaller_context(self) -> bool:
        return self.level >= SMALLER_CONTEXT

    @property
    def rerank(self) -> bool:
        return self.level < NO_RERANK

    @property
    def small_model(self) -> bool:
        return self.level >= SMALL_MODEL

    @property
    def extractive_only(self) -> bool:
        return self.level >= EXTRACTIVE_ONLY

    @property
    def retrieved_scale(self) -> float:
        """The share of the retrieved-context budget this level allows."""
        return 0.5 if self.smaller_context else 1.0

    def top_k(self, k: int) -> int:
        return max(1, k // 2) if self.smaller_context else k

    def candidates(self, k: int, rerank_top_n: int) -> int:
        """How many chunks to retrieve: enough for the reranker to choose ``k`` from, unless it is skipped."""
        return max(k, rerank_top_n) if self.rerank else k

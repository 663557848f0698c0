"""Pure score-fusion kernels: weighted reciprocal rank fusion and score normalisation."""

from __future__ import annotations

from typing import Hashable, Mapping, Sequence, TypeVar

K = TypeVar("K", bound=Hashable)


def rrf(rankings: Mapping[str, Sequence[K]], weights: Mapping[str, float] | None = None,
        k: int = 60) -> list[tuple[K, float]]:
    """Weighted reciprocal rank fusion.

    ``rankings`` maps a retriever name to its ids, best first; an id at 1-based rank ``r`` in list ``n``
    scores ``weights[n] / (k + r)`` (weight 1.0 when absent), summed over lists. Returns (id, score) sorted
    by score descending; ties keep first-seen order (lists in the mapping's order).
    """
    if k < 0:
        raise ValueError(f"rrf k must be ≥ 0, got {k}")
    weights = weights or {}
    scores: dict[K, float] = {}
    for name, ids in rankings.items():
        w = float(weights.get(name, 1.0))
        if w == 0:
            continue
        for rank, key in enumerate(ids, start=1):
            scores[key] = scores.get(key, 0.0) + w / (k + rank)
    order = {key: i for i, key in enumerate(scores)}
    return sorted(scores.items(), key=lambda kv: (-kv[1], order[kv[0]]))


def minmax(scores: Sequence[float]) -> list[float]:
    """Scale to [0, 1]; all-equal inputs map to 1.0 (each is as good as the best)."""
    if not scores:
        return []
    lo, hi = min(scores), max(scores)
    if hi == lo:
        return [1.0] * len(scores)
    return [(s - lo) / (hi - lo) for s in scores]


def ranks(ids: Sequence[K]) -> dict[K, int]:
    """1-based rank of each id (first occurrence wins)."""
    out: dict[K, int] = {}
    for i, key in enumerate(ids, start=1):
        out.setdefault(key, i)
    return out

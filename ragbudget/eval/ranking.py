"""Pure ranking metrics (binary or graded relevance) and latency percentiles."""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from ..kernels.stats import percentile as percentile  # re-exported: the one definition lives in ragbudget.stats


def dcg_at_k(gains: Sequence[float], k: int) -> float:
    return sum(g / math.log2(i + 2) for i, g in enumerate(gains[:k]))


def ndcg_at_k(ranked: Sequence[str], relevant: Mapping[str, float], k: int = 10) -> float:
    """nDCG@k with linear gains ``relevant[id]`` (ids absent or ≤ 0 gain nothing); 0 if nothing is relevant."""
    ideal = sorted((g for g in relevant.values() if g > 0), reverse=True)
    idcg = dcg_at_k(ideal, k)
    if idcg == 0:
        return 0.0
    gains = [max(float(relevant.get(d, 0)), 0.0) for d in ranked[:k]]
    return dcg_at_k(gains, k) / idcg


def recall_at_k(ranked: Sequence[str], relevant: Mapping[str, float], k: int) -> float:
    """Share of the relevant ids (gain > 0) found in the top ``k``."""
    rel = {d for d, g in relevant.items() if g > 0}
    if not rel:
        return 0.0
    return len(rel & set(ranked[:k])) / len(rel)


def mrr_at_k(ranked: Sequence[str], relevant: Mapping[str, float], k: int = 10) -> float:
    """Reciprocal rank of the first relevant id within the top ``k`` (0 when none)."""
    for i, d in enumerate(ranked[:k], start=1):
        if relevant.get(d, 0) > 0:
            return 1.0 / i
    return 0.0


def dedupe(ids: Sequence[str]) -> list[str]:
    """First occurrence of each id, in order (chunk hits → document ranking, max-score aggregation)."""
    seen: set[str] = set()
    out = []
    for d in ids:
        if d not in seen:
            seen.add(d)
            out.append(d)
    return out

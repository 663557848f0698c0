"""Summary statistics shared by reports, benchmarks and admission control (pure; numpy only).

There is one percentile in ragbudget, so every report computes P50/P95/P99 the same way.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q``-th percentile of ``values``, ``q`` from 0 to 100, by linear interpolation between the two
    nearest ranks (numpy's default, ``method="linear"``): for sorted ``v`` of length ``n`` it is
    ``v[i] + (v[i+1] - v[i]) * f`` where ``i + f = (n - 1) * q / 100``. 0.0 for no values.

    ``q`` outside 0–100 raises ValueError (a fraction such as 0.95 is a mistake this does not guess at)."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be within 0-100, got {q}")
    arr = np.fromiter((float(v) for v in values), dtype=float)
    return float(np.percentile(arr, q)) if arr.size else 0.0


__all__ = ["percentile"]

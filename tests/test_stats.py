"""The one percentile: linear interpolation between nearest ranks, q in 0-100."""

from __future__ import annotations

import numpy as np
import pytest

from ragbudget.eval import ranking
from ragbudget.kernels.stats import percentile


def test_percentile_interpolates_linearly():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([10.0, 20.0], 95) == pytest.approx(19.5)
    assert percentile([3, 1, 2], 0) == 1 and percentile([3, 1, 2], 100) == 3  # order does not matter
    vals = list(np.random.default_rng(0).normal(size=101))
    for q in (50, 95, 99):
        assert percentile(vals, q) == pytest.approx(float(np.percentile(vals, q)))


def test_percentile_of_nothing_and_bad_q():
    assert percentile([], 95) == 0.0
    assert percentile(iter([5.0]), 99) == 5.0  # any iterable
    with pytest.raises(ValueError, match="0-100"):
        percentile([1, 2], 0.95 * 200)
    with pytest.raises(ValueError):
        percentile([1, 2], -1)


def test_eval_metrics_reexports_the_same_function():
    assert ranking.percentile is percentile

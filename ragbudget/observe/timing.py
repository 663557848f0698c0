"""A query's timings as a breakdown that adds up: the top-level stages (the spans whose parent is the
query, :data:`~ragbudget.observe.telemetry.STAGE_SPANS`) with their sub-stages, and ``other`` for the time
between them, so the parts sum to ``total_ms``. Model loading (``load_ms``) is not part of the total."""

from __future__ import annotations

from ..types import Timings
from .telemetry import STAGE_SPANS


def breakdown(t: Timings) -> list[tuple[str, float, list[tuple[str, float]]]]:
    """``[(stage, ms, [(sub-stage, ms), ...]), ...]`` in the order the stages ran, then ``("other", ms, [])``:
    the top-level ``ms`` plus ``other`` equal ``t.total_ms``."""
    top = [k for k in t.stages if STAGE_SPANS.get(k, (k, None, {}))[1] is None]
    out: list[tuple[str, float, list[tuple[str, float]]]] = []
    for key in top:
        subs = [(k, ms) for k, ms in t.stages.items() if k in STAGE_SPANS and STAGE_SPANS[k][1] == key]
        out.append((key, t.stages[key], subs))
    other = t.total_ms - sum(ms for _, ms, _ in out)
    out.append(("other", max(0.0, other), []))
    return out


def summary(t: Timings) -> str:
    """One line: ``total 55.7 ms = cache_response 48.4 + retrieve 3.1 (embed 0.0, dense 0.2) + … + other 0.3``."""
    parts = []
    for key, ms, subs in breakdown(t):
        inner = f" ({', '.join(f'{k} {v:.1f}' for k, v in subs)})" if subs else ""
        parts.append(f"{key} {ms:.1f}{inner}")
    line = f"total {t.total_ms:.1f} ms = {' + '.join(parts)}"
    if t.ttft_ms is not None:
        line += f" · TTFT {t.ttft_ms:.1f} ms"
    if t.load_ms:
        line += f" · models loaded first in {t.load_ms:.0f} ms (not in the total)"
    return line


__all__ = ["breakdown", "summary"]

"""A/B: two configurations on the same traffic in one run, interleaved request by request.

Each traffic request is sent to A and to B back to back (A first on even requests, B first on odd ones),
one at a time, so both see the same machine state and the same cache history; arrival times only fix
the order. The report is both replay summaries plus B/A ratios.

    ragbudget bench compare configs/compare_budget_off.yaml configs/default.yaml --traffic t.jsonl --ingest DOCS
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from rich.table import Table

from .outcome import ABORT_AFTER, all_failing
from .replay import SUMMARY_ROWS, RequestResult, Target, summarize
from .traffic import TrafficRecord, history_for

# Summary keys worth a ratio (lower is better for all of them except cache hit rate and throughput).
RATIO_KEYS = ("ttft_p50_ms", "ttft_p95_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p95_ms", "e2e_p50_ms", "e2e_p95_ms",
              "e2e_p99_ms", "overhead_p50_ms", "overhead_p99_ms", "cache_hit_rate", "prompt_tokens_mean",
              "context_tokens_mean", "prompt_tokens_total", "cached_tokens_total", "completion_tokens_total",
              "estimated_cost")


@dataclass
class CompareReport:
    name_a: str
    name_b: str
    a: list[RequestResult]
    b: list[RequestResult]
    wall_s: float
    aborted: str | None = None  # why it stopped early (every request to both sides was failing)

    def summary(self) -> dict[str, Any]:
        sa = summarize(self.a, self.wall_s, target=self.name_a)
        sb = summarize(self.b, self.wall_s, target=self.name_b)
        ratios: dict[str, float | None] = {}
        for k in RATIO_KEYS:
            va, vb = sa.get(k), sb.get(k)
            if isinstance(va, (int, float)) and isinstance(vb, (int, float)) and va:
                ratios[k] = round(vb / va, 3)
            else:
                ratios[k] = None
        return {"a": sa, "b": sb, "ratio_b_over_a": ratios, "aborted": self.aborted}


async def compare(records: Sequence[TrafficRecord], a: Target, b: Target, *, max_requests: int | None = None,
                  max_s: float = 600.0, abort_after: int | None = ABORT_AFTER,
                  on_result: Callable[[RequestResult], None] | None = None) -> CompareReport:
    """Send every request to both targets, alternating which goes first; bounded in count and time, and
    stopped once ``abort_after`` requests to each side have all failed."""
    recs = list(records)[: max_requests or None]
    ra: list[RequestResult] = []
    rb: list[RequestResult] = []
    t0 = time.perf_counter()
    aborted = None
    for i, rec in enumerate(recs):
        if time.perf_counter() - t0 > max_s:
            break
        if abort_after and all_failing(ra, abort_after) and all_failing(rb, abort_after):
            aborted = f"stopped after the first {len(ra)} requests to each side all failed"
            break
        hist = history_for(recs, i)
        pair = ((a, ra), (b, rb)) if i % 2 == 0 else ((b, rb), (a, ra))
        for target, out in pair:
            out.append(await target.send(rec, hist))
            if on_result is not None:
                on_result(out[-1])
    return CompareReport(a.name, b.name, ra, rb, time.perf_counter() - t0, aborted)


def compare_table(summary: dict[str, Any]) -> Table:
    sa, sb, r = summary["a"], summary["b"], summary["ratio_b_over_a"]
    t = Table(title=f"A = {sa['target']}   B = {sb['target']}")
    t.add_column("metric")
    t.add_column("A", justify="right")
    t.add_column("B", justify="right")
    for label, fn in SUMMARY_ROWS:
        t.add_row(label, str(fn(sa)), str(fn(sb)))
    t.add_section()
    for k, v in r.items():
        t.add_row(f"B/A {k}", "", "-" if v is None else f"{v:.3f}×")
    return t


def markdown(summary: dict[str, Any]) -> str:
    sa, sb, r = summary["a"], summary["b"], summary["ratio_b_over_a"]
    lines = [f"| metric | A ({sa['target']}) | B ({sb['target']}) | B/A |", "|---|---|---|---|"]
    for k in RATIO_KEYS:
        lines.append(f"| {k} | {sa.get(k)} | {sb.get(k)} | {'-' if r[k] is None else f'{r[k]:.2f}×'} |")
    return "\n".join(lines)


def run_compare(records: Sequence[TrafficRecord], a: Target, b: Target, **kw: Any) -> CompareReport:
    return asyncio.run(compare(records, a, b, **kw))


__all__ = ["CompareReport", "compare", "run_compare", "compare_table", "markdown", "RATIO_KEYS"]

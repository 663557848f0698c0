"""Token-budget allocation: pure functions, no I/O.

A request's window is split into five sections (``system``, ``history``, ``retrieved``, ``question``,
``output``). Each section's limit is its ``cap`` (absolute tokens) or ``ratio`` (share of the window);
with both set the smaller wins. When a per-request window (e.g. a routed model's) is smaller than the
configured one, the flexible sections shrink (retrieved first, then history, system, question) but never
below their ``min``. After the stages measured what each section actually needs, :func:`lend` moves
unused budget along the declared lend policy; the lender never drops below what it used.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Mapping

from ..config import BudgetConfig, SectionBudget
from ..errors import BudgetError
from ..types import Allocation

SECTIONS = ("system", "history", "retrieved", "question", "output")
# Order in which sections give up tokens when the window is too small for the configured limits.
SHRINK_ORDER = ("retrieved", "history", "system", "question", "output")


def section_limit(sb: SectionBudget, window: int) -> int:
    """The configured limit of one section for ``window``: :meth:`SectionBudget.limit`, the one rule."""
    return sb.limit(window)


def allocate(cfg: BudgetConfig, *, window: int | None = None, output_tokens: int | None = None,
             output_limit: int | None = None, needs: Mapping[str, int] | None = None) -> Allocation:
    """Split ``window`` (default ``cfg.context_window``) into section budgets.

    ``output_tokens``: the response mode's max_tokens; clamped to the output section's limit and to
    ``output_limit`` (a tier's max output). The sum of all sections plus ``cfg.safety_margin`` never
    exceeds the window. ``needs``: tokens some sections are known to need for this request (system prompt,
    question, history); when the sections' limits overflow the window, those sections first give back what
    they would not use, so a small window is not spent on empty history while the context starves — then
    sections shrink in :data:`SHRINK_ORDER`. Raises :class:`BudgetError` when the window cannot hold the
    sections' mins.
    """
    win = cfg.context_window if window is None else int(window)
    if win <= 0:
        raise BudgetError(f"context window must be positive, got {win}",
                          fix="pass a window ≥ 1 (budget.context_window or the tier's context_window)")
    sizes = {n: section_limit(getattr(cfg, n), win) for n in SECTIONS}
    if output_tokens is not None:
        sizes["output"] = min(sizes["output"], max(int(output_tokens), 0))
    if output_limit is not None:
        sizes["output"] = min(sizes["output"], max(int(output_limit), 0))
    mins = {n: min(getattr(cfg, n).min, sizes[n]) for n in SECTIONS}
    room = win - cfg.safety_margin
    need = sum(mins.values())
    if need > room:
        raise BudgetError(
            f"window of {win} tokens cannot hold the sections' minimums ({need} + margin {cfg.safety_margin})",
            fix="route to a model with a larger window or lower budget.*.min")
    excess = sum(sizes.values()) - room
    for n, need in (needs or {}).items():
        if excess <= 0:
            break
        give = min(excess, max(sizes[n] - max(int(need), mins[n]), 0))
        sizes[n] -= give
        excess -= give
    for n in SHRINK_ORDER:
        if excess <= 0:
            break
        give = min(excess, sizes[n] - mins[n])
        sizes[n] -= give
        excess -= give
    return Allocation(window=win, **sizes)


def lend(alloc: Allocation, used: Mapping[str, int], policy: Iterable[tuple[str, str]]) -> Allocation:
    """Move each lender's unused tokens (budget − used) to its borrower, in policy order.

    ``used`` holds the tokens a section actually needs; sections missing from it lend nothing. A lender
    keeps at least what it used, so the total stays the same and no section falls below its usage.
    """
    sizes = alloc.as_dict()
    sizes.pop("window")
    for lender, borrower in policy:
        if lender not in sizes or borrower not in sizes:
            raise BudgetError(f"lend policy names an unknown section ({lender!r}, {borrower!r})",
                              fix=f"use sections from {SECTIONS}")
        if lender not in used:
            continue
        spare = sizes[lender] - max(int(used[lender]), 0)
        if spare > 0:
            sizes[lender] -= spare
            sizes[borrower] += spare
    return replace(alloc, **sizes)


def total(alloc: Allocation) -> int:
    """Tokens allocated across all sections (input + output)."""
    return alloc.input_total + alloc.output

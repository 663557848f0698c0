"""Latency and cost measurements behind notebook 03, as plain rows (lists of dicts).

- :func:`ttft_by_layout`: time to first token of the same requests with the prompt laid out
  cache-friendly (``static-first``: system + fixed docs, then the variable tail) or ``variable-first``,
  assembled by :func:`ragbudget.stages.prompt.build_prompt` exactly as a request would be;
- :func:`timings_by_output_length`: TTFT, total and decode time against ``max_tokens``;
- :func:`route_requests`: the tier each request of a mixed set goes to, with its estimated cost and the
  cost of the same tokens on the largest tier.

The project's command-line benchmark with the same measurements is ``benchmarks/generation.py`` in a
checkout (it takes its request templates from here).
"""

from __future__ import annotations

import statistics
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..config import PromptConfig
from ..llm import Generator, LlamaCppGenerator
from ..stages.prompt import Layout, build_prompt, static_prefix
from ..route import Router
from ..kernels.stats import percentile
from ..kernels.tokens import Tokenizer
from ..types import Chunk, Scored
from .answers import contains_answer

Row = dict[str, Any]
LAYOUTS: tuple[Layout, ...] = ("static-first", "variable-first")
# "hard" rewrites of a factual question (the router sends them to the large tier) and questions a
# deterministic handler answers (arithmetic, units, dates): the mixed request set of :func:`mixed_requests`.
HARD_TEMPLATES = ("Explain why {q} and compare it with the alternatives.",
                  "Why does it matter {q}? Explain the trade-offs.")
HANDLER_QS = ("What is 17 * 23?", "convert 12 km to miles", "what day of the week is 2026-12-25",
              "100 F in C", "days between 2026-01-01 and 2026-12-02", "calculate (4.5 + 3) / 2",
              "how many feet in 3 m", "2^16", "5 pounds in kg", "What is 1000 / 8?")


def engine_token_counter(gen: LlamaCppGenerator) -> Callable[[str], int]:
    """Count tokens with the engine's own tokenizer (loads the model)."""
    llm = gen.load()
    return lambda text: len(llm.tokenize(text.encode("utf-8"), add_bos=False))


def with_fixed_docs(texts: Iterable[str], count: Callable[[str], int], target_tokens: int,
                    base: PromptConfig | None = None) -> PromptConfig:
    """``base`` (default: the default prompt) with fixed reference docs added from ``texts`` until the static
    prefix holds at least ``target_tokens`` (by ``count``) — a large shared prefix, as with policies/tools."""
    cfg = base or PromptConfig()
    docs: list[str] = []
    for t in texts:
        if count(static_prefix(cfg.model_copy(update={"fixed_docs": docs}), cfg.default_mode)) >= target_tokens:
            break
        docs.append(t)
    return cfg.model_copy(update={"fixed_docs": docs})


def as_context(texts: Sequence[str], source: str = "doc") -> list[Scored]:
    """Plain texts as retrieved chunks (best first) for prompt assembly."""
    return [Scored(Chunk(id=f"{source}-{i}", doc_id=f"{source}-{i}", text=t), score=1.0 - 0.01 * i)
            for i, t in enumerate(texts)]


def _reset(gen: Generator) -> None:
    reset = getattr(gen, "reset", None)
    if callable(reset):
        reset()


def ttft_by_layout(gen: Generator, prompt_cfg: PromptConfig, tokenizer: Tokenizer,
                   requests: Sequence[tuple[str, Sequence[Scored]]], *, layouts: Sequence[Layout] = LAYOUTS,
                   max_tokens: int = 4) -> list[Row]:
    """One row per (layout, request): TTFT, total ms, prompt and cached tokens. Each layout starts from an
    empty engine cache and one untimed warm-up request."""
    rows: list[Row] = []
    for layout in layouts:
        _reset(gen)
        warm = build_prompt(prompt_cfg, tokenizer, question="warm-up question?", context=as_context(["warm-up."]),
                            layout=layout)
        gen.generate(warm, max_tokens=2)
        for i, (question, context) in enumerate(requests):
            p = build_prompt(prompt_cfg, tokenizer, question=question, context=context, layout=layout)
            g = gen.generate(p, max_tokens=max_tokens)
            rows.append({"layout": layout, "request": i, "ttft_ms": round(g.timings.ttft_ms or 0.0, 2),
                         "total_ms": round(g.timings.total_ms, 2), "prompt_tokens": g.usage.prompt_tokens,
                         "cached_tokens": g.usage.cached_tokens})
    return rows


def timings_by_output_length(gen: Generator, prompt_cfg: PromptConfig, tokenizer: Tokenizer,
                             requests: Sequence[tuple[str, Sequence[Scored]]], max_tokens: Sequence[int]) -> list[Row]:
    """One row per (max_tokens, request) with the cache-friendly layout: completion tokens, TTFT, total
    and decode (total − TTFT) ms."""
    rows: list[Row] = []
    for mt in max_tokens:
        for i, (question, context) in enumerate(requests):
            p = build_prompt(prompt_cfg, tokenizer, question=question, context=context, layout="static-first")
            g = gen.generate(p, max_tokens=int(mt))
            ttft = g.timings.ttft_ms or 0.0
            rows.append({"max_tokens": int(mt), "request": i, "completion_tokens": g.usage.completion_tokens,
                         "ttft_ms": round(ttft, 2), "total_ms": round(g.timings.total_ms, 2),
                         "decode_ms": round(g.timings.total_ms - ttft, 2)})
    return rows


def route_requests(router: Router, requests: Sequence[Mapping[str, Any]], tokenizer: Tokenizer,
                   prompt_cfg: PromptConfig | None = None, *, max_tokens: int = 128) -> list[Row]:
    """Route each request (``question``, optional ``task``, optional ``context`` texts, optional ``kind``
    label) the way the pipeline does: deterministic handlers first, then the router over the tiers."""
    pcfg = prompt_cfg or PromptConfig()
    rows: list[Row] = []
    for req in requests:
        question = req["question"]
        base = {"kind": req.get("kind", ""), "question": question, "task": req.get("task")}
        handled = router.handle(question)
        if handled is not None:
            rows.append({**base, "tier": "handler", "escalated": False, "cost": 0.0, "always_large_cost": 0.0})
            continue
        ctx = as_context(list(req.get("context") or []))
        p = build_prompt(pcfg, tokenizer, question=question, context=ctx)
        out = router.generate(p, question=question, max_tokens=max_tokens, context=ctx, task=req.get("task"))
        d = out.decision
        rows.append({**base, "tier": d.tier, "escalated": bool(d.escalated), "cost": d.estimated_cost,
                     "always_large_cost": d.always_large_cost})
    return rows


def mixed_requests(corpus: Sequence[str], questions: Sequence[Mapping[str, Any]], *, factual: int, hard: int,
                   handlers: int = len(HANDLER_QS), faq: tuple[str, int] | None = None) -> list[Row]:
    """A mixed request set: ``factual`` questions (every 5th tagged ``task=extraction``) with the paragraph
    holding their answer plus one distractor as context, ``hard`` "explain why / compare" rewrites of
    them, ``handlers`` questions a deterministic handler answers (arithmetic, units, dates) and, with
    ``faq=(question, n)``, ``n`` repeats of a FAQ question."""
    out: list[Row] = []
    qs = [q for q in questions if q.get("answers")][:max(factual, hard)]
    for k, q in enumerate(qs):
        gold = next((t for t in corpus if contains_answer(t, q["answers"])), None)
        ctx = ([gold] if gold else []) + [corpus[(31 * k + 7) % len(corpus)]]
        if k < factual:
            out.append({"kind": "factual", "question": q["text"], "task": "extraction" if k % 5 == 0 else None,
                        "context": ctx})
        if k < hard:
            body = q["text"].rstrip("? ")
            out.append({"kind": "hard", "question": HARD_TEMPLATES[k % 2].format(q=body[:1].lower() + body[1:]),
                        "task": None, "context": ctx})
    out += [{"kind": "handler", "question": h, "task": None, "context": []} for h in HANDLER_QS[:handlers]]
    if faq:
        out += [{"kind": "faq", "question": faq[0], "task": "faq", "context": []}] * faq[1]
    return out


def routing_summary(rows: Sequence[Mapping[str, Any]]) -> Row:
    """Share of requests per tier, escalations, and estimated cost against always-large."""
    n = len(rows)
    tiers: dict[str, int] = {}
    for r in rows:
        tiers[r["tier"]] = tiers.get(r["tier"], 0) + 1
    cost = float(sum(r["cost"] for r in rows))
    large = float(sum(r["always_large_cost"] for r in rows))
    return {"requests": n, "share": {t: c / n for t, c in tiers.items()} if n else {},
            "escalated": sum(1 for r in rows if r["escalated"]), "cost": cost, "always_large_cost": large,
            "cost_ratio": cost / large if large else 0.0}


def summarise(rows: Sequence[Mapping[str, Any]], by: str, value: str) -> list[Row]:
    """Median, P95 and mean of ``value`` per distinct ``by`` (in first-seen order)."""
    groups: dict[Any, list[float]] = {}
    for r in rows:
        groups.setdefault(r[by], []).append(float(r[value]))
    return [{by: k, "n": len(v), "median": round(statistics.median(v), 2),
             "p95": round(percentile(v, 95), 2), "mean": round(statistics.fmean(v), 2)}
            for k, v in groups.items()]


__all__ = ["LAYOUTS", "Row", "as_context", "engine_token_counter", "mixed_requests", "route_requests",
           "routing_summary", "summarise", "timings_by_output_length", "ttft_by_layout", "with_fixed_docs"]

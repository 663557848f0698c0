"""Honest accounting of one answer: what it cites, what a cache hit saved, whether it may be cached.

Pure functions over :mod:`ragbudget.types`, used by the pipeline (issue 13):

- :func:`cite` — the chunks an answer cites. ``[n]`` markers (1-based, prompt order) when it has them;
  without any, the chunks whose content an answer sentence actually uses (term overlap), flagged
  ``citations_inferred``; nothing (flagged ``uncited``) when no chunk carries the answer. Never the whole
  context by default.
- :func:`as_cache_hit` — a stored answer served again used no model: its usage and cost become zero, and
  what the original generation took is reported under ``ledger.saved``.
- :func:`not_cacheable` — why an answer must not be stored as a normal response-cache entry (degraded,
  fell back, an extractive substitute for a model tier, partial, empty).
- :func:`check_question` — the one question limit, enforced the same way by the library and the API.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Sequence

from ..config import Config, question_limit
from ..errors import QuestionTooLongError
from ..llm.extractive import terms
from ..kernels.tokens import Tokenizer
from ..types import Answer, Scored, Timings, Usage

_MARK = re.compile(r"\[(\d{1,3})\]")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
#: an unmarked answer sentence is attributed to a chunk holding at least this share of its content terms
INFER_MIN_SHARE = 0.6
INFER_MIN_TERMS = 3


def cite(text: str, context: Sequence[Scored]) -> tuple[list[Scored], list[str]]:
    """(cited chunks, ledger flags). See the module docstring."""
    nums = [int(n) for n in _MARK.findall(text)]
    if nums:
        picked = [s for i, s in enumerate(context, 1) if i in set(nums)]
        flags = []
        bad = sorted({n for n in nums if not 1 <= n <= len(context)})
        if bad:
            flags.append("citation_out_of_range:" + ",".join(map(str, bad)))
        if not picked:
            flags.append("uncited")
        return picked, flags
    ctx_terms = [set(terms(s.chunk.text)) for s in context]
    used: set[int] = set()
    for sent in filter(None, (x.strip() for x in _SENTENCE.split(text))):
        st = set(terms(sent))
        if len(st) < INFER_MIN_TERMS:
            continue
        best, share = max(((i, len(st & ct) / len(st)) for i, ct in enumerate(ctx_terms)),
                          key=lambda x: x[1], default=(-1, 0.0))
        if best >= 0 and share >= INFER_MIN_SHARE:
            used.add(best)
    if not used:
        return [], ["uncited"]
    return [s for i, s in enumerate(context) if i in used], ["citations_inferred"]


def as_cache_hit(cached: Answer, *, layer: str, question: str, lookup_ms: float, total_ms: float) -> Answer:
    """A stored answer as served from the cache: zero usage and cost; what it saved in ``ledger.saved``. Its
    TTFT is the time to serve it (the whole answer is ready at once), so latency reports include hits."""
    led = cached.ledger
    route = dict(led.route)
    u = cached.usage
    led.saved = {"prompt_tokens": u.prompt_tokens, "cached_tokens": u.cached_tokens,
                 "completion_tokens": u.completion_tokens, "total_tokens": u.total_tokens,
                 "cost": float(route.get("estimated_cost", 0.0) or 0.0), "tier": route.get("tier", cached.route)}
    route.update(estimated_cost=0.0, always_large_cost=0.0)
    led.route = route
    led.cache_layer = layer
    led.prompt = {k: v for k, v in led.prompt.items() if not k.startswith("engine_")}
    return replace(cached, usage=Usage(), cache_layer=layer, question=question, ledger=led,
                   timings=Timings(stages={"cache_response": lookup_ms}, ttft_ms=total_ms, total_ms=total_ms))


def not_cacheable(ans: Answer, config: Config) -> str | None:
    """Why ``ans`` must not be stored for everyone as a normal hit, or None."""
    if ans.partial:
        return "partial"
    if not ans.answer.strip():
        return "empty"
    led = ans.ledger
    if led.degrade_level > 0:
        return f"degraded:level{led.degrade_level}"
    route = led.route
    if route.get("fallbacks") or route.get("errors"):
        return "fallback"
    has_model = any(t.backend != "extractive" for t in config.llm.tiers)
    if ans.extractive and has_model:
        return "extractive_substitute"
    return None


def check_question(question: str, config: Config, tokenizer: Tokenizer) -> int:
    """The question's tokens; :class:`QuestionTooLongError` (413) when over :func:`question_limit`."""
    limit, setting = question_limit(config)
    n = tokenizer.count(question)
    if n > limit:
        raise QuestionTooLongError(f"the question has {n} tokens, over the limit of {limit} ({setting}); "
                                   "it is refused rather than cut", limit=limit, tokens=n, setting=setting,
                                   fix=f"shorten the question to at most {limit} tokens, or raise {setting.split()[0]}")
    return n


def saved_of(answer: Answer) -> dict[str, Any]:
    """``ledger.saved`` of an answer ({} unless it is a cache hit)."""
    return dict(answer.ledger.saved or {})


__all__ = ["as_cache_hit", "check_question", "cite", "not_cacheable", "saved_of"]

"""One query, validated once: the typed input every stage of the pipeline reads.

:func:`make_request` refuses bad input before any work (an empty question, a question over its one limit,
a malformed filter, an unknown mode, a rejected degrade level) and resolves the defaults (mode, output
tokens, sampling) so no stage re-derives them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .accounting import check_question
from ..config import Config
from .degrade import DegradePlan
from ..errors import QueryError
from ..budget.history import coerce_history
from ..index.filters import Filters, parse_filters
from ..kernels.tokens import Tokenizer
from ..types import Message, Sampling


@dataclass(frozen=True)
class QueryRequest:
    question: str
    history: tuple[Message, ...]
    mode: str
    out_tokens: int  # requested output tokens (default: the mode's); the builder clamps to the output budget
    filters: Filters
    sampling: Sampling
    degrade: DegradePlan
    tenant: str = "default"
    index: str | None = None
    task: str | None = None
    escalate: bool = False


def make_request(config: Config, tokenizer: Tokenizer, question: str, *,
                 history: Sequence[Message | Mapping[str, str]] | None = None, mode: str | None = None,
                 index: str | None = None, tenant: str = "default", degrade_level: int = 0,
                 max_tokens: int | None = None, task: str | None = None, escalate: bool = False,
                 filters: Mapping[str, Any] | None = None, sampling: Sampling | None = None) -> QueryRequest:
    if not isinstance(question, str) or not question.strip():
        raise QueryError("the question is empty", fix="ask a question with at least one word")
    degrade = DegradePlan.at(degrade_level)
    check_question(question, config, tokenizer)  # one limit, refused (413), never cut
    flt = parse_filters(filters)  # a bad filter is a QueryError (400) before any work
    mode = mode or config.prompt.default_mode
    if mode not in config.prompt.modes:
        raise QueryError(f"unknown response mode {mode!r}", fix=f"use one of {sorted(config.prompt.modes)}")
    cap = config.prompt.modes[mode].max_tokens
    return QueryRequest(question=question, history=tuple(coerce_history(history or [])), mode=mode,
                        out_tokens=cap if max_tokens is None else max_tokens, filters=flt,
                        sampling=sampling or Sampling(), degrade=degrade, tenant=tenant, index=index, task=task,
                        escalate=escalate)

"""The one fit of retrieved context: rerank → sentence plan → pack.

The pipeline's context stage, the LlamaIndex postprocessor and the evaluators all choose context through
:func:`plan_context`, so a change to how context is chosen reaches every one of them. A plan is scored once
and can be packed at many budgets (the evaluators' curves)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

from ..config import Config
from ..kernels.tokens import Tokenizer
from ..retrieval.rerank import Reranker, RerankResult, rerank
from ..types import Scored
from .trim import SentencePlan, TermsFn, TrimResult, WeightsFn


@dataclass
class ContextPlan:
    """One question's candidates, reranked and scored sentence by sentence; :meth:`pack` fits a budget."""

    ranked: RerankResult  # kept in relevance order; dropped with reasons (cutoff, duplicate, over top_n)
    plan: SentencePlan
    config: Config
    tokenizer: Tokenizer
    rerank_ms: float = 0.0
    plan_ms: float = 0.0

    @property
    def kept(self) -> list[Scored]:
        return self.ranked.kept

    def pack(self, budget: int, *, overhead_per_chunk: int = 0) -> TrimResult:
        """The chosen sentences within ``budget`` tokens (``overhead_per_chunk``: each chunk's header)."""
        return self.plan.pack(budget, self.config.trim, self.tokenizer, overhead_per_chunk=overhead_per_chunk)


def plan_context(question: str, items: Sequence[Scored], tokenizer: Tokenizer, scorer: Reranker | None,
                 config: Config, *, terms: TermsFn | None = None,
                 term_weights: WeightsFn | None = None, previous_answer: str = "") -> ContextPlan:
    """Rerank ``items`` for ``question`` (cutoff, MMR, top_n), then score their sentences. ``terms`` and
    ``term_weights``: the index's analyzer and idf (default: BM25 defaults, idf over the candidates);
    ``previous_answer``: the conversation's last answer, whose next sentence is likely asked about."""
    scorer = scorer if question else None
    t0 = time.perf_counter()
    ranked = rerank(question, items, scorer, config.rerank)
    t1 = time.perf_counter()
    plan = SentencePlan.build(question, ranked.kept, tokenizer, scorer, config.trim, terms=terms,
                              term_weights=term_weights, previous_answer=previous_answer)
    t2 = time.perf_counter()
    return ContextPlan(ranked, plan, config, tokenizer, (t1 - t0) * 1000, (t2 - t1) * 1000)

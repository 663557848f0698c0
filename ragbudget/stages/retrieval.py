"""The retrieval stage: the search query (a follow-up condensed with its history), then hybrid retrieval
through the retrieval cache, keyed by the index version and every setting that changes the result."""

from __future__ import annotations

import time
from typing import Callable, Sequence

from ..cache import CacheLayers
from .condense import condense, condense_with_llm
from ..config import Config
from ..index.filters import Filters
from ..index.filters import fingerprint as filter_fingerprint
from ..retrieval.registry import LoadedIndex
from .request import QueryRequest
from ..types import Ledger, Message, Scored, Timings

Complete = Callable[[str], str]  # prompt text → a model's completion (LLM condensing)


class CachedRetriever:
    """``layers`` and ``complete`` are getters: nothing is built until a query needs it."""

    def __init__(self, config: Config, layers: Callable[[], CacheLayers],
                 complete: Callable[[], Complete | None]) -> None:
        self.config = config
        self._layers = layers
        self._complete = complete

    def retrieve(self, req: QueryRequest, loaded: LoadedIndex, timings: Timings, ledger: Ledger) -> list[Scored]:
        """Candidates for the reranker: enough for it to choose top-k from, fewer when degraded."""
        k = req.degrade.top_k(self.config.retrieval.top_k)
        n = req.degrade.candidates(k, self.config.rerank.top_n)
        return self.search(self.search_query(req.question, req.history, ledger), loaded, n, timings, ledger,
                           req.filters, tenant=req.tenant)

    def search_query(self, question: str, history: Sequence[Message], ledger: Ledger) -> str:
        """The retrieval query for a follow-up (see :mod:`ragbudget.stages.condense`); the question otherwise."""
        how = self.config.retrieval.condense
        if how == "off" or not history:
            return question
        complete = self._complete() if how == "llm" else None
        c = condense_with_llm(question, history, complete) if complete is not None else condense(question, history)
        if c.changed:
            ledger.section("question").notes.append(f"retrieval query condensed from the history ({c.method}): "
                                                    f"{c.query!r}")
        return c.query

    def search(self, question: str, loaded: LoadedIndex, k: int, timings: Timings, ledger: Ledger,
               filters: Filters = (), *, tenant: str = "default") -> list[Scored]:
        """Keyed by tenant, index identity and content version, settings and filters: an entry made for one
        tenant or index is never another's."""
        r = self.config.retrieval
        settings: dict[str, object] = {"mode": r.mode, "k": k, "rrf_k": r.rrf_k, "w": [r.dense_weight, r.sparse_weight],
                                       "tenant": tenant}
        if filters:
            settings["filters"] = filter_fingerprint(filters)
        rc = self._layers().retrieval
        t0 = time.perf_counter()
        if rc is not None:
            hit = rc.get(loaded.cache_version, settings, question)
            timings.stages["cache_retrieval"] = (time.perf_counter() - t0) * 1000.0
            if hit is not None:
                got = loaded.index.get_chunks([cid for cid, _ in hit])
                if len(got) == len(hit):  # every cached chunk still there (else retrieve afresh)
                    ledger.flags.append("retrieval_cache_hit")
                    return [Scored(chunk=c, score=s, fused_score=s) for c, (_, s) in zip(got, hit)]
        notes: list[str] = []
        out = loaded.retriever.retrieve(question, k, timings=timings.stages, notes=notes, filters=filters)
        ledger.section("retrieved").notes.extend(notes)
        if rc is not None:
            rc.set(loaded.cache_version, settings, question, [(s.chunk.id, s.score) for s in out])
        return out

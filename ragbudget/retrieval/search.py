"""Hybrid retrieval: FAISS dense and BM25 run concurrently, fused by weighted reciprocal rank fusion.

Results are :class:`~ragbudget.types.Scored` chunks carrying the dense score, BM25 score, fused score,
both ranks, and the chunk's citation metadata. Per-stage timings (ms) go to a ``timings`` dict the caller
passes in: ``embed``, ``dense``, ``sparse``, ``fusion``, ``retrieve`` (total).
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

from ..config import RetrievalConfig
from ..embed.encoder import Embedder
from ..errors import QueryError
from .fusion import ranks, rrf
from ..index.base import IndexStore
from ..index.filters import Filters
from ..types import Chunk, Scored

Mode = Literal["hybrid", "dense", "bm25"]
MODES: tuple[str, ...] = ("hybrid", "dense", "bm25")


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000.0


class HybridRetriever:
    """``retrieve(query, k, mode, filters=...)`` over an :class:`~ragbudget.index.base.IndexStore`.
    Thread-safe. ``pool`` runs the sparse search beside the dense one (shared by the registry's retrievers,
    so a version swap never shuts a pool an in-flight query still uses); without it, one of its own."""

    def __init__(self, index: IndexStore, config: RetrievalConfig, embedder: Embedder,
                 pool: ThreadPoolExecutor | None = None) -> None:
        self.index = index
        self.config = config
        self.embedder = embedder
        self._own_pool = pool is None
        self._pool = pool or ThreadPoolExecutor(max_workers=4, thread_name_prefix="ragbudget-sparse")

    def close(self) -> None:
        if self._own_pool:
            self._pool.shutdown(wait=False)

    def _dense(self, query: str, n: int, timings: dict[str, float], filters: Filters) -> list[tuple[Chunk, float]]:
        t0 = time.perf_counter()
        qvec = self.embedder.embed_query(query)
        timings["embed"] = _ms(t0)
        t1 = time.perf_counter()
        hits = self.index.search_dense(qvec, n, filters)
        timings["dense"] = _ms(t1)
        return hits

    def _sparse(self, query: str, n: int, timings: dict[str, float], filters: Filters) -> list[tuple[Chunk, float]]:
        t0 = time.perf_counter()
        hits = self.index.search_sparse(query, n, filters)
        timings["sparse"] = _ms(t0)
        return hits

    def retrieve(self, query: str, k: int | None = None, mode: Mode | None = None, *,
                 timings: dict[str, float] | None = None, notes: list[str] | None = None,
                 filters: Filters = ()) -> list[Scored]:
        """Top ``k`` (default ``config.top_k``) chunks for ``query`` by ``mode`` (default ``config.mode``),
        among the chunks matching ``filters`` (parsed by :func:`~ragbudget.index.filters.parse_filters`).

        An empty query is a :class:`QueryError`. A query with no BM25 terms (only stop words or
        punctuation) gets dense results only, with a note appended to ``notes``.
        """
        if not isinstance(query, str) or not query.strip():
            raise QueryError("the query is empty", fix="pass a question with at least one word")
        mode = mode or self.config.mode  # type: ignore[assignment]
        if mode not in MODES:
            raise QueryError(f"unknown retrieval mode {mode!r}", fix=f"use one of {MODES}")
        k = self.config.top_k if k is None else k
        if k < 1:
            raise QueryError(f"k must be ≥ 1, got {k}", fix="ask for at least one result (k ≥ 1)")
        timings = {} if timings is None else timings
        t0 = time.perf_counter()
        n = max(k, self.config.candidates)
        dense: list[tuple[Chunk, float]] = []
        sparse: list[tuple[Chunk, float]] = []
        if mode == "hybrid":
            fut = self._pool.submit(self._sparse, query, n, timings, filters)
            dense = self._dense(query, n, timings, filters)
            sparse = fut.result()
        elif mode == "dense":
            dense = self._dense(query, n, timings, filters)
        else:
            sparse = self._sparse(query, n, timings, filters)
        if notes is not None and len(self.index):
            notes.extend(self._empty_notes(query, mode, dense, sparse, filters))
        t1 = time.perf_counter()
        out = self._fuse(dense, sparse, k, mode)
        timings["fusion"] = _ms(t1)
        timings["retrieve"] = _ms(t0)
        return out

    def _empty_notes(self, query: str, mode: str, dense: list[tuple[Chunk, float]],
                     sparse: list[tuple[Chunk, float]], filters: Filters) -> list[str]:
        """Why a side came back empty, in words a user can act on."""
        if filters and mode != "bm25" and not dense:  # dense returns every allowed chunk it can: none is allowed
            return ["no chunk matches the filters"]
        if mode == "dense" or sparse:
            return []
        tail = "; dense results only" if mode == "hybrid" else ""
        if not self.index.analyzer.terms(query):
            return [f"BM25 found no terms in {query!r} (only stop words or punctuation?){tail}"]
        among = " matching the filters" if filters else ""
        return [f"no chunk{among} contains a term of {query!r}{tail}"]

    def _fuse(self, dense: list[tuple[Chunk, float]], sparse: list[tuple[Chunk, float]], k: int,
              mode: str) -> list[Scored]:
        d_score = {c.id: s for c, s in dense}
        s_score = {c.id: s for c, s in sparse}
        d_rank = ranks([c.id for c, _ in dense])
        s_rank = ranks([c.id for c, _ in sparse])
        chunks = {c.id: c for c, _ in dense}
        chunks.update({c.id: c for c, _ in sparse})
        if mode == "dense":
            order = [(c.id, s) for c, s in dense]
        elif mode == "bm25":
            order = [(c.id, s) for c, s in sparse]
        else:
            order = rrf({"dense": [c.id for c, _ in dense], "sparse": [c.id for c, _ in sparse]},
                        {"dense": self.config.dense_weight, "sparse": self.config.sparse_weight},
                        k=self.config.rrf_k)
        return [Scored(chunk=chunks[cid], score=score, dense_score=d_score.get(cid),
                       sparse_score=s_score.get(cid), fused_score=score if mode == "hybrid" else None,
                       dense_rank=d_rank.get(cid), sparse_rank=s_rank.get(cid))
                for cid, score in order[:k]]

    async def aretrieve(self, query: str, k: int | None = None, mode: Mode | None = None, *,
                        timings: dict[str, float] | None = None, notes: list[str] | None = None,
                        filters: Filters = ()) -> list[Scored]:
        """Async twin of :meth:`retrieve` (runs it in a worker thread)."""
        return await asyncio.to_thread(self.retrieve, query, k, mode, timings=timings, notes=notes, filters=filters)

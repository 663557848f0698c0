"""LlamaIndex over a :class:`~ragbudget.pipeline.RAG`: ``rag.as_retriever()`` and ``rag.as_query_engine()``.

::

    retriever = rag.as_retriever(k=5, filters={"year": {"gte": 2020}})
    nodes = retriever.retrieve("How is unused budget lent?")        # NodeWithScore, citation metadata
    engine = rag.as_query_engine(mode="concise")
    response = engine.query("How is unused budget lent?")
    response.response          # ragbudget's answer
    response.source_nodes      # the chunks the answer's context held (after rerank and budget)
    response.metadata["ledger"]  # the full ledger (Ledger.to_dict)

The node conversion is :func:`ragbudget.adapters.interop.to_node` (the same nodes the other interop pieces use).
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Any, Mapping, Optional, Sequence

from llama_index.core.base.response.schema import Response
from llama_index.core.query_engine import CustomQueryEngine
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle
from pydantic import ConfigDict, Field, PrivateAttr

from ..errors import QueryError
from .interop import to_node
from ..types import Answer, Scored
from . import Answerer, chunk_metadata, ledger_summary


def node(s: Scored) -> NodeWithScore:
    """A chunk as a ``NodeWithScore``: :func:`~ragbudget.adapters.interop.to_node` plus chunk id, source and score."""
    n = to_node(s)
    n.node.metadata.update(chunk_metadata(s))
    return n


def _check(rag: Any) -> None:
    if not callable(getattr(rag, "search", None)) or not callable(getattr(rag, "query", None)):
        raise QueryError(f"expected a ragbudget RAG, got {type(rag).__name__}", fix="pass a ragbudget.RAG")


class RAGRetriever(BaseRetriever):
    """A LlamaIndex retriever over ``rag.search`` (hybrid/dense/bm25 retrieval, filters inside the index)."""

    def __init__(self, rag: Answerer, *, k: int | None = None, index: str | None = None, mode: str | None = None,
                 filters: Mapping[str, Any] | None = None, **kw: Any) -> None:
        _check(rag)
        self._rag, self._k, self._index, self._mode = rag, k, index, mode
        self._filters = dict(filters) if filters else None
        super().__init__(**kw)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = self._rag.search(query_bundle.query_str, k=self._k, index=self._index, mode=self._mode,
                                filters=self._filters)
        return [node(s) for s in hits]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return await asyncio.to_thread(self._retrieve, query_bundle)


def to_response(answer: Answer) -> Response:
    """A ragbudget answer as a LlamaIndex ``Response`` (source nodes = the budgeted context)."""
    return Response(response=answer.answer, source_nodes=[node(s) for s in answer.context],
                    metadata={"ledger": answer.ledger.to_dict(), "summary": ledger_summary(answer),
                              "citations": [asdict(c) for c in answer.citations],
                              "cache_layer": answer.cache_layer, "route": answer.route})


class RAGQueryEngine(CustomQueryEngine):
    """A LlamaIndex query engine whose answers are ragbudget's (budgeted context, caches, routing)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    options: dict[str, Any] = Field(default_factory=dict)  # keyword arguments of RAG.query
    _rag: Any = PrivateAttr()
    last_answer: Optional[Answer] = None

    def __init__(self, rag: Answerer, **opts: Any) -> None:
        _check(rag)
        super().__init__(options=opts)
        self._rag = rag

    def custom_query(self, query_str: str) -> Response:
        self.last_answer = self._rag.query(query_str, **self.options)
        return to_response(self.last_answer)

    async def acustom_query(self, query_str: str) -> Response:
        self.last_answer = await self._rag.aquery(query_str, **self.options)
        return to_response(self.last_answer)


def as_retriever(rag: Answerer, **opts: Any) -> RAGRetriever:
    """``rag.as_retriever(k=, index=, mode=, filters=)``."""
    return RAGRetriever(rag, **opts)


def as_query_engine(rag: Answerer, **opts: Any) -> RAGQueryEngine:
    """``rag.as_query_engine(**kwargs of RAG.query)``: index, mode, filters, max_tokens, tenant, …"""
    return RAGQueryEngine(rag, **opts)


def source_texts(nodes: Sequence[NodeWithScore]) -> list[str]:
    return [n.node.get_content() for n in nodes]


__all__ = ["RAGRetriever", "RAGQueryEngine", "as_retriever", "as_query_engine", "to_response", "node",
           "source_texts"]

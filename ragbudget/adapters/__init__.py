"""Adapters to the frameworks people already run, over one :class:`~ragbudget.pipeline.RAG`:

* :mod:`ragbudget.adapters.langchain`: ``RagBudgetRetriever`` (a LangChain ``BaseRetriever``) and
  ``RagBudgetRunnable`` (a ``Runnable`` that answers); needs ``pip install 'ragbudget[langchain]'``.
* :mod:`ragbudget.adapters.llamaindex`: ``rag.as_retriever()`` (a LlamaIndex ``BaseRetriever``) and
  ``rag.as_query_engine()`` (a ``CustomQueryEngine`` whose response is ragbudget's answer).

Nothing here is imported by ``import ragbudget``: each framework loads only when its adapter is used.
"""

from __future__ import annotations

from typing import Any, AsyncIterator, Iterator, Protocol

from ..types import Answer, Scored, StreamEvent


class Answerer(Protocol):
    """What an adapter needs of a :class:`~ragbudget.pipeline.RAG`. Adapters hold the facade through this
    protocol, so they sit below it and ``RAG.as_retriever()`` can build them without an import circle."""

    def search(self, question: str, *args: Any, **kwargs: Any) -> list[Scored]: ...

    def query(self, question: str, **kwargs: Any) -> Answer: ...

    async def aquery(self, question: str, **kwargs: Any) -> Answer: ...

    def stream(self, question: str, *args: Any, **kwargs: Any) -> Iterator[StreamEvent]: ...

    def astream(self, question: str, **kwargs: Any) -> AsyncIterator[StreamEvent]: ...


def chunk_metadata(s: Scored) -> dict[str, Any]:
    """What a framework document/node carries of a retrieved chunk: ids, citation fields, scores."""
    meta = {k: v for k, v in dict(s.chunk.metadata).items() if isinstance(v, (str, int, float, bool))}
    meta.update({"chunk_id": s.chunk.id, "doc_id": s.chunk.doc_id, "source": s.chunk.metadata.get("source", ""),
                 "position": s.chunk.position, "score": float(s.score)})
    for name in ("dense_score", "sparse_score", "rerank_score"):
        value = getattr(s, name, None)
        if value is not None:
            meta[name] = float(value)
    return meta


def ledger_summary(answer: Answer) -> dict[str, Any]:
    """A compact account of an answer: per section budget/used/dropped, usage, route, cache layer."""
    led = answer.ledger
    return {
        "sections": {name: {"budget": s.budget, "used": s.used, "dropped": len(s.dropped)}
                     for name, s in led.sections.items()},
        "usage": {"prompt_tokens": answer.usage.prompt_tokens, "cached_tokens": answer.usage.cached_tokens,
                  "completion_tokens": answer.usage.completion_tokens},
        "route": answer.route, "cache_layer": answer.cache_layer, "degrade_level": led.degrade_level,
        "ttft_ms": answer.timings.ttft_ms, "total_ms": answer.timings.total_ms,
    }


__all__ = ["Answerer", "chunk_metadata", "ledger_summary"]

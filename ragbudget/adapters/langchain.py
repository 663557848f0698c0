"""LangChain over a :class:`~ragbudget.pipeline.RAG` (``pip install 'ragbudget[langchain]'``)::

    from ragbudget.adapters.langchain import RagBudgetRetriever, RagBudgetRunnable
    retriever = RagBudgetRetriever(rag=rag, k=5)                 # a langchain_core BaseRetriever
    docs = retriever.invoke("How is unused budget lent?")        # Documents: chunk_id, doc_id, source, score
    chain = RagBudgetRunnable(rag=rag)                           # a Runnable that answers through the RAG
    chain.invoke("How is unused budget lent?")                   # → the answer text
    chain.invoke({"question": "...", "filters": {"year": {"gte": 2020}}})
    RagBudgetRunnable(rag=rag, output="dict").invoke("...")      # → {"answer", "citations", "ledger", ...}
    for piece in chain.stream("..."): ...                        # the answer's tokens as they are generated

The retriever returns what ``rag.search`` returns (retrieval only, filters applied inside the index); the
runnable's answer is ``rag.query``'s: budgeted context, caches, routing, with its ledger summary.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, AsyncIterator, Iterator, Literal, Mapping, Optional

from ..errors import ConfigError, QueryError
from ..types import Answer, FinalEvent, TokenEvent
from . import Answerer, chunk_metadata, ledger_summary

INSTALL = "pip install 'ragbudget[langchain]'"

try:
    from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableConfig, RunnableSerializable
except ImportError as err:  # the optional extra is not installed
    raise ConfigError(f"the LangChain adapter needs langchain-core ({err})", fix=INSTALL) from None

QUERY_KEYS = ("history", "mode", "index", "filters", "max_tokens", "tenant")


def to_document(s: Any) -> Document:
    """A ragbudget :class:`~ragbudget.types.Scored` chunk as a LangChain ``Document``."""
    return Document(id=s.chunk.id, page_content=s.chunk.text, metadata=chunk_metadata(s))


class RagBudgetRetriever(BaseRetriever):
    """A LangChain retriever over ``rag.search``."""

    rag: Any
    k: Optional[int] = None
    index: Optional[str] = None
    mode: Optional[str] = None  # hybrid | dense | bm25 (default: the config's retrieval.mode)
    filters: Optional[dict[str, Any]] = None

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return [to_document(s) for s in self.rag.search(query, k=self.k, index=self.index, mode=self.mode,
                                                        filters=self.filters)]

    async def _aget_relevant_documents(self, query: str, *,
                                       run_manager: AsyncCallbackManagerForRetrieverRun) -> list[Document]:
        import asyncio
        return await asyncio.to_thread(self._get_relevant_documents, query,
                                       run_manager=run_manager.get_sync())  # type: ignore[arg-type]


def answer_dict(answer: Answer) -> dict[str, Any]:
    """The runnable's ``output="dict"``: answer text, citations, ledger summary, context documents."""
    return {"answer": answer.answer, "citations": [asdict(c) for c in answer.citations],
            "ledger": ledger_summary(answer), "documents": [to_document(s) for s in answer.context]}


class RagBudgetRunnable(RunnableSerializable[Any, Any]):
    """Answer a question through the RAG. Input: a question string, or a dict with ``question`` and any
    of ``history``, ``mode``, ``index``, ``filters``, ``max_tokens``, ``tenant``. Output: the answer text
    (``output="text"``) or :func:`answer_dict` (``output="dict"``). Fields set here are defaults the
    input may override."""

    rag: Any
    output: Literal["text", "dict"] = "text"
    index: Optional[str] = None
    mode: Optional[str] = None
    filters: Optional[dict[str, Any]] = None
    max_tokens: Optional[int] = None
    tenant: str = "default"

    def _kwargs(self, value: Any) -> tuple[str, dict[str, Any]]:
        question: Any
        if isinstance(value, str):
            question, given = value, {}
        elif isinstance(value, Mapping):
            unknown = set(value) - {"question", *QUERY_KEYS}
            if unknown:
                raise QueryError(f"unknown input key(s) {sorted(unknown)}",
                                 fix=f"pass 'question' and any of {list(QUERY_KEYS)}")
            question, given = value.get("question"), {k: v for k, v in value.items() if k != "question"}
        else:
            raise QueryError(f"the input must be a question or a dict, got {type(value).__name__}",
                             fix='invoke("question") or invoke({"question": "...", "filters": {...}})')
        if not isinstance(question, str) or not question.strip():
            raise QueryError("the input has no question", fix='pass {"question": "..."}')
        kw = {k: getattr(self, k) for k in ("index", "mode", "filters", "max_tokens", "tenant")}
        kw.update(given)
        return question, {k: v for k, v in kw.items() if v is not None}

    def _out(self, answer: Answer) -> Any:
        return answer.answer if self.output == "text" else answer_dict(answer)

    def invoke(self, input: Any, config: Optional[RunnableConfig] = None, **kwargs: Any) -> Any:
        def run(value: Any) -> Any:
            question, kw = self._kwargs(value)
            return self._out(self.rag.query(question, **kw))
        return self._call_with_config(run, input, config, run_type="chain")

    async def ainvoke(self, input: Any, config: Optional[RunnableConfig] = None, **kwargs: Any) -> Any:
        async def run(value: Any) -> Any:
            question, kw = self._kwargs(value)
            return self._out(await self.rag.aquery(question, **kw))
        return await self._acall_with_config(run, input, config, run_type="chain")

    def stream(self, input: Any, config: Optional[RunnableConfig] = None, **kwargs: Any) -> Iterator[Any]:
        """``output="text"``: the answer's tokens as they are generated (a cache hit comes as one piece);
        ``output="dict"``: one item, the whole :func:`answer_dict`."""
        question, kw = self._kwargs(input)
        streamed = False
        for ev in self.rag.stream(question, **kw):
            if isinstance(ev, TokenEvent) and self.output == "text":
                streamed = True
                yield ev.text
            elif isinstance(ev, FinalEvent) and (self.output == "dict" or not streamed):
                yield self._out(ev.answer)

    async def astream(self, input: Any, config: Optional[RunnableConfig] = None,
                      **kwargs: Any) -> AsyncIterator[Any]:
        question, kw = self._kwargs(input)
        streamed = False
        async for ev in self.rag.astream(question, **kw):
            if isinstance(ev, TokenEvent) and self.output == "text":
                streamed = True
                yield ev.text
            elif isinstance(ev, FinalEvent) and (self.output == "dict" or not streamed):
                yield self._out(ev.answer)


def retriever(rag: Answerer, **opts: Any) -> RagBudgetRetriever:
    return RagBudgetRetriever(rag=rag, **opts)


def runnable(rag: Answerer, **opts: Any) -> RagBudgetRunnable:
    return RagBudgetRunnable(rag=rag, **opts)


__all__ = ["RagBudgetRetriever", "RagBudgetRunnable", "to_document", "answer_dict", "retriever", "runnable",
           "INSTALL"]

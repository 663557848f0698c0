"""LangChain and LlamaIndex adapters against the real libraries, over a real RAG on a small index."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from langchain_core.documents import Document as LCDocument
from langchain_core.retrievers import BaseRetriever as LCBaseRetriever
from langchain_core.runnables import Runnable, RunnableLambda
from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.retrievers import BaseRetriever as LIBaseRetriever
from llama_index.core.schema import NodeWithScore

from ragbudget.adapters.langchain import INSTALL, RagBudgetRetriever, RagBudgetRunnable
from ragbudget.config import load_config
from ragbudget.errors import QueryError
from ragbudget.pipeline import RAG
from ragbudget.types import Document

DOCS = [
    Document("seine", "The Seine flows through Paris. It is 777 kilometres long. Many bridges cross it.",
             {"source": "seine.md", "title": "Seine"}),
    Document("banana", "Bananas are berries. They grow in tropical climates. They are rich in potassium.",
             {"source": "banana.md", "title": "Bananas"}),
    Document("everest", "Mount Everest is the highest mountain. It is 8849 metres tall. It lies in the Himalaya.",
             {"source": "everest.md", "title": "Everest"}),
]
SEINE = "How long is the Seine?"


@pytest.fixture(scope="module")
def rag(embedder, tmp_path_factory):
    cfg = load_config(None, environ={}).with_overrides({"index.dir": str(tmp_path_factory.mktemp("adapters")),
                                                        "embedding.cache": False})
    r = RAG(cfg, index="adapters", embedder=embedder)
    r.ingest(DOCS, index="adapters")
    yield r
    r.close()


# ------------------------------------------------------------------ LangChain
def test_langchain_retriever_returns_documents_with_metadata(rag):
    retriever = RagBudgetRetriever(rag=rag, k=2)
    assert isinstance(retriever, LCBaseRetriever)
    docs = retriever.invoke(SEINE)
    assert docs and all(isinstance(d, LCDocument) for d in docs)
    top = docs[0]
    assert "777" in top.page_content
    assert top.metadata["doc_id"] == "seine" and top.metadata["source"] == "seine.md"
    assert top.metadata["chunk_id"] == top.id and isinstance(top.metadata["score"], float)
    assert [d.metadata["chunk_id"] for d in docs] == [s.chunk.id for s in rag.search(SEINE, k=2)]
    only = RagBudgetRetriever(rag=rag, k=3, filters={"source": "banana.md"}).invoke(SEINE)
    assert only and {d.metadata["source"] for d in only} == {"banana.md"}  # filtered inside the index
    assert asyncio.run(retriever.ainvoke(SEINE))[0].id == top.id


def test_langchain_runnable_answers_through_the_rag(rag):
    chain = RagBudgetRunnable(rag=rag)
    assert isinstance(chain, Runnable)
    text = chain.invoke(SEINE)
    assert isinstance(text, str) and "777" in text
    assert text == rag.query(SEINE).answer
    out = RagBudgetRunnable(rag=rag, output="dict").invoke({"question": "What are bananas rich in?",
                                                           "filters": {"source": "banana.md"}})
    assert "potassium" in out["answer"]
    assert {c["source"] for c in out["citations"]} <= {"banana.md"}
    assert {d.metadata["source"] for d in out["documents"]} == {"banana.md"}
    led = out["ledger"]
    assert led["sections"]["retrieved"]["used"] > 0 and "route" in led and "usage" in led
    # composes with other runnables (LCEL), and runs async
    composed = RunnableLambda(lambda q: {"question": q, "filters": {"source": "everest.md"}}) | chain
    assert "8849" in composed.invoke("How tall is Mount Everest?")
    assert asyncio.run(chain.ainvoke(SEINE)) == text
    assert chain.batch([SEINE, SEINE]) == [text, text]


def test_langchain_runnable_streams_the_answer(rag):
    q = "Where does the Seine flow?"
    pieces = list(RagBudgetRunnable(rag=rag, max_tokens=48).stream(q))
    assert pieces and "".join(pieces) == rag.query(q, max_tokens=48).answer

    async def collect():
        return [p async for p in RagBudgetRunnable(rag=rag, output="dict").astream(q)]
    items = asyncio.run(collect())
    assert len(items) == 1 and items[0]["answer"]


def test_langchain_bad_input_is_a_query_error(rag):
    chain = RagBudgetRunnable(rag=rag)
    with pytest.raises(QueryError, match="question or a dict"):
        chain.invoke(42)
    with pytest.raises(QueryError, match="unknown input"):
        chain.invoke({"question": SEINE, "temperature": 2})
    with pytest.raises(QueryError, match="no question"):
        chain.invoke({"filters": {}})


def test_langchain_is_optional():
    code = ("import sys, ragbudget, ragbudget.pipeline; assert 'langchain_core' not in sys.modules\n"
            "sys.modules['langchain_core'] = None  # as if the extra were not installed\n"
            "try:\n    import ragbudget.adapters.langchain\nexcept ragbudget.RagBudgetError as e:\n"
            "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "langchain-core" in out and INSTALL in out


# ------------------------------------------------------------------ LlamaIndex
def test_llamaindex_retriever(rag):
    retriever = rag.as_retriever(k=2)
    assert isinstance(retriever, LIBaseRetriever)
    nodes = retriever.retrieve("How tall is Mount Everest?")
    assert nodes and isinstance(nodes[0], NodeWithScore)
    top = nodes[0]
    assert "8849" in top.node.get_content()
    assert top.node.node_id == top.node.metadata["chunk_id"] and top.node.metadata["source"] == "everest.md"
    assert top.score == pytest.approx(top.node.metadata["score"])
    filtered = rag.as_retriever(k=3, filters={"source": "seine.md"}).retrieve("How tall is Mount Everest?")
    assert {n.node.metadata["source"] for n in filtered} == {"seine.md"}
    assert asyncio.run(retriever.aretrieve("How tall is Mount Everest?"))[0].node.node_id == top.node.node_id


def test_llamaindex_query_engine(rag):
    engine = rag.as_query_engine(max_tokens=64)
    assert isinstance(engine, BaseQueryEngine)
    q = "How tall is Mount Everest?"
    response = engine.query(q)
    answer = engine.last_answer
    assert response.response == answer.answer and "8849" in response.response
    assert [n.node.node_id for n in response.source_nodes] == [s.chunk.id for s in answer.context]
    assert any("8849" in n.node.get_content() for n in response.source_nodes)
    assert response.metadata["ledger"]["sections"]["retrieved"]["used"] > 0
    assert response.metadata["summary"]["route"] == answer.route
    again = asyncio.run(engine.aquery(q))  # the same question again: ragbudget's response cache answers
    assert again.response == response.response and again.metadata["cache_layer"] is not None
    scoped = rag.as_query_engine(filters={"source": "banana.md"}).query("What are bananas rich in?")
    assert {n.node.metadata["source"] for n in scoped.source_nodes} == {"banana.md"}


def test_llamaindex_adapter_needs_a_rag():
    from ragbudget.adapters.llamaindex import as_query_engine, as_retriever
    for make in (as_retriever, as_query_engine):
        with pytest.raises(QueryError, match="RAG"):
            make(object())

"""LlamaIndex interop with a real HybridRetriever over a small FAISS + BM25 index."""

import pytest
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from ragbudget.config import load_config
from ragbudget.index import HybridIndex
from ragbudget.adapters.interop import BudgetPostprocessor, RagBudgetRetriever
from ragbudget.retrieval.rerank import BiEncoderReranker
from ragbudget.retrieval.search import HybridRetriever
from ragbudget.kernels.tokens import Tokenizer
from ragbudget.types import Document

DOCS = [
    Document("a", "The Seine flows through Paris. It is 777 kilometres long. Many bridges cross it.",
             {"source": "seine.md"}),
    Document("b", "Bananas are berries. They grow in tropical climates. They are rich in potassium.",
             {"source": "banana.md"}),
    Document("c", "Mount Everest is the highest mountain. It is 8849 metres tall. It lies in the Himalaya.",
             {"source": "everest.md"}),
]


@pytest.fixture(scope="module")
def setup(embedder, tmp_path_factory):
    cfg = load_config(None, environ={}).with_overrides({"index.dir": str(tmp_path_factory.mktemp("idx"))})
    index = HybridIndex.create("interop", cfg, model_id=embedder.model_id, dim=embedder.dim)
    index.add_documents(DOCS, embedder)
    r = HybridRetriever(index, cfg.retrieval, embedder)
    yield cfg, r, embedder
    r.close()


def test_retriever_returns_nodes_with_citations(setup):
    cfg, r, _ = setup
    nodes = RagBudgetRetriever(r, k=2).retrieve("How long is the Seine?")
    assert nodes and isinstance(nodes[0], NodeWithScore)
    assert "777" in nodes[0].node.get_content()
    assert nodes[0].node.metadata["source"] == "seine.md"


def test_postprocessor_trims_to_budget(setup):
    cfg, r, emb = setup
    tok = Tokenizer()
    pp = BudgetPostprocessor(tok, cfg, BiEncoderReranker(emb), budget=20)
    nodes = RagBudgetRetriever(r, k=3).retrieve("How tall is Mount Everest?")
    out = pp.postprocess_nodes(nodes, QueryBundle("How tall is Mount Everest?"))
    text = " ".join(n.node.get_content() for n in out)
    assert "8849" in text
    assert tok.count(text) <= 20
    assert pp.last_ledger["used"] <= 20 and pp.last_ledger["dropped"]


def test_postprocessor_accepts_plain_llamaindex_nodes(setup):
    cfg, _, _ = setup
    pp = BudgetPostprocessor(Tokenizer(), cfg, None, budget=0)
    assert pp.postprocess_nodes([NodeWithScore(node=TextNode(text="hello world here"), score=1.0)],
                                QueryBundle("hi")) == []


def test_wrapping_a_non_retriever_is_an_error():
    with pytest.raises(Exception, match="retrieve"):
        RagBudgetRetriever(object())

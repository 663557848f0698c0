"""LlamaIndex interop: the budgeter as a node postprocessor, a ragbudget retriever as a LlamaIndex retriever.

::

    from ragbudget.adapters.interop import BudgetPostprocessor, RagBudgetRetriever
    engine = RetrieverQueryEngine.from_args(RagBudgetRetriever(retriever, k=20),
                                            node_postprocessors=[BudgetPostprocessor(tokenizer, cfg, reranker, 400)])
"""

from __future__ import annotations

from typing import Any, Optional, Protocol, Sequence

from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from pydantic import Field, PrivateAttr

from ..config import Config
from ..errors import QueryError
from ..retrieval.rerank import Reranker
from ..kernels.tokens import Tokenizer
from ..budget.fit import plan_context
from ..types import Chunk, Scored


class SupportsRetrieve(Protocol):
    def retrieve(self, query: str, k: int | None = None) -> list[Scored]: ...


def to_node(s: Scored) -> NodeWithScore:
    """A ragbudget :class:`Scored` chunk as a LlamaIndex ``NodeWithScore`` (citation in metadata)."""
    meta = {**dict(s.chunk.metadata), "doc_id": s.chunk.doc_id, "position": s.chunk.position}
    node = TextNode(id_=s.chunk.id, text=s.chunk.text, metadata=meta)
    return NodeWithScore(node=node, score=s.score)


def from_node(n: NodeWithScore, position: int = 0) -> Scored:
    meta = dict(n.node.metadata or {})
    text = n.node.get_content()
    return Scored(chunk=Chunk(id=n.node.node_id, doc_id=str(meta.get("doc_id", n.node.ref_doc_id or n.node.node_id)),
                              text=text, position=int(meta.get("position", position)), metadata=meta),
                  score=float(n.score if n.score is not None else 0.0))


class BudgetPostprocessor(BaseNodePostprocessor):
    """Rerank (optional), drop near-duplicates/below-cutoff, and trim nodes to ``budget`` tokens by
    query-aware sentence selection. The ragbudget ledger of the last call is in ``last_ledger``."""

    budget: int = Field(default=1200, ge=0)
    _config: Config = PrivateAttr()
    _tokenizer: Tokenizer = PrivateAttr()
    _reranker: Optional[Reranker] = PrivateAttr(default=None)
    last_ledger: dict[str, Any] = Field(default_factory=dict)

    def __init__(self, tokenizer: Tokenizer, config: Config, reranker: Reranker | None = None,
                 budget: int | None = None, **kw: Any) -> None:
        super().__init__(budget=(config.budget.retrieved.cap or 1200) if budget is None else budget, **kw)
        self._config, self._tokenizer, self._reranker = config, tokenizer, reranker

    @classmethod
    def class_name(cls) -> str:
        return "RagBudgetPostprocessor"

    def _postprocess_nodes(self, nodes: list[NodeWithScore],
                           query_bundle: Optional[QueryBundle] = None) -> list[NodeWithScore]:
        query = query_bundle.query_str if query_bundle else ""
        items = [from_node(n, i) for i, n in enumerate(nodes)]
        fit = plan_context(query, items, self._tokenizer, self._reranker, self._config)
        res = fit.pack(self.budget)
        self.last_ledger = {"budget": self.budget, "used": res.used, "items_in": len(res.kept),
                            "dropped": fit.ranked.dropped + res.dropped, "compressed": res.compressed}
        return [to_node(s) for s in res.kept]


class RagBudgetRetriever(BaseRetriever):
    """Wrap any object with ``retrieve(query, k) -> list[Scored]`` (e.g. ``HybridRetriever``)."""

    def __init__(self, retriever: SupportsRetrieve, k: int | None = None, **kw: Any) -> None:
        if not callable(getattr(retriever, "retrieve", None)):
            raise QueryError("RagBudgetRetriever needs an object with retrieve(query, k)",
                             fix="pass a ragbudget HybridRetriever")
        self._inner = retriever
        self._k = k
        super().__init__(**kw)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [to_node(s) for s in self._inner.retrieve(query_bundle.query_str, k=self._k)]


def nodes_text(nodes: Sequence[NodeWithScore]) -> str:
    return "\n\n".join(n.node.get_content() for n in nodes)

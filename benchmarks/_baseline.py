"""The LlamaIndex default pipeline, as the baseline ragbudget is compared with (a helper of
``headline.py`` and ``frugal_curve.py``, not a script).

Everything LlamaIndex does by default: ``SentenceSplitter()`` (1024-token chunks, 200 overlap),
``VectorStoreIndex`` in memory (dense only), ``as_retriever()`` with its default ``similarity_top_k`` (2),
the whole retrieved chunks as the context. The embedding model is the same bundled MiniLM, wrapped as a
llama-index :class:`BaseEmbedding`; passing it explicitly means ``Settings.embed_model`` (which would try
to load OpenAI) is never touched, and nothing is downloaded (the splitter's tokenizer is the tiktoken
file that ships inside llama-index-core).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from llama_index.core import Document as LIDocument
from llama_index.core import VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.constants import DEFAULT_SIMILARITY_TOP_K
from llama_index.core.node_parser import SentenceSplitter
from pydantic import PrivateAttr

import _common  # noqa: F401 - puts the checkout first on sys.path
from ragbudget.embed.encoder import Embedder
from ragbudget.errors import IngestError
from ragbudget.eval.answers import contains_answer, load_questions
from ragbudget.eval.ranking import dedupe, ndcg_at_k, percentile
from ragbudget.eval.retrieval import load_beir
from ragbudget.kernels.tokens import Tokenizer, ensure_offline_cache

SEP = "\n\n"


class RagbudgetEmbedding(BaseEmbedding):
    """A ragbudget :class:`~ragbudget.embed.encoder.Embedder` (e.g. the bundled MiniLM) as a llama-index embedding."""

    _inner: Any = PrivateAttr()
    _fresh: bool = PrivateAttr(default=False)

    def __init__(self, embedder: Embedder, *, fresh_queries: bool = False, **kw: Any) -> None:
        super().__init__(model_name=getattr(embedder, "model_id", "ragbudget"), embed_batch_size=64, **kw)
        self._inner = embedder
        # fresh_queries: run the model for every query even when the shared embedder remembers it, so a
        # benchmark that asks both pipelines the same question does not hand the second one a cache hit
        self._fresh = fresh_queries and hasattr(embedder, "_encode")

    def _get_query_embedding(self, query: str) -> list[float]:
        if self._fresh:
            return self._inner._encode([query])[0].tolist()
        return self._inner.embed_query(query).tolist()

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._inner.embed([text])[0].tolist()

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return [v.tolist() for v in self._inner.embed(texts)]


@dataclass
class Baseline:
    """A built LlamaIndex default pipeline (retrieval part; generation is the caller's)."""

    index: VectorStoreIndex
    nodes: int
    top_k: int

    def retrieve(self, question: str, k: int | None = None) -> list[tuple[str, str, float]]:
        """(doc id, chunk text, score) of the top ``k`` (default: LlamaIndex's default top-k) chunks."""
        r = self.index.as_retriever(similarity_top_k=k or self.top_k)
        return [(str(n.node.ref_doc_id), n.node.get_content(), float(n.score or 0.0)) for n in r.retrieve(question)]

    def context(self, question: str, k: int | None = None) -> str:
        return SEP.join(text for _, text, _ in self.retrieve(question, k))


def read_corpus(path: str | Path, limit: int | None = None) -> list[LIDocument]:
    """``corpus.jsonl`` records as llama-index Documents (``title\\n\\ntext``, like ragbudget's ingest)."""
    p = Path(path)
    if not p.is_file():
        raise IngestError(f"corpus not found: {p}", fix="point at a folder with corpus.jsonl")
    docs = []
    for line in p.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        title, text = str(r.get("title") or ""), str(r.get("text") or "")
        body = f"{title}\n\n{text}" if title.strip() and text.strip() else (text or title)
        if body.strip():
            docs.append(LIDocument(text=body, id_=str(r["_id"])))
        if limit and len(docs) >= limit:
            break
    return docs


def build_baseline(docs: Sequence[LIDocument], embedder: Embedder, *, top_k: int = DEFAULT_SIMILARITY_TOP_K,
                   splitter: SentenceSplitter | None = None, fresh_queries: bool = False) -> Baseline:
    """Split with the default ``SentenceSplitter`` and index in memory with the given embedder
    (``fresh_queries``: see :class:`RagbudgetEmbedding`)."""
    ensure_offline_cache()
    nodes = (splitter or SentenceSplitter()).get_nodes_from_documents(list(docs))
    index = VectorStoreIndex(nodes, embed_model=RagbudgetEmbedding(embedder, fresh_queries=fresh_queries),
                             show_progress=False)
    return Baseline(index=index, nodes=len(nodes), top_k=top_k)


def eval_answers(baseline: Baseline, questions: Sequence[dict[str, Any]], tokenizer: Tokenizer,
                 k: int | None = None, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Answer-in-context, context tokens per query and retrieval latency (embed + search) percentiles."""
    hits, toks, lat = [], [], []
    for i, q in enumerate(questions):
        t0 = time.perf_counter()
        ctx = baseline.context(q["text"], k)
        lat.append((time.perf_counter() - t0) * 1000)
        hits.append(contains_answer(ctx, q["answers"]))
        toks.append(tokenizer.count(ctx))
        if progress:
            progress(i + 1, len(questions))
    n = len(questions)
    return {"questions": n, "top_k": k or baseline.top_k, "chunks": baseline.nodes,
            "answer_in_context": round(sum(hits) / n, 4) if n else 0.0,
            "context_tokens_mean": round(sum(toks) / n, 1) if n else 0.0,
            "overhead_p50_ms": round(percentile(lat, 50), 2), "overhead_p99_ms": round(percentile(lat, 99), 2)}


def eval_retrieval(baseline: Baseline, queries: dict[str, str], qrels: dict[str, dict[str, int]],
                   k: int = 10) -> dict[str, Any]:
    """nDCG@10 over documents (a document ranks at its best chunk), retrieving ``k`` chunks per query."""
    scores, lat = [], []
    for qid, text in queries.items():
        t0 = time.perf_counter()
        ranked = dedupe([d for d, _, _ in baseline.retrieve(text, k)])
        lat.append((time.perf_counter() - t0) * 1000)
        scores.append(ndcg_at_k(ranked, qrels[qid], 10))
    n = len(scores)
    return {"queries": n, "top_k": k, "chunks": baseline.nodes, "ndcg@10": round(sum(scores) / n, 4) if n else 0.0,
            "overhead_p50_ms": round(percentile(lat, 50), 2), "overhead_p99_ms": round(percentile(lat, 99), 2)}


def run_squad(folder: str | Path, embedder: Embedder, *, limit: int | None = None,
              k: int | None = None) -> dict[str, Any]:
    docs = read_corpus(Path(folder) / "corpus.jsonl")
    base = build_baseline(docs, embedder)
    return eval_answers(base, load_questions(folder, limit), Tokenizer("cl100k_base"), k)


def run_beir(folder: str | Path, embedder: Embedder, *, limit: int | None = None, k: int = 10) -> dict[str, Any]:
    beir = load_beir(folder)
    qids = sorted(beir.queries, key=lambda q: (len(q), q))[: limit or None]
    base = build_baseline(read_corpus(Path(folder) / "corpus.jsonl"), embedder)
    return eval_retrieval(base, {q: beir.queries[q] for q in qids}, beir.qrels, k)


__all__ = ["RagbudgetEmbedding", "Baseline", "build_baseline", "read_corpus", "eval_answers", "eval_retrieval",
           "run_squad", "run_beir"]

"""Rerankers (bi-encoder cosine by default, cross-encoder from a local folder), MMR and a score cutoff.

Every reranker can also :meth:`~Reranker.score` arbitrary texts against a query; the trimmer uses that
to pick sentences. Chunks below the cutoff and near-duplicates found by MMR are returned as ``dropped``
with their reason, so the ledger can say why they never reached the prompt.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from ..config import RerankConfig
from ..embed.encoder import Embedder, quiet_loading
from ..errors import ModelNotFoundError
from ..types import Scored


@runtime_checkable
class Reranker(Protocol):
    """Scores texts against a query (higher = more relevant)."""

    name: str

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray: ...


@dataclass
class RerankResult:
    kept: list[Scored]
    dropped: list[dict[str, Any]] = field(default_factory=list)


class BiEncoderReranker:
    """Cosine similarity between query and text embeddings (the bundled MiniLM; no extra model)."""

    name = "bi-encoder"

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros(0, dtype=np.float32)
        q = _unit(np.asarray(self.embedder.embed_query(query), dtype=np.float32))
        m = _unit_rows(np.asarray(self.embedder.embed(list(texts)), dtype=np.float32))
        return m @ q

    def vectors(self, texts: Sequence[str]) -> np.ndarray:
        return _unit_rows(np.asarray(self.embedder.embed(list(texts)), dtype=np.float32))


class CrossEncoderReranker:
    """sentence-transformers CrossEncoder loaded from a local folder (nothing is downloaded).

    Scores are passed through a sigmoid so that cutoffs live in [0, 1] like cosine scores.
    """

    name = "cross-encoder"

    def __init__(self, model_path: str | os.PathLike[str], device: str = "cpu") -> None:
        path = Path(model_path).expanduser()
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(f"cross-encoder model not found at {path} (nothing is downloaded)",
                                     fix="set rerank.model_path to a local CrossEncoder folder, "
                                         "or rerank.kind=bi-encoder")
        self.path = path
        self.device = device
        self._model: Any = None

    def warm_up(self) -> None:
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from sentence_transformers import CrossEncoder  # heavy import, loaded on first use

            with quiet_loading():
                self._model = CrossEncoder(str(self.path), device=self.device, local_files_only=True)

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros(0, dtype=np.float32)
        self.warm_up()
        raw = np.asarray(self._model.predict([(query, t) for t in texts], show_progress_bar=False),
                         dtype=np.float32)
        return 1.0 / (1.0 + np.exp(-raw)) if raw.min() < 0 or raw.max() > 1 else raw


def make_reranker(cfg: RerankConfig, embedder: Embedder) -> Reranker | None:
    """The configured reranker; ``None`` for ``kind: none``."""
    if cfg.kind == "none":
        return None
    if cfg.kind == "cross-encoder":
        return CrossEncoderReranker(cfg.model_path or "")
    return BiEncoderReranker(embedder)


def mmr(relevance: np.ndarray, similarity: np.ndarray, *, lambda_: float, k: int,
        duplicate_threshold: float = 1.01) -> tuple[list[int], list[int]]:
    """Maximal marginal relevance. Returns (selected indices in order, near-duplicate indices).

    An item whose similarity to an already-selected item is ≥ ``duplicate_threshold`` is a duplicate
    and never selected. Pure function over a relevance vector and a pairwise similarity matrix.
    """
    n = len(relevance)
    selected: list[int] = []
    dupes: list[int] = []
    remaining = list(range(n))
    while remaining and len(selected) < k:
        best, best_val = -1, -np.inf
        for i in list(remaining):
            red = max((similarity[i, j] for j in selected), default=0.0)
            if selected and red >= duplicate_threshold:
                remaining.remove(i)
                dupes.append(i)
                continue
            val = lambda_ * relevance[i] - (1 - lambda_) * red
            if val > best_val:
                best, best_val = i, val
        if best < 0:
            break
        selected.append(best)
        remaining.remove(best)
    return selected, dupes


def rerank(query: str, items: Sequence[Scored], reranker: Reranker | None, cfg: RerankConfig,
           *, vectors: np.ndarray | None = None) -> RerankResult:
    """Score ``items`` with ``reranker``, drop those below ``cfg.cutoff``, then MMR down to ``cfg.top_n``.

    ``vectors`` (unit rows, one per item) drive MMR; without them (and without a bi-encoder to make them)
    duplicates are found by token-set overlap.
    """
    items = list(items)
    if not items:
        return RerankResult(kept=[])
    texts = [s.chunk.text for s in items]
    if reranker is None:
        rel = np.asarray([s.score for s in items], dtype=np.float32)
        scored = list(items)
    else:
        rel = np.asarray(reranker.score(query, texts), dtype=np.float32)
        scored = [replace(s, rerank_score=float(r), score=float(r)) for s, r in zip(items, rel)]
    dropped: list[dict[str, Any]] = []
    keep_idx = []
    for i, s in enumerate(scored):
        if cfg.cutoff is not None and rel[i] < cfg.cutoff:
            dropped.append({"chunk_id": s.chunk.id, "reason": "below cutoff", "score": float(rel[i])})
        else:
            keep_idx.append(i)
    if not keep_idx:
        return RerankResult(kept=[], dropped=dropped)
    if vectors is None and isinstance(reranker, BiEncoderReranker):
        vectors = reranker.vectors([texts[i] for i in keep_idx])
    elif vectors is not None:
        vectors = vectors[keep_idx]
    sim = vectors @ vectors.T if vectors is not None else _jaccard_matrix([texts[i] for i in keep_idx])
    order, dupes = mmr(rel[keep_idx], sim, lambda_=cfg.mmr_lambda, k=cfg.top_n,
                       duplicate_threshold=cfg.mmr_duplicate_threshold)
    for d in dupes:
        s = scored[keep_idx[d]]
        dropped.append({"chunk_id": s.chunk.id, "reason": "duplicate (MMR)", "score": float(rel[keep_idx[d]])})
    chosen = set(order)
    for j in range(len(keep_idx)):
        if j not in chosen and j not in dupes:
            s = scored[keep_idx[j]]
            dropped.append({"chunk_id": s.chunk.id, "reason": "over top_n", "score": float(rel[keep_idx[j]])})
    kept = [scored[keep_idx[j]] for j in order]
    return RerankResult(kept=kept, dropped=dropped)


def _unit(v: np.ndarray) -> np.ndarray:
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else v


def _unit_rows(m: np.ndarray) -> np.ndarray:
    if m.size == 0:
        return m
    n = np.linalg.norm(m, axis=1, keepdims=True)
    n[n == 0] = 1.0
    return m / n


def _jaccard_matrix(texts: Sequence[str]) -> np.ndarray:
    sets = [set(t.lower().split()) for t in texts]
    n = len(sets)
    out = np.eye(n, dtype=np.float32)
    for i in range(n):
        for j in range(i + 1, n):
            u = len(sets[i] | sets[j])
            out[i, j] = out[j, i] = len(sets[i] & sets[j]) / u if u else 1.0
    return out

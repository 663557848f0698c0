"""FAISS dense index over normalised vectors: exact inner product (flat) by default, HNSW or IVF.

The float32 vectors are the source of truth (kept so unchanged chunks never need re-embedding); the
FAISS structure is rebuilt from them whenever the row set changes.
"""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np

from ..config import FaissConfig

EXACT_FILTERED_ROWS = 20000  # a filtered search over fewer rows is an exact matrix product
IVF_MIN_POINTS_PER_LIST = 39  # FAISS warns below this many training points per centroid


class DenseIndex:
    """Rows of vectors searched by inner product; ``search`` returns (row, score) pairs."""

    def __init__(self, dim: int, config: FaissConfig, vectors: np.ndarray | None = None) -> None:
        self.dim = dim
        self.config = config
        self.vectors = np.zeros((0, dim), np.float32) if vectors is None else np.ascontiguousarray(vectors, np.float32)
        self.kind = config.kind
        self.notes: list[str] = []
        self._index: faiss.Index | None = None
        self.rebuild()

    def __len__(self) -> int:
        return int(self.vectors.shape[0])

    def rebuild(self, vectors: np.ndarray | None = None) -> None:
        """(Re)build the FAISS structure from ``vectors`` (default: the current rows)."""
        if vectors is not None:
            self.vectors = np.ascontiguousarray(vectors, np.float32).reshape(-1, self.dim)
        n, cfg = len(self), self.config
        self.kind, self.notes = cfg.kind, []
        if cfg.kind == "hnsw":
            index = faiss.IndexHNSWFlat(self.dim, cfg.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efSearch = cfg.hnsw_ef_search
        elif cfg.kind == "ivf" and n >= cfg.ivf_nlist * IVF_MIN_POINTS_PER_LIST:
            quantizer = faiss.IndexFlatIP(self.dim)
            index = faiss.IndexIVFFlat(quantizer, self.dim, cfg.ivf_nlist, faiss.METRIC_INNER_PRODUCT)
            index.train(self.vectors)
            index.nprobe = cfg.ivf_nprobe
            self._quantizer = quantizer  # keep the quantizer alive as long as the index
        else:
            if cfg.kind == "ivf":
                self.notes.append(f"ivf needs ≥ {cfg.ivf_nlist * IVF_MIN_POINTS_PER_LIST} vectors to train "
                                  f"{cfg.ivf_nlist} lists, got {n}; using exact flat search")
                self.kind = "flat"
            index = faiss.IndexFlatIP(self.dim)
        if n:
            index.add(self.vectors)
        self._index = index

    def search(self, query: np.ndarray, k: int, rows: np.ndarray | None = None) -> list[tuple[int, float]]:
        """Top ``k`` (row, score); with ``rows``, only among those rows (a metadata pre-filter): exact
        over the rows when they are few, else FAISS with an id selector (the graph/lists skip the rest)."""
        if not len(self) or k <= 0:
            return []
        q = np.ascontiguousarray(query, np.float32).reshape(1, self.dim)
        if rows is not None:
            if not len(rows):
                return []
            if len(rows) <= EXACT_FILTERED_ROWS or self.kind == "flat":
                scores = self.vectors[rows] @ q[0]
                k = min(k, len(rows))
                top = np.argpartition(-scores, k - 1)[:k]
                top = top[np.argsort(-scores[top], kind="stable")]
                return [(int(rows[i]), float(scores[i])) for i in top]
            sel = faiss.IDSelectorBatch(np.ascontiguousarray(rows, dtype=np.int64))
            if self.kind == "hnsw":
                params = faiss.SearchParametersHNSW(sel=sel, efSearch=max(self.config.hnsw_ef_search, k))
            else:
                params = faiss.SearchParametersIVF(sel=sel, nprobe=self.config.ivf_nprobe)
            scores, found = self._index.search(q, min(k, len(rows)), params=params)  # type: ignore[union-attr]
            return [(int(r), float(s)) for r, s in zip(found[0], scores[0]) if r >= 0]
        scores, found = self._index.search(q, min(k, len(self)))  # type: ignore[union-attr]
        return [(int(r), float(s)) for r, s in zip(found[0], scores[0]) if r >= 0]

    def save(self, folder: Path) -> None:
        np.save(folder / "vectors.npy", self.vectors)

    @classmethod
    def load(cls, folder: Path, dim: int, config: FaissConfig) -> "DenseIndex":
        return cls(dim, config, np.load(folder / "vectors.npy"))

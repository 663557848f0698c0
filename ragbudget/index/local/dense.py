"""FAISS dense index over normalised vectors: exact inner product (flat) by default, HNSW or IVF.

Rows only grow: new vectors are added to the FAISS structure in place (no rebuild on ingest), and deleted
rows are masked out of every search (an id selector over the live rows) until the hybrid index compacts.
"""

from __future__ import annotations

from pathlib import Path

import faiss
from typing import Any

import numpy as np

from ...config import FaissConfig

EXACT_FILTERED_ROWS = 20000  # a filtered search over fewer rows is an exact matrix product
IVF_MIN_POINTS_PER_LIST = 39  # FAISS warns below this many training points per centroid
FAISS_FILE = "dense.faiss"


class DenseIndex:
    """Rows of vectors searched by inner product; ``search`` returns (row, score) pairs."""

    def __init__(self, dim: int, config: FaissConfig, vectors: np.ndarray | None = None) -> None:
        self.dim = dim
        self.config = config
        self.kind = config.kind
        self.notes: list[str] = []
        self._parts: list[np.ndarray] = []
        self._flat: np.ndarray | None = None
        self._n = 0
        self._index: faiss.Index | None = None
        self._dead: np.ndarray = np.zeros(0, np.int64)
        self._selector: faiss.IDSelector | None = None
        self.rebuild(np.zeros((0, dim), np.float32) if vectors is None else vectors)

    def __len__(self) -> int:
        return self._n

    @property
    def vectors(self) -> np.ndarray:
        """All rows' vectors, deleted ones included (concatenated once, on first use)."""
        if self._flat is None:
            self._flat = (np.concatenate(self._parts) if len(self._parts) > 1 else
                          self._parts[0] if self._parts else np.zeros((0, self.dim), np.float32))
            self._parts = [self._flat]
        return self._flat

    def _new_index(self, train: np.ndarray) -> faiss.Index:
        cfg, n = self.config, len(train)
        self.kind, self.notes = cfg.kind, []
        if cfg.kind == "hnsw":
            hnsw = faiss.IndexHNSWFlat(self.dim, cfg.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            hnsw.hnsw.efSearch = cfg.hnsw_ef_search
            return hnsw
        if cfg.kind == "ivf" and n >= cfg.ivf_nlist * IVF_MIN_POINTS_PER_LIST:
            quantizer = faiss.IndexFlatIP(self.dim)
            index = faiss.IndexIVFFlat(quantizer, self.dim, cfg.ivf_nlist, faiss.METRIC_INNER_PRODUCT)
            index.train(np.ascontiguousarray(train, np.float32))
            index.nprobe = cfg.ivf_nprobe
            self._quantizer = quantizer  # keep the quantizer alive as long as the index
            return index
        if cfg.kind == "ivf":
            self.notes.append(f"ivf needs ≥ {cfg.ivf_nlist * IVF_MIN_POINTS_PER_LIST} vectors to train "
                              f"{cfg.ivf_nlist} lists, got {n}; using exact flat search")
            self.kind = "flat"
        return faiss.IndexFlatIP(self.dim)

    def rebuild(self, vectors: np.ndarray | None = None, dead: np.ndarray | None = None) -> None:
        """(Re)build the FAISS structure from ``vectors`` (default: the current rows)."""
        if vectors is not None:
            self._parts, self._flat = [np.asarray(vectors, np.float32).reshape(-1, self.dim)], None
        vecs = self.vectors
        self._n = len(vecs)
        self._index = self._new_index(vecs)
        if self._n:
            self._index.add(np.ascontiguousarray(vecs, np.float32))
        self.set_dead(np.zeros(0, np.int64) if dead is None else dead)

    def add(self, vectors: np.ndarray) -> None:
        """Append rows in place (an IVF that was too small to train is trained once it is big enough)."""
        vectors = np.ascontiguousarray(vectors, np.float32).reshape(-1, self.dim)
        if not len(vectors):
            return
        self._parts.append(vectors)
        self._flat = None
        if (self.config.kind == "ivf" and self.kind == "flat"
                and self._n + len(vectors) >= self.config.ivf_nlist * IVF_MIN_POINTS_PER_LIST):
            self.rebuild(None, self._dead)
            return
        self._index.add(vectors)  # type: ignore[union-attr]
        self._n += len(vectors)

    def set_dead(self, dead: np.ndarray) -> None:
        """Rows to leave out of every search (deleted, awaiting compaction)."""
        self._dead = np.unique(np.asarray(dead, np.int64))
        if len(self._dead):
            self._dead_batch = faiss.IDSelectorBatch(self._dead)
            self._selector = faiss.IDSelectorNot(self._dead_batch)
        else:
            self._selector = None

    def _params(self, sel: faiss.IDSelector, k: int) -> faiss.SearchParameters:
        fs: Any = faiss  # the stubs lack SearchParametersHNSW and the keyword constructors of the others
        if self.kind == "hnsw":
            return fs.SearchParametersHNSW(sel=sel, efSearch=max(self.config.hnsw_ef_search, k))
        if self.kind == "ivf":
            return fs.SearchParametersIVF(sel=sel, nprobe=self.config.ivf_nprobe)
        return fs.SearchParameters(sel=sel)

    def search(self, query: np.ndarray, k: int, rows: np.ndarray | None = None) -> list[tuple[int, float]]:
        """Top ``k`` (row, score) among live rows; with ``rows`` (live rows matching a metadata pre-filter),
        only among those: exact over the rows when they are few, else FAISS with an id selector (the
        graph/lists skip the rest)."""
        if not self._n or k <= 0:
            return []
        if self.config.threads:
            faiss.omp_set_num_threads(self.config.threads)  # per calling thread (OpenMP's setting is)
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
            scores, found = self._index.search(q, min(k, len(rows)), params=self._params(sel, k))  # type: ignore[union-attr]
        elif self._selector is not None:
            k = min(k, self._n - len(self._dead))
            if k <= 0:
                return []
            scores, found = self._index.search(q, k, params=self._params(self._selector, k))  # type: ignore[union-attr]
        else:
            scores, found = self._index.search(q, min(k, self._n))  # type: ignore[union-attr]
        return [(int(r), float(s)) for r, s in zip(found[0], scores[0]) if r >= 0]

    # -- persistence of the derived structure (graph / lists; flat is rebuilt from the vectors) ------------
    def save_structure(self, path: Path) -> bool:
        """Write the FAISS structure when rebuilding it would cost more than reading it (HNSW, IVF)."""
        if self.kind == "flat" or self._index is None:
            return False
        faiss.write_index(self._index, str(path))
        return True

    @classmethod
    def open(cls, dim: int, config: FaissConfig, parts: list[np.ndarray], dead: np.ndarray,
             structure: Path | None) -> "DenseIndex":
        """Rows from ``parts`` (memory-mapped segment vectors); the FAISS structure read from
        ``structure`` when saved (its row count must match), else built."""
        self = cls.__new__(cls)
        self.dim, self.config, self.kind, self.notes = dim, config, config.kind, []
        self._parts, self._flat = [p for p in parts if len(p)], None
        self._n = sum(len(p) for p in self._parts)
        self._dead, self._selector = np.zeros(0, np.int64), None
        if structure is not None and structure.is_file():
            index = faiss.read_index(str(structure))
            if index.ntotal == self._n and index.d == dim:
                self._index = index
                self.kind = "hnsw" if isinstance(index, faiss.IndexHNSW) else "ivf" if isinstance(
                    index, faiss.IndexIVF) else "flat"
                typed: Any = faiss.downcast_index(index)
                if self.kind == "hnsw":
                    typed.hnsw.efSearch = config.hnsw_ef_search
                elif self.kind == "ivf":
                    typed.nprobe = config.ivf_nprobe
                self.set_dead(dead)
                return self
        self.rebuild(None, dead)
        return self

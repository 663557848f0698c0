"""The semantic cache's per-scope vector rows: O(1) add and remove, a fast nearest-question search.

Rows are normalised float32 question embeddings in one contiguous matrix (grown by doubling; a removed
row is filled by the last one, so storing and evicting cost the same at 100k entries as at 10). Search:

- up to ``exact_max`` rows: one matrix-vector product over every row (exact; ~4 ms at 16k × 384);
- above it, a 256-bit sign sketch first (random hyperplanes, fixed seed: each row keeps which side of 256
  planes it lies on, 32 bytes instead of 1.5 KB). The rows whose sketch differs from the query's in the
  fewest bits — the ``shortlist`` best by Hamming distance, which tracks the angle — are rescored exactly
  with their float32 rows. The scan reads 3.2 MB instead of 154 MB at 100k entries, so the lookup is bound
  by arithmetic, not memory bandwidth (BENCHMARKS.md "Semantic cache that pays": P99 52 → under 20 ms).

The sketch is a prefilter, not the answer: every cosine returned is exact. A row can be missed only when
more than ``shortlist`` rows beat it on Hamming distance; for a question at cosine ≥ 0.8 to the query
(≈ 79 of 256 bits differ, σ ≈ 6.5) that needs hundreds of rows at nearly the same cosine, and
``benchmarks/cache_scale.py`` measures the agreement with the exact search (``recall_at_1``).
"""

from __future__ import annotations

import numpy as np

SKETCH_BITS = 256
_WORDS = SKETCH_BITS // 64
_BYTE_BITS = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def _popcount(words: np.ndarray, out: np.ndarray) -> None:
    """Set bits per uint64 into ``out`` (uint8): numpy ≥ 2's ``bitwise_count``, else a byte table."""
    count = getattr(np, "bitwise_count", None)
    if count is not None:
        count(words, out=out)
    else:
        out[:] = _BYTE_BITS[words.view(np.uint8)].reshape(-1, 8).sum(axis=1, dtype=np.uint8)


def planes(dim: int, seed: int = 28) -> np.ndarray:
    """The random hyperplanes (``dim`` × :data:`SKETCH_BITS`) of the sign sketch; fixed by ``seed``."""
    return np.random.default_rng(seed).standard_normal((dim, SKETCH_BITS)).astype(np.float32)


def sketch(vectors: np.ndarray, hyperplanes: np.ndarray) -> np.ndarray:
    """Sign sketches of ``vectors`` (n × dim, or one vector) as ``_WORDS`` uint64 words per vector."""
    bits = np.atleast_2d(vectors) @ hyperplanes > 0
    return np.packbits(bits, axis=1).view(np.uint64)


class VectorRows:
    """Rows of one scope: vectors, their sketches (stored word-major for the scan) and a payload index."""

    def __init__(self, dim: int, hyperplanes: np.ndarray, *, exact_max: int = 16384, shortlist: int = 256) -> None:
        self.dim = dim
        self.n = 0
        self.exact_max = exact_max
        self.shortlist = max(int(shortlist), 1)
        self._planes = hyperplanes
        self.vecs = np.zeros((16, dim), dtype=np.float32)
        self.codes = np.zeros((_WORDS, 16), dtype=np.uint64)  # word-major: each word is one contiguous scan

    def _grow(self) -> None:
        cap = 2 * self.vecs.shape[0]
        vecs = np.zeros((cap, self.dim), dtype=np.float32)
        vecs[:self.n] = self.vecs[:self.n]
        codes = np.zeros((_WORDS, cap), dtype=np.uint64)
        codes[:, :self.n] = self.codes[:, :self.n]
        self.vecs, self.codes = vecs, codes

    def append(self, v: np.ndarray) -> int:
        """Add a normalised vector as the last row; returns its row number."""
        if self.n == self.vecs.shape[0]:
            self._grow()
        i = self.n
        self.vecs[i] = v
        self.codes[:, i] = sketch(v, self._planes)[0]
        self.n += 1
        return i

    def remove(self, i: int) -> int:
        """Remove row ``i`` by moving the last row into it; returns the row that moved (== ``i`` if none)."""
        last = self.n - 1
        if i != last:
            self.vecs[i] = self.vecs[last]
            self.codes[:, i] = self.codes[:, last]
        self.n -= 1
        return last

    def _shortlist(self, q: np.ndarray) -> np.ndarray:
        qc = sketch(q, self._planes)[0]
        n = self.n
        dist = np.zeros(n, dtype=np.uint16)
        word = np.empty(n, dtype=np.uint64)
        count = np.empty(n, dtype=np.uint8)
        for w in range(_WORDS):
            np.bitwise_xor(self.codes[w, :n], qc[w], out=word)
            _popcount(word, count)
            np.add(dist, count, out=dist)
        # the smallest Hamming cut that keeps ``shortlist`` rows (a histogram: cheaper than a partial sort)
        cut = int(np.searchsorted(np.cumsum(np.bincount(dist, minlength=SKETCH_BITS + 1)), self.shortlist))
        rows = np.flatnonzero(dist <= cut)
        if len(rows) > 4 * self.shortlist:  # many ties at the cut: keep the nearest, ties by row
            rows = rows[np.argsort(dist[rows], kind="stable")[:4 * self.shortlist]]
        return rows

    def search(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The (at most) ``k`` rows nearest to the normalised ``q``, best first: (rows, exact cosines)."""
        n = self.n
        if n == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        if n <= max(self.exact_max, self.shortlist):
            rows = np.arange(n)
            sims = self.vecs[:n] @ q
        else:
            rows = self._shortlist(q)
            sims = self.vecs[rows] @ q
        if len(rows) > k:
            part = np.argpartition(-sims, k)[:k]
            rows, sims = rows[part], sims[part]
        order = np.argsort(-sims, kind="stable")
        return rows[order], sims[order]

"""BM25 over an analyzer (lowercase alphanumeric tokens, NLTK English stop words, Snowball English stemming,
all from :mod:`ragbudget.kernels.text`; stop words and stemming configurable in :class:`~ragbudget.config.BM25Config`),
on bm25s' sparse score matrix.

Scoring is Okapi BM25 as rank-bm25's ``BM25Okapi`` computes it (the reference a test compares top-k with on
the shared collections): ``idf = log((N - df + .5) / (df + .5))`` and ``tf·(k1+1) / (tf + k1·(1 - b + b·dl/avgdl))``.
The precomputed per-(term, document) scores live in one CSC matrix, so a query costs the postings of its
terms, not a scan of every document. Saved with bm25s and memory-mapped on load: a serving process reads
no token lists and rebuilds nothing.
"""

from __future__ import annotations

import json
import logging
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import bm25s
import numpy as np

from ..config import BM25Config
from ..kernels.text import STOPWORDS, bm25_tokens, stem_words

log = logging.getLogger(__name__)

EPSILON = 0.25  # rank-bm25's floor for negative idf, as a fraction of the mean idf


class Analyzer:
    """Text → index terms: :func:`~ragbudget.kernels.text.bm25_tokens`, less :data:`~ragbudget.kernels.text.STOPWORDS`,
    stemmed. Stateless apart from a memo; safe to share between threads.

    Indexes on disk record only ``settings()``, so these steps must not change for a given setting."""

    def __init__(self, config: BM25Config) -> None:
        self.config = config
        self._stop: frozenset[str] = STOPWORDS if config.stopwords else frozenset()
        self._stem = config.stemmer == "english"
        self._memo = lru_cache(maxsize=65536)(self._terms)

    def settings(self) -> dict[str, object]:
        return {"stemmer": self.config.stemmer, "stopwords": self.config.stopwords}

    def __call__(self, text: str) -> list[str]:
        toks = [t for t in bm25_tokens(text) if t not in self._stop]  # already lowercase
        return stem_words(toks) if self._stem else toks

    def _terms(self, text: str) -> tuple[str, ...]:
        return tuple(self(text))

    def terms(self, text: str) -> tuple[str, ...]:
        """Like calling the analyzer, memoised per text: the query path analyses the same sentences of the
        same chunks request after request (the context builder's lexical sentence scores)."""
        return self._memo(text) if len(text) <= 4096 else self._terms(text)


def okapi_idf(df: np.ndarray, n_docs: int) -> np.ndarray:
    """rank-bm25 ``BM25Okapi`` idf per term: negative values (terms in more than half the documents)
    become ``EPSILON`` × the mean idf."""
    idf = np.log(n_docs - df + 0.5) - np.log(df + 0.5)
    if len(idf):
        idf = np.where(idf < 0, EPSILON * float(idf.mean()), idf)
    return idf


class SparseIndex:
    """BM25 over rows of analyzed tokens; ``search`` returns (row, score) for rows with score > 0.

    ``rows`` maps the index's own rows to the caller's row numbers (the hybrid index's global rows, which
    keep deleted rows out of BM25 without renumbering): row ``i`` here is ``rows[i]`` there."""

    def __init__(self, config: BM25Config, tokens: Sequence[Sequence[str]] = (),
                 rows: np.ndarray | None = None) -> None:
        self.config = config
        self.analyzer = Analyzer(config)
        self._bm25: bm25s.BM25 | None = None
        self._idf: np.ndarray = np.zeros(0)
        self._n = 0
        self.rows = np.zeros(0, np.int64)
        self._inverse: np.ndarray | None = None
        self.rebuild(tokens, rows)

    def __len__(self) -> int:
        return self._n

    def analyze_many(self, texts: Sequence[str]) -> list[list[str]]:
        return [self.analyzer(t) for t in texts]

    def rebuild(self, tokens: Sequence[Sequence[str]], rows: np.ndarray | None = None) -> None:
        """Index ``tokens`` (one list of terms per row) from scratch."""
        self._n = len(tokens)
        self.rows = (np.arange(self._n, dtype=np.int64) if rows is None
                     else np.ascontiguousarray(rows, dtype=np.int64))
        self._inverse = None
        if not any(len(t) for t in tokens):  # nothing to score (BM25 divides by the corpus size)
            self._bm25, self._idf = None, np.zeros(0)
            return
        bm = bm25s.BM25(k1=self.config.k1, b=self.config.b, method="robertson", idf_method="lucene")
        vocab: dict[str, int] = {}
        ids = [[vocab.setdefault(t, len(vocab)) for t in doc] for doc in tokens]
        bm.index((ids, vocab), show_progress=False)
        # bm25s stores idf_lucene · tf / (tf + k1·norm) per (term, doc); rescale each term's column to
        # rank-bm25's score: okapi idf · tf·(k1+1) / (tf + k1·norm). Lucene idf is never 0, so no
        # column loses its term-frequency part (Robertson's clamped idf would).
        indptr = np.asarray(bm.scores["indptr"])
        df = np.diff(indptr).astype(np.float64)
        n = int(bm.scores["num_docs"])
        lucene = np.log1p((n - df + 0.5) / (df + 0.5))
        factor = (self.config.k1 + 1.0) * okapi_idf(df, n) / lucene
        data = np.asarray(bm.scores["data"], np.float64) * np.repeat(factor, np.diff(indptr))
        bm.scores["data"] = data.astype(bm.scores["data"].dtype)
        self._set(bm)

    def _set(self, bm: bm25s.BM25) -> None:
        df = np.diff(np.asarray(bm.scores["indptr"])).astype(np.float64)
        self._bm25, self._idf = bm, okapi_idf(df, int(bm.scores["num_docs"]))

    def _local_rows(self, rows: np.ndarray) -> np.ndarray:
        """Caller rows → this index's rows (rows not here dropped)."""
        if self._inverse is None:
            inv = np.full(int(self.rows.max(initial=-1)) + 1, -1, np.int64)
            inv[self.rows] = np.arange(len(self.rows))
            self._inverse = inv
        rows = rows[rows < len(self._inverse)]
        local = self._inverse[rows]
        return local[local >= 0]

    def search(self, query: str, k: int, rows: np.ndarray | None = None) -> list[tuple[int, float]]:
        """Top ``k`` rows (only among ``rows`` when given); empty when the query has no index terms
        (only stop words or punctuation)."""
        bm = self._bm25
        if bm is None or k <= 0:
            return []
        ids = bm.get_tokens_ids(self.analyzer(query))
        if not ids:
            return []
        scores = bm.get_scores_from_ids(ids).astype(np.float64, copy=False)
        if rows is not None:
            local = self._local_rows(np.asarray(rows, np.int64))
            masked = np.zeros_like(scores)
            masked[local] = scores[local]
            scores = masked
        k = min(k, len(scores))
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [(int(self.rows[r]), float(scores[r])) for r in top if scores[r] > 0]

    def idf(self, terms: Sequence[str]) -> dict[str, float]:
        """Inverse document frequency of analysed ``terms`` (0 for terms the index never saw)."""
        if self._bm25 is None:
            return {t: 0.0 for t in terms}
        vocab = self._bm25.vocab_dict
        return {t: max(float(self._idf[vocab[t]]), 0.0) if t in vocab else 0.0 for t in terms}

    # -- persistence ----------------------------------------------------------------------------
    def save(self, folder: Path) -> None:
        """Write the score matrix (bm25s format) and the row map into ``folder`` (created)."""
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / "rows.npy", self.rows)
        if self._bm25 is not None:
            self._bm25.save(str(folder))
        else:
            (folder / "empty.json").write_text(json.dumps({"rows": self._n}), encoding="utf-8")

    @classmethod
    def load(cls, folder: Path, config: BM25Config) -> "SparseIndex":
        """Open a saved index, memory-mapping the score matrix."""
        self = cls(config)
        self.rows = np.load(folder / "rows.npy")
        self._n = len(self.rows)
        if (folder / "empty.json").is_file():
            return self
        bm = bm25s.BM25.load(str(folder), mmap=True)
        if int(bm.scores["num_docs"]) != self._n:
            raise ValueError(f"BM25 matrix has {bm.scores['num_docs']} rows, row map {self._n}")
        self._set(bm)
        return self


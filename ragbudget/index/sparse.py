"""BM25 (rank-bm25 Okapi) over an analyzer: lowercase alphanumeric tokens, English stop words,
Snowball English stemming (each configurable in :class:`~ragbudget.config.BM25Config`).

Persisted as the analyzed token lists (plain JSON); BM25Okapi is rebuilt on load.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import llama_index.core
import numpy as np
from rank_bm25 import BM25Okapi

from ..config import BM25Config
from ..stemming import stem_words

_TOKEN = re.compile(r"[a-z0-9]+")
_STOPWORDS_FILE = (Path(llama_index.core.__file__).resolve().parent / "_static" / "nltk_cache" / "corpora"
                   / "stopwords" / "english")


@lru_cache(maxsize=1)
def english_stopwords() -> frozenset[str]:
    """NLTK's English stop-word list (shipped inside llama-index-core), split like our tokens."""
    words = _STOPWORDS_FILE.read_text(encoding="utf-8").split()
    return frozenset(t for w in words for t in _TOKEN.findall(w.lower()))


class Analyzer:
    """Text → index terms. Stateless apart from a stemming memo; safe to share between threads."""

    def __init__(self, config: BM25Config) -> None:
        self.config = config
        self._stop = english_stopwords() if config.stopwords else frozenset()
        self._stem = config.stemmer == "english"
        self._memo = lru_cache(maxsize=65536)(self._terms)

    def settings(self) -> dict[str, object]:
        return {"stemmer": self.config.stemmer, "stopwords": self.config.stopwords}

    def __call__(self, text: str) -> list[str]:
        toks = [t for t in _TOKEN.findall(text.lower()) if t not in self._stop]
        return stem_words(toks) if self._stem else toks

    def _terms(self, text: str) -> tuple[str, ...]:
        return tuple(self(text))

    def terms(self, text: str) -> tuple[str, ...]:
        """Like calling the analyzer, memoised per text: the query path analyses the same sentences of the
        same chunks request after request (the context builder's lexical sentence scores)."""
        return self._memo(text) if len(text) <= 4096 else self._terms(text)


class SparseIndex:
    """BM25 over rows of analyzed tokens; ``search`` returns (row, score) for rows with score > 0."""

    def __init__(self, config: BM25Config, tokens: Sequence[list[str]] = ()) -> None:
        self.config = config
        self.analyzer = Analyzer(config)
        self.tokens: list[list[str]] = [list(t) for t in tokens]
        self._bm25: BM25Okapi | None = None
        self.rebuild()

    def __len__(self) -> int:
        return len(self.tokens)

    def analyze_many(self, texts: Sequence[str]) -> list[list[str]]:
        return [self.analyzer(t) for t in texts]

    def rebuild(self, tokens: Sequence[list[str]] | None = None) -> None:
        if tokens is not None:
            self.tokens = [list(t) for t in tokens]
        # BM25Okapi divides by the corpus size; an empty corpus (or all-empty docs) has nothing to score.
        has_terms = any(self.tokens)
        self._bm25 = BM25Okapi(self.tokens, k1=self.config.k1, b=self.config.b) if has_terms else None

    def search(self, query: str, k: int, rows: np.ndarray | None = None) -> list[tuple[int, float]]:
        """Top ``k`` rows (only among ``rows`` when given); empty when the query has no index terms
        (only stop words or punctuation)."""
        q = self.analyzer(query)
        if self._bm25 is None or not q or k <= 0:
            return []
        scores = self._bm25.get_scores(q)
        if rows is not None:
            masked = np.zeros_like(scores)
            masked[rows] = scores[rows]
            scores = masked
        k = min(k, len(scores))
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [(int(r), float(scores[r])) for r in top if scores[r] > 0]

    def idf(self, terms: Sequence[str]) -> dict[str, float]:
        """Inverse document frequency of analysed ``terms`` (0 for terms the index never saw)."""
        table = self._bm25.idf if self._bm25 is not None else {}
        return {t: max(float(table.get(t, 0.0)), 0.0) for t in terms}

    def save(self, folder: Path) -> None:
        (folder / "bm25_tokens.json").write_text(json.dumps(self.tokens), encoding="utf-8")

    @classmethod
    def load(cls, folder: Path, config: BM25Config) -> "SparseIndex":
        return cls(config, json.loads((folder / "bm25_tokens.json").read_text(encoding="utf-8")))

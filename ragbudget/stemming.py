"""English stemming that is safe to call from many threads at once.

snowballstemmer's stemmer objects keep per-call state; one shared across threads fails under concurrent
queries (``IndexError: string index out of range`` in ``find_among_b``, seen in the load test). Each
thread gets its own stemmer, and results are memoised per word.
"""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import Iterable

import snowballstemmer

_local = threading.local()


def _stemmer() -> snowballstemmer.stemmer:
    s = getattr(_local, "stemmer", None)
    if s is None:
        s = _local.stemmer = snowballstemmer.stemmer("english")
    return s


@lru_cache(maxsize=262144)
def stem(word: str) -> str:
    """The English (Porter 2) stem of one lowercase word."""
    return _stemmer().stemWord(word)


def stem_words(words: Iterable[str]) -> list[str]:
    return [stem(w) for w in words]

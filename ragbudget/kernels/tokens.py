"""Token counting and truncation with tiktoken, offline.

tiktoken normally downloads its BPE files on first use. llama-index-core ships cl100k_base and
o200k_base in ``llama_index/core/_static/tiktoken_cache``; when ``TIKTOKEN_CACHE_DIR`` is unset we
point it there before the first encoding is loaded, so no code path reaches a download host.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

import llama_index.core
import tiktoken

from ..errors import ConfigError

ENCODINGS = ("cl100k_base", "o200k_base")
BUNDLED_TIKTOKEN_CACHE = Path(llama_index.core.__file__).resolve().parent / "_static" / "tiktoken_cache"


def ensure_offline_cache() -> str:
    """Point tiktoken at the bundled encoding files unless the user chose a cache dir. Returns the dir."""
    if not os.environ.get("TIKTOKEN_CACHE_DIR"):
        os.environ["TIKTOKEN_CACHE_DIR"] = str(BUNDLED_TIKTOKEN_CACHE)
    return os.environ["TIKTOKEN_CACHE_DIR"]


@lru_cache(maxsize=4)
def get_encoding(name: str = "cl100k_base") -> tiktoken.Encoding:
    if name not in ENCODINGS:
        raise ConfigError(f"tokenizer.encoding: unknown encoding {name!r}", fix=f"use one of {ENCODINGS}")
    ensure_offline_cache()
    return tiktoken.get_encoding(name)


# Counts of texts up to this many characters are memoised (sentences, chunks, headers, the system prompt:
# the same strings are counted on every request that retrieves them). Longer texts (whole documents at
# ingest) are counted directly so the cache stays small: at most entries × 4 KiB of keys.
COUNT_CACHE_MAX_CHARS = 4096


class Tokenizer:
    """Counts, encodes and truncates text for one tiktoken encoding.

    ``count_cache_entries``: size of the LRU memo of :meth:`count` (0 turns it off). Byte-pair encoding is
    the largest CPU cost of assembling a prompt (every candidate sentence is counted to pack the budget),
    and the texts recur across requests, so counts are looked up rather than recomputed (BENCHMARKS.md).
    """

    def __init__(self, encoding: str = "cl100k_base", *, count_cache_entries: int = 16384) -> None:
        if count_cache_entries < 0:
            raise ConfigError("tokenizer.count_cache_entries must be >= 0", fix="use 0 to turn the memo off")
        self.name = encoding
        self._enc = get_encoding(encoding)
        self._cached = lru_cache(maxsize=count_cache_entries)(self._count) if count_cache_entries else None

    def _count(self, text: str) -> int:
        return len(self._enc.encode(text, disallowed_special=()))

    def cache_info(self) -> tuple[int, int, int, int | None] | None:
        """``(hits, misses, maxsize, currsize)``-like tuple of the count memo, or None when it is off."""
        return tuple(self._cached.cache_info()) if self._cached else None  # type: ignore[return-value]

    def encode(self, text: str) -> list[int]:
        return self._enc.encode(text, disallowed_special=())

    def decode(self, ids: list[int]) -> str:
        return self._enc.decode(ids)

    def count(self, text: str) -> int:
        if not text:
            return 0
        if self._cached is not None and len(text) <= COUNT_CACHE_MAX_CHARS:
            return self._cached(text)
        return self._count(text)

    def count_many(self, texts: list[str]) -> list[int]:
        # A plain loop: tiktoken's encode_batch spins a thread pool, which costs more than it saves for
        # the few dozen sentences a request counts (measured: 6.5 ms → under 2 ms per request).
        return [self.count(t) for t in texts]

    def truncate(self, text: str, max_tokens: int, *, from_end: bool = False) -> str:
        """The longest prefix (or suffix) of ``text`` with at most ``max_tokens`` tokens."""
        if max_tokens <= 0:
            return ""
        ids = self.encode(text)
        if len(ids) <= max_tokens:
            return text
        kept = ids[-max_tokens:] if from_end else ids[:max_tokens]
        out = self.decode(kept)
        # A cut inside a multi-byte character decodes to U+FFFD; drop it.
        return out.strip("\ufffd")

    def __call__(self, text: str) -> list[int]:  # llama-index tokenizer callable
        return self.encode(text)

"""Index names and where local indexes live; the embedder an index is built with by default."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..config import Config
from ..embed.encoder import EmbeddingCache, SentenceTransformerEmbedder
from ..errors import IndexError_
from ..kernels.tokens import Tokenizer
from .local.manifest import MANIFEST_FILE

NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")  # use fullmatch: "$" would let "nl\n" through


def valid_name(name: object) -> bool:
    return isinstance(name, str) and NAME.fullmatch(name) is not None


def check_name(name: str) -> None:
    if not valid_name(name):
        raise IndexError_(f"invalid index name {name!r}",
                          fix="use letters, digits, '_', '-' or '.', not starting with '.' or '-'")


def default_embedder(cfg: Config) -> SentenceTransformerEmbedder:
    """The configured embedder with its persistent cache at ``<index.dir>/.embcache.sqlite``."""
    cache = EmbeddingCache(Path(cfg.index.dir) / ".embcache.sqlite") if cfg.embedding.cache else None
    return SentenceTransformerEmbedder(cfg.embedding, cache)


def list_indexes(index_dir: str | os.PathLike[str]) -> list[str]:
    d = Path(index_dir)
    if not d.is_dir():
        return []
    # a save's crash leftovers (".NAME.tmp-PID", ".NAME.old") and other dot-folders are never indexes
    return sorted(p.name for p in d.iterdir()
                  if valid_name(p.name) and p.is_dir() and (p / MANIFEST_FILE).is_file())


def ingest_tokenizer(cfg: Config) -> Tokenizer:
    """The chunker's tokenizer, without the count memo: ingest-time texts do not recur, and the memo would
    keep up to its size in chunk texts alive for as long as the index is loaded."""
    return Tokenizer(cfg.tokenizer.encoding, count_cache_entries=0)

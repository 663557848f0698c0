"""Assembly: a backend from :class:`CacheConfig`, the response cache (exact then semantic), all layers."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..config import CacheConfig
from ..embed.encoder import Embedder
from .base import CacheStats, KVBackend, encode_json
from .keys import ResponseScope
from .memory import MemoryBackend
from .redis_backend import RedisBackend
from .response import CacheHit, ExactResponseCache
from .retrieval import RetrievalCache, ToolCache
from .semantic import SemanticResponseCache, Verifier
from .sqlite import SQLiteBackend

log = logging.getLogger(__name__)


def make_backend(config: CacheConfig) -> KVBackend:
    """The backend ``config.backend`` names (memory, sqlite or redis)."""
    common: dict[str, Any] = {"max_value_bytes": config.max_value_bytes, "default_ttl_s": config.ttl_s}
    if config.backend == "memory":
        return MemoryBackend(max_entries=config.max_entries, **common)
    if config.backend == "sqlite":
        return SQLiteBackend(config.path, max_entries=config.max_entries, **common)
    return RedisBackend(config.redis_url, timeout_s=config.redis_timeout_s, cooldown_s=config.redis_cooldown_s,
                        prefix=config.redis_prefix, **common)


class ResponseCache:
    """Exact layer first, then the semantic layer (when given). Stores go to both."""

    def __init__(self, exact: ExactResponseCache, semantic: SemanticResponseCache | None = None) -> None:
        self.exact = exact
        self.semantic = semantic

    def lookup(self, scope: ResponseScope, question: str, embedding: np.ndarray | None = None) -> CacheHit | None:
        hit = self.exact.lookup(scope, question)
        if hit is None and self.semantic is not None:
            hit = self.semantic.lookup(scope, question, embedding)
        return hit

    def store(self, scope: ResponseScope, question: str, record: Mapping[str, Any],
              embedding: np.ndarray | None = None) -> bool:
        """Store in every response layer. Serialises first: a non-JSON record raises CacheError and
        nothing is stored in any layer. Returns True when the exact layer took it."""
        rec = dict(record)
        exact_value = encode_json(rec)
        sem_value = encode_json({"question": question, "record": rec}) if self.semantic is not None else None
        ok = self.exact.store_encoded(scope, question, exact_value)
        if self.semantic is not None and sem_value is not None:
            self.semantic.store_encoded(scope, question, sem_value, embedding)
        return ok


@dataclass
class CacheLayers:
    """Every cache layer over one backend, plus per-layer stats for the metrics module."""

    backend: KVBackend
    response: ResponseCache | None
    retrieval: RetrievalCache | None
    tool: ToolCache | None

    @classmethod
    def from_config(cls, config: CacheConfig, embedder: Embedder | None = None, *,
                    verifier: Verifier | None = None, backend: KVBackend | None = None) -> "CacheLayers":
        """Build the configured layers. The semantic layer needs ``embedder``; without one it is off."""
        be = backend if backend is not None else make_backend(config)
        response = None
        if config.response:
            semantic = None
            if config.semantic.enabled and embedder is not None:
                semantic = SemanticResponseCache(be, embedder, config.semantic, ttl_s=config.ttl_s, verifier=verifier)
            response = ResponseCache(ExactResponseCache(be, ttl_s=config.ttl_s), semantic)
        retrieval = RetrievalCache(be, ttl_s=config.retrieval_ttl_s) if config.retrieval else None
        tool = ToolCache(be, ttl_s=config.tool_ttl_s) if config.tool else None
        return cls(backend=be, response=response, retrieval=retrieval, tool=tool)

    def stats(self) -> dict[str, CacheStats]:
        """Per-layer stats objects (``snapshot()`` each for numbers)."""
        out: dict[str, CacheStats] = {}
        if self.response is not None:
            out["exact"] = self.response.exact.stats
            if self.response.semantic is not None:
                out["semantic"] = self.response.semantic.stats
        if self.retrieval is not None:
            out["retrieval"] = self.retrieval.stats
        if self.tool is not None:
            out["tool"] = self.tool.stats
        return out

    def snapshot(self) -> dict[str, Any]:
        """All layer stats and the backend's counters as plain data."""
        return {"layers": {k: s.snapshot() for k, s in self.stats().items()},
                "backend": {"name": self.backend.name, **self.backend.stats.snapshot()}}

    def close(self) -> None:
        self.backend.close()

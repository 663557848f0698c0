"""Retrieval cache (query → ranked chunk ids + scores) and tool/handler output cache with TTL."""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

from .base import CacheStats, KVBackend, decode_json, encode_json
from .keys import retrieval_key, tool_key


class RetrievalCache:
    """(index content version, retrieval settings, normalised query) → [(chunk id, score), ...]."""

    layer = "retrieval"

    def __init__(self, backend: KVBackend, *, ttl_s: float | None = None, stats: CacheStats | None = None) -> None:
        self.backend = backend
        self.ttl_s = ttl_s
        self.stats = stats or CacheStats("retrieval")

    def get(self, index_version: str, settings: Mapping[str, Any], query: str) -> list[tuple[str, float]] | None:
        entry = decode_json(self.backend.get(retrieval_key(index_version, settings, query)))
        if not isinstance(entry, dict) or not isinstance(entry.get("hits"), list):
            self.stats.miss()
            return None
        self.stats.hit(0, float(entry.get("ms", 0.0)))
        return [(str(cid), float(score)) for cid, score in entry["hits"]]

    def set(self, index_version: str, settings: Mapping[str, Any], query: str,
            hits: Sequence[tuple[str, float]], *, elapsed_ms: float = 0.0) -> bool:
        """Store ranked hits; ``elapsed_ms`` (the retrieval's cost) is what a later hit saves."""
        value = encode_json({"hits": [[str(c), float(s)] for c, s in hits], "ms": float(elapsed_ms)})
        ok = self.backend.set(retrieval_key(index_version, settings, query), value, self.ttl_s)
        self.stats.incr("stores" if ok else "store_failures")
        return ok


class ToolCache:
    """(tool name, tool version, arguments) → JSON-able output, with a TTL."""

    layer = "tool"

    def __init__(self, backend: KVBackend, *, ttl_s: float | None = 300.0, stats: CacheStats | None = None) -> None:
        self.backend = backend
        self.ttl_s = ttl_s
        self.stats = stats or CacheStats("tool")

    def get(self, tool: str, args: Mapping[str, Any], version: str = "") -> tuple[bool, Any]:
        """``(found, value)``; a cached ``None`` output is a hit (``(True, None)``)."""
        entry = decode_json(self.backend.get(tool_key(tool, args, version)))
        if not isinstance(entry, dict) or "value" not in entry:
            self.stats.miss()
            return False, None
        self.stats.hit(int(entry.get("tokens", 0)), float(entry.get("ms", 0.0)))
        return True, entry["value"]

    def set(self, tool: str, args: Mapping[str, Any], value: Any, version: str = "", *,
            elapsed_ms: float = 0.0, tokens: int = 0) -> bool:
        """Store a tool output; a non-JSON output raises CacheError and nothing is stored."""
        data = encode_json({"value": value, "ms": float(elapsed_ms), "tokens": int(tokens)})
        ok = self.backend.set(tool_key(tool, args, version), data, self.ttl_s)
        self.stats.incr("stores" if ok else "store_failures")
        return ok

    def call(self, tool: str, args: Mapping[str, Any], fn: Callable[..., Any], version: str = "") -> Any:
        """``fn(**args)`` through the cache."""
        found, value = self.get(tool, args, version)
        if found:
            return value
        t0 = time.perf_counter()
        value = fn(**args)
        self.set(tool, args, value, version, elapsed_ms=(time.perf_counter() - t0) * 1000.0)
        return value

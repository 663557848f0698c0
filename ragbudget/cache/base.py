"""Key-value backend protocol, value encoding and per-layer statistics.

A backend stores ``bytes`` under ``str`` keys with a TTL. Backends never raise for an unavailable
store: a failed ``get`` is a miss and a failed ``set`` returns ``False``; both are logged and counted
in :class:`BackendStats`. Values over ``max_value_bytes`` are refused (counted as ``too_large``); the
checks every backend shares live once, in :class:`BackendBase`.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..errors import CacheError

log = logging.getLogger("ragbudget.cache")


@runtime_checkable
class KVBackend(Protocol):
    """What every cache backend offers. ``ttl_s=None`` means the backend default."""

    name: str
    stats: "BackendStats"
    max_value_bytes: int

    def get(self, key: str) -> bytes | None: ...

    def set(self, key: str, value: bytes, ttl_s: float | None = None) -> bool: ...

    def delete(self, key: str) -> None: ...

    def clear(self) -> None: ...

    def close(self) -> None: ...


@dataclass
class BackendStats:
    """Counters of one backend: operations, refusals and failures. Thread-safe increments."""

    gets: int = 0
    sets: int = 0
    too_large: int = 0
    errors: int = 0
    skipped: int = 0  # requests served without the backend (unavailable / cooling down)
    evictions: int = 0
    expired: int = 0
    recovered: int = 0  # corrupt stores moved aside and recreated
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def incr(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + n)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {k: getattr(self, k) for k in ("gets", "sets", "too_large", "errors", "skipped",
                                                  "evictions", "expired", "recovered")}


@dataclass
class CacheStats:
    """Per-layer counters: hits, misses, hit rate, tokens and milliseconds saved."""

    layer: str
    hits: int = 0
    misses: int = 0
    stores: int = 0
    store_failures: int = 0
    rejected_by_guard: int = 0
    tokens_saved: int = 0
    ms_saved: float = 0.0
    # semantic layer: decisions by reason ("refused_substitution", "accepted_learned", "feedback_wrong", ...)
    reasons: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def hit(self, tokens: int = 0, ms: float = 0.0) -> None:
        with self._lock:
            self.hits += 1
            self.tokens_saved += int(tokens)
            self.ms_saved += float(ms)

    def miss(self) -> None:
        with self._lock:
            self.misses += 1

    def incr(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + n)

    def count(self, reason: str, n: int = 1) -> None:
        """Count one decision by reason (see ``reasons``)."""
        with self._lock:
            self.reasons[reason] = self.reasons.get(reason, 0) + n

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            total = self.hits + self.misses
            return {"layer": self.layer, "hits": self.hits, "misses": self.misses,
                    "hit_rate": self.hits / total if total else 0.0, "stores": self.stores,
                    "store_failures": self.store_failures, "rejected_by_guard": self.rejected_by_guard,
                    "tokens_saved": self.tokens_saved, "ms_saved": round(self.ms_saved, 3),
                    **({"reasons": dict(sorted(self.reasons.items()))} if self.reasons else {})}


def encode_json(value: Any) -> bytes:
    """Compact UTF-8 JSON; a value JSON cannot represent is a :class:`CacheError` (nothing stored)."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as err:
        raise CacheError(f"cache value is not JSON-serialisable: {err}",
                         fix="store plain dicts/lists/str/int/float/bool/None (e.g. Answer.to_dict())") from None


def decode_json(raw: bytes | None) -> Any | None:
    """Inverse of :func:`encode_json`; undecodable bytes read as a miss (``None``)."""
    if raw is None:
        return None
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None


def check_ttl(ttl_s: float | None, default: float) -> float:
    ttl = default if ttl_s is None else float(ttl_s)
    if not ttl > 0:
        raise CacheError(f"cache TTL must be positive, got {ttl_s!r}", fix="pass ttl_s > 0 seconds")
    return ttl


class BackendBase:
    """What every backend shares: the value-size and TTL checks, and its :class:`BackendStats`."""

    name = ""

    def __init__(self, *, max_value_bytes: int, default_ttl_s: float) -> None:
        self.max_value_bytes = int(max_value_bytes)
        self.default_ttl_s = float(default_ttl_s)
        self.stats = BackendStats()

    def admit(self, key: str, value: bytes, ttl_s: float | None) -> float | None:
        """The TTL to store ``value`` under, or None when it is refused as too large (counted and logged).
        A TTL that is not positive is a :class:`CacheError`."""
        ttl = check_ttl(ttl_s, self.default_ttl_s)
        if len(value) > self.max_value_bytes:
            self.stats.incr("too_large")
            log.warning("cache value for %s refused: %d bytes > max_value_bytes=%d",
                        key[:32], len(value), self.max_value_bytes)
            return None
        return ttl

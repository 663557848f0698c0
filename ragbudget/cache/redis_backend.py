"""Shared backend on Redis (several API replicas), through redis-py with short socket timeouts.

Any Redis error or timeout is logged and counted, and the call reads as a miss / a refused store: the
request is served without this layer, never failed by it. A failure opens a circuit breaker
(:class:`~ragbudget.kernels.breaker.ProbedBreaker`): every request then skips Redis at once (no I/O, no timeout),
and after ``cooldown_s`` a background PING decides whether it closes again — so a down or frozen Redis
costs one timeout, then nothing per request, and the layer comes back by itself when Redis recovers.
Expiry is server-side (``PX``).
"""

from __future__ import annotations

import logging
import time
from typing import Callable

import redis

from ..kernels.breaker import ProbedBreaker
from ..errors import CacheError
from .base import BackendBase

log = logging.getLogger(__name__)


class RedisBackend(BackendBase):
    """Redis-backed store under ``prefix``. Entry bounds are the server's (``maxmemory-policy``)."""

    name = "redis"

    def __init__(self, url: str = "redis://127.0.0.1:6379/0", *, timeout_s: float = 0.25,
                 cooldown_s: float = 1.0, max_value_bytes: int = 1_000_000, default_ttl_s: float = 86400.0,
                 prefix: str = "ragbudget:", clock: Callable[[], float] = time.monotonic) -> None:
        try:
            self._client = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                                                retry_on_timeout=False, health_check_interval=0)
        except ValueError as err:
            raise CacheError(f"cache.redis_url {url!r} is not a Redis URL: {err}",
                             fix="use redis://HOST:PORT/DB") from None
        self.url = url
        self.prefix = prefix
        self.cooldown_s = float(cooldown_s)
        super().__init__(max_value_bytes=max_value_bytes, default_ttl_s=default_ttl_s)
        # cooldown_s = 0: no breaker, every call tries Redis (tests of raw failure handling)
        self.breaker = (ProbedBreaker(self._client.ping, failures=1, reset_s=self.cooldown_s, clock=clock)
                        if self.cooldown_s > 0 else None)

    def _available(self) -> bool:
        if self.breaker is not None and not self.breaker.allow():
            self.stats.incr("skipped")
            return False
        return True

    def _failed(self, op: str, err: Exception) -> None:
        self.stats.incr("errors")
        self.stats.incr("skipped")
        if self.breaker is not None:
            self.breaker.failure()
        log.warning("redis cache %s failed (%s: %s); serving without it for %.1fs",
                    op, type(err).__name__, err, self.cooldown_s)

    def get(self, key: str) -> bytes | None:
        self.stats.incr("gets")
        if not self._available():
            return None
        try:
            value = self._client.get(self.prefix + key)
        except redis.RedisError as err:
            self._failed("get", err)
            return None
        return bytes(value) if value is not None else None  # type: ignore[arg-type]  # bytes: no decode_responses

    def set(self, key: str, value: bytes, ttl_s: float | None = None) -> bool:
        ttl = self.admit(key, value, ttl_s)
        if ttl is None:
            return False
        if not self._available():
            return False
        try:
            self._client.set(self.prefix + key, value, px=max(1, int(ttl * 1000)))
        except redis.RedisError as err:
            self._failed("set", err)
            return False
        self.stats.incr("sets")
        return True

    def delete(self, key: str) -> None:
        if not self._available():
            return
        try:
            self._client.delete(self.prefix + key)
        except redis.RedisError as err:
            self._failed("delete", err)

    def clear(self) -> None:
        """Delete this backend's keys (those under ``prefix``), not the whole database."""
        if not self._available():
            return
        try:
            batch: list[bytes] = []
            for k in self._client.scan_iter(match=self.prefix + "*", count=500):
                batch.append(k)
                if len(batch) >= 500:
                    self._client.delete(*batch)
                    batch = []
            if batch:
                self._client.delete(*batch)
        except redis.RedisError as err:
            self._failed("clear", err)

    def close(self) -> None:
        self._client.close()

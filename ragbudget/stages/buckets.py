"""Token buckets for admission control: in process, or shared by every replica through one Redis.

:class:`MemoryBuckets` (one replica) and :class:`RedisBuckets` (a Lua script makes each take atomic, on
the server clock) implement :class:`Buckets`: ``take`` a cost or say how long until it is there, and
``adjust`` to settle a charge once the real cost is known.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Protocol, runtime_checkable

import redis

from ..kernels.breaker import ProbedBreaker
from ..config import AdmissionConfig
from ..errors import ConfigError

log = logging.getLogger("ragbudget.stages.admission")


# --------------------------------------------------------------------------------------------- buckets

@runtime_checkable
class Buckets(Protocol):
    """Token buckets keyed by a string: take ``cost`` tokens or say how long until they are there."""

    def take(self, key: str, cost: float, rate: float, burst: float) -> tuple[bool, float]:
        """``(allowed, retry_after_s)``; ``cost`` above ``burst`` is clamped to ``burst``."""
        ...

    def adjust(self, key: str, delta: float, rate: float, burst: float) -> None:
        """Settle a charge: give back ``delta`` tokens (negative: take more; the bucket may go below 0)."""
        ...


class MemoryBuckets:
    """In-process buckets (one replica). Thread-safe."""

    def __init__(self) -> None:
        self._state: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, key: str, cost: float, rate: float, burst: float) -> tuple[bool, float]:
        cost = min(cost, burst)
        now = time.monotonic()
        with self._lock:
            tokens, ts = self._state.get(key, (burst, now))
            tokens = min(burst, tokens + max(0.0, now - ts) * rate)
            if tokens >= cost:
                self._state[key] = (tokens - cost, now)
                return True, 0.0
            self._state[key] = (tokens, now)
            return False, (cost - tokens) / rate

    def adjust(self, key: str, delta: float, rate: float, burst: float) -> None:
        now = time.monotonic()
        with self._lock:
            tokens, ts = self._state.get(key, (burst, now))
            tokens = min(burst, tokens + max(0.0, now - ts) * rate)
            self._state[key] = (max(-burst, min(burst, tokens + delta)), now)


# Runs atomically in Redis; uses the server clock so replicas with skewed clocks share one limit.
_LUA_TAKE = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = math.min(tonumber(ARGV[3]), burst)
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local st = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(st[1])
local ts = tonumber(st[2])
if tokens == nil then tokens = burst; ts = now end
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate)
local allowed = 0
local retry = 0
if tokens >= cost then tokens = tokens - cost; allowed = 1 else retry = (cost - tokens) / rate end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return {allowed, tostring(retry)}
"""

_LUA_ADJUST = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local delta = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local st = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(st[1])
local ts = tonumber(st[2])
if tokens == nil then tokens = burst; ts = now end
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate)
tokens = math.max(-burst, math.min(burst, tokens + delta))
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return tostring(tokens)
"""


class RedisBuckets:
    """Buckets shared by every replica through one Redis (a Lua script makes each take atomic).

    If Redis cannot be reached the limit falls back to an in-process bucket (logged, and counted in
    :attr:`fallbacks`): a cache outage must not take the API down. A failure opens a circuit breaker
    (:class:`~ragbudget.kernels.breaker.ProbedBreaker`): while it is open no request waits on Redis; a background
    PING after ``cooldown_s`` closes it again when Redis is back.
    """

    def __init__(self, url: str, *, prefix: str = "ragbudget:rl:", timeout_s: float = 0.25,
                 client: redis.Redis | None = None, cooldown_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.prefix = prefix
        self.client = client or redis.Redis.from_url(url, socket_timeout=timeout_s,
                                                     socket_connect_timeout=timeout_s)
        self._script = self.client.register_script(_LUA_TAKE)
        self._adjust = self.client.register_script(_LUA_ADJUST)
        self._fallback = MemoryBuckets()
        self.fallbacks = 0
        self.breaker = ProbedBreaker(self.client.ping, failures=1, reset_s=max(cooldown_s, 0.01), clock=clock)

    def _failed(self, err: Exception) -> None:
        self.fallbacks += 1
        self.breaker.failure()
        log.warning("admission: redis unavailable (%s); using the in-process limit", err)

    def take(self, key: str, cost: float, rate: float, burst: float) -> tuple[bool, float]:
        if not self.breaker.allow():
            self.fallbacks += 1
            return self._fallback.take(key, cost, rate, burst)
        try:
            allowed, retry = self._script(keys=[self.prefix + key], args=[rate, burst, cost])
        except redis.RedisError as err:
            self._failed(err)
            return self._fallback.take(key, cost, rate, burst)
        return bool(int(allowed)), float(retry)

    def adjust(self, key: str, delta: float, rate: float, burst: float) -> None:
        if not self.breaker.allow():
            self._fallback.adjust(key, delta, rate, burst)
            return
        try:
            self._adjust(keys=[self.prefix + key], args=[rate, burst, delta])
        except redis.RedisError as err:
            self._failed(err)
            self._fallback.adjust(key, delta, rate, burst)


def make_buckets(cfg: AdmissionConfig) -> Buckets:
    if cfg.backend == "memory":
        return MemoryBuckets()
    if cfg.backend == "redis":
        return RedisBuckets(cfg.redis_url, prefix=cfg.key_prefix, timeout_s=cfg.redis_timeout_s,
                            cooldown_s=cfg.redis_cooldown_s)
    raise ConfigError(f"service.admission.backend: unknown backend {cfg.backend!r}", fix="memory or redis")


__all__ = ["Buckets", "MemoryBuckets", "RedisBuckets", "make_buckets"]

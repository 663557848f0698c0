"""Admission control: per-tenant token buckets, a bounded priority queue, and a degradation ladder.

Order of checks for one request (:meth:`AdmissionController.admit`):

1. degradation level ≥ 5 (or ≥ ``batch_reject_level`` for batch work) → :class:`AdmissionError` (429);
   (shedding refuses only requests that would have to wait for a slot);
2. the tenant's request bucket and token bucket (in process, or one shared limit through Redis);
3. a concurrency slot: free → go; else wait in a bounded priority queue (interactive before batch,
   FIFO within a priority); queue full, an estimated wait over ``queue_timeout_s`` (recent slot hold
   time × queue position; refused at once, so the 429 is prompt and no time is spent on a request that
   would time out) or waited past ``queue_timeout_s`` → :class:`AdmissionError`.

The ladder reads P95 queue wait and P95 TTFT over a sliding window and compares each to its SLO; the
larger ratio picks the level: 0 normal, 1 smaller retrieved budget, 2 skip reranking, 3 smaller model,
4 cached or extractive answer only, 5 reject. The pipeline applies levels 1–4 (``degrade_level=``).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import threading
import time
from collections import deque
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import AsyncIterator, Callable, Literal

from .buckets import Buckets, MemoryBuckets, RedisBuckets, make_buckets
from ..config import AdmissionConfig, LimitsConfig, TenantConfig
from .degrade import REJECT
from ..errors import AdmissionError
from ..kernels.stats import percentile

log = logging.getLogger(__name__)

Priority = Literal["interactive", "batch"]
PRIORITIES: dict[str, int] = {"interactive": 0, "batch": 1}
LEVEL_NAMES = ("normal", "smaller_retrieved_budget", "skip_rerank", "smaller_model", "cached_or_extractive",
               "reject")


# ---------------------------------------------------------------------------------------------- ladder

class SlidingWindow:
    """Samples of the last ``window_s`` seconds (at most ``maxlen``); percentiles by ``stats.percentile``."""

    def __init__(self, window_s: float, maxlen: int = 4096) -> None:
        self.window_s = window_s
        self._items: deque[tuple[float, float]] = deque(maxlen=maxlen)
        self._lock = threading.Lock()

    def add(self, value: float, now: float | None = None) -> None:
        with self._lock:
            self._items.append((time.monotonic() if now is None else now, value))

    def values(self, now: float | None = None) -> list[float]:
        now = time.monotonic() if now is None else now
        with self._lock:
            while self._items and now - self._items[0][0] > self.window_s:
                self._items.popleft()
            return [v for _, v in self._items]

    def percentile(self, q: float, now: float | None = None) -> tuple[float | None, int]:
        vals = self.values(now)
        if not vals:
            return None, 0
        return percentile(vals, q), len(vals)


class DegradeLadder:
    """Maps measured P95 queue wait and TTFT against their SLOs to a level 0–5."""

    def __init__(self, cfg: AdmissionConfig) -> None:
        self.cfg = cfg
        self.queue_wait = SlidingWindow(cfg.window_s)
        self.ttft = SlidingWindow(cfg.window_s)

    def record_queue_wait(self, ms: float, now: float | None = None) -> None:
        self.queue_wait.add(ms, now)

    def record_ttft(self, ms: float, now: float | None = None) -> None:
        self.ttft.add(ms, now)

    def pressure(self, now: float | None = None) -> float:
        """max(P95 wait / SLO, P95 TTFT / SLO); 0 while a window has fewer than ``min_samples``."""
        ratios = [0.0]
        for win, slo in ((self.queue_wait, self.cfg.slo_queue_wait_ms), (self.ttft, self.cfg.slo_ttft_p95_ms)):
            p95, n = win.percentile(95, now)
            if p95 is not None and n >= self.cfg.min_samples:
                ratios.append(p95 / slo)
        return max(ratios)

    def level(self, now: float | None = None) -> int:
        r = self.pressure(now)
        return sum(1 for t in self.cfg.thresholds if r >= t)


# --------------------------------------------------------------------------------------------- limiter

@dataclass
class Ticket:
    """What admission granted: the degrade level to apply and how long the request queued."""

    tenant: str
    priority: str
    degrade_level: int
    queue_wait_ms: float
    decision: str  # "admitted" or "queued"


@dataclass(order=True)
class _Waiter:
    prio: int
    seq: int
    future: asyncio.Future = None  # type: ignore[assignment]


class PriorityLimiter:
    """At most ``slots`` holders; waiters in a bounded heap, interactive first; batch may hold at most
    ``batch_slots``. Bound to the event loop that uses it (one per app).

    It keeps an exponentially weighted mean of how long a slot is held, to estimate a newcomer's wait
    (:meth:`expected_wait_s`). Holders are matched to releases first-in first-out, which is exact for one
    slot and close enough for several (requests of one service take similar times).

    ``clock`` (seconds, monotonic) measures hold times; tests inject one to step time by hand."""

    HOLD_EWMA_ALPHA = 0.2

    def __init__(self, slots: int, queue_size: int, batch_slots: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.slots = slots
        self.queue_size = queue_size
        self.batch_slots = max(1, min(batch_slots, slots))
        self.active = 0
        self.active_batch = 0
        self.hold_ewma_s: float | None = None  # None until a slot has been released once
        self._starts: deque[float] = deque()
        self._heap: list[_Waiter] = []
        self._seq = itertools.count()

    @property
    def depth(self) -> int:
        return sum(1 for w in self._heap if not w.future.done())

    def would_wait(self, prio: int) -> bool:
        """True when a request of this priority could not take a slot right now."""
        return not self._can_run(prio) or any(w.prio <= prio and not w.future.done() for w in self._heap)

    def expected_wait_s(self, prio: int, now: float | None = None) -> float:
        """Estimated wait for a slot. Each holder is expected to hold for the mean hold time; with ``n``
        requests ahead in the queue, the newcomer gets the ``n % slots``-th slot to free up, ``n // slots``
        mean hold times later. 0 when a slot is free or nothing has been measured yet."""
        if self.hold_ewma_s is None or not self.would_wait(prio):
            return 0.0
        now = self.clock() if now is None else now
        ahead = sum(1 for w in self._heap if w.prio <= prio and not w.future.done())
        left = sorted(max(0.0, self.hold_ewma_s - (now - t)) for t in self._starts)
        left += [0.0] * (self.slots - len(left))
        rounds, j = divmod(ahead, self.slots)
        return left[j] + rounds * self.hold_ewma_s

    def _can_run(self, prio: int) -> bool:
        return self.active < self.slots and (prio == 0 or self.active_batch < self.batch_slots)

    def _grant(self, prio: int) -> None:
        self._starts.append(self.clock())
        self.active += 1
        if prio:
            self.active_batch += 1

    async def acquire(self, prio: int, timeout_s: float) -> bool:
        """Take a slot; returns True if it had to queue. Raises AdmissionError when full or timed out."""
        if self._can_run(prio) and not any(w.prio <= prio and not w.future.done() for w in self._heap):
            self._grant(prio)
            return False
        if self.depth >= self.queue_size:
            raise AdmissionError(f"admission queue is full ({self.queue_size} waiting)",
                                 retry_after_s=1.0, fix="retry after the Retry-After delay")
        w = _Waiter(prio, next(self._seq), asyncio.get_running_loop().create_future())
        heapq.heappush(self._heap, w)
        try:
            await asyncio.wait_for(asyncio.shield(w.future), timeout_s)
        except (asyncio.TimeoutError, asyncio.CancelledError) as err:
            if w.future.done() and not w.future.cancelled():
                self.release(prio)  # granted just as we gave up: hand the slot on
            else:
                w.future.cancel()
            self._drop_done()
            if isinstance(err, asyncio.TimeoutError):
                raise AdmissionError(f"waited {timeout_s:.1f}s in the admission queue without a slot",
                                     retry_after_s=1.0, fix="retry later or lower the request rate") from None
            raise
        return True

    def _drop_done(self) -> None:
        if any(w.future.done() for w in self._heap):
            self._heap = [w for w in self._heap if not w.future.done()]
            heapq.heapify(self._heap)

    def release(self, prio: int) -> None:
        if self._starts:
            held = self.clock() - self._starts.popleft()
            a = self.HOLD_EWMA_ALPHA
            self.hold_ewma_s = held if self.hold_ewma_s is None else (1 - a) * self.hold_ewma_s + a * held
        self.active -= 1
        if prio:
            self.active_batch -= 1
        self._wake()

    def _wake(self) -> None:
        skipped: list[_Waiter] = []
        while self._heap and self.active < self.slots:
            w = heapq.heappop(self._heap)
            if w.future.done():
                continue
            if not self._can_run(w.prio):  # batch over its share: let interactive waiters behind it go
                skipped.append(w)
                continue
            self._grant(w.prio)
            w.future.set_result(True)
        for w in skipped:
            heapq.heappush(self._heap, w)


class AdmissionController:
    """Everything a request passes before work starts. One per app (per event loop).

    ``clock`` (seconds, monotonic) times queue waits and slot holds; tests inject one."""

    def __init__(self, cfg: AdmissionConfig, limits: LimitsConfig, tenants: list[TenantConfig],
                 buckets: Buckets | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.cfg = cfg
        self.clock = clock
        self.tenants = {t.name: t for t in tenants}
        self.buckets = buckets if buckets is not None else make_buckets(cfg)
        self.ladder = DegradeLadder(cfg)
        slots = limits.max_concurrent
        self.limiter = PriorityLimiter(slots, cfg.queue_size, max(1, int(slots * cfg.batch_share)), clock)

    @property
    def level(self) -> int:
        return self.ladder.level() if self.cfg.enabled else 0

    @property
    def queue_depth(self) -> int:
        return self.limiter.depth

    def check_rate(self, tenant: str, est_tokens: int) -> None:
        """Take one request and ``est_tokens`` tokens from the tenant's buckets, or raise 429."""
        t = self.tenants.get(tenant)
        if t is None:
            raise AdmissionError(f"unknown tenant {tenant!r}", retry_after_s=60.0,
                                 fix="add the tenant to service.tenants")
        ok, retry = self.buckets.take(f"{tenant}:req", 1, t.requests_per_s, t.burst)
        if not ok:
            raise AdmissionError(f"tenant {tenant!r} is over {t.requests_per_s:g} requests/s",
                                 retry_after_s=retry, fix="slow down or raise requests_per_s for the tenant")
        ok, retry = self.buckets.take(f"{tenant}:tok", max(1, est_tokens), t.tokens_per_s, t.token_burst)
        if not ok:
            raise AdmissionError(f"tenant {tenant!r} is over {t.tokens_per_s:g} tokens/s",
                                 retry_after_s=retry, fix="slow down or raise tokens_per_s for the tenant")

    def settle(self, tenant: str, *, charged: int, actual: int) -> None:
        """After the answer: give back what the estimate charged over the actual tokens (or take the rest)."""
        t = self.tenants.get(tenant)
        if t is None or not self.cfg.enabled:
            return
        charged = min(max(1, charged), t.token_burst)
        delta = charged - max(0, actual)
        if delta:
            self.buckets.adjust(f"{tenant}:tok", float(delta), t.tokens_per_s, t.token_burst)

    def check(self, tenant: str, priority: str = "interactive", est_tokens: int = 1) -> None:
        """The instant refusals: unknown priority, shed by level, rate limits, full queue (429)."""
        if priority not in PRIORITIES:
            raise AdmissionError(f"unknown priority {priority!r}", retry_after_s=0.0,
                                 fix=f"use one of {sorted(PRIORITIES)}")
        if not self.cfg.enabled:
            return
        level, prio = self.level, PRIORITIES[priority]
        # Shedding refuses what would have to queue; a free slot is still used, so the measurements that
        # drive the ladder keep coming and throughput stays at capacity while the excess gets a prompt 429.
        if (level >= REJECT or (prio and level >= self.cfg.batch_reject_level)) and self.limiter.would_wait(prio):
            raise AdmissionError(f"overloaded (degrade level {level}); request shed",
                                 retry_after_s=self.cfg.reject_retry_after_s, fix="retry after Retry-After")
        self.check_rate(tenant, est_tokens)
        if self.limiter.depth >= self.limiter.queue_size:
            raise AdmissionError(f"admission queue is full ({self.limiter.queue_size} waiting)",
                                 retry_after_s=self.cfg.reject_retry_after_s, fix="retry after Retry-After")
        if self.cfg.reject_expected_wait:
            wait = self.limiter.expected_wait_s(prio)
            if wait > self.cfg.queue_timeout_s:
                raise AdmissionError(f"estimated queue wait {wait * 1000:.0f} ms is over the queue timeout "
                                     f"({self.cfg.queue_timeout_s * 1000:.0f} ms)",
                                     retry_after_s=self.cfg.reject_retry_after_s, fix="retry after Retry-After")

    @asynccontextmanager
    async def admit(self, tenant: str, *, priority: str = "interactive", est_tokens: int = 1,
                    checked: bool = False) -> AsyncIterator[Ticket]:
        """Hold a slot for the body of the ``async with``; yields the :class:`Ticket`.

        ``checked=True``: :meth:`check` already ran for this request (e.g. before an SSE stream began).
        """
        if not checked:
            self.check(tenant, priority, est_tokens)
        if not self.cfg.enabled:
            yield Ticket(tenant, priority, 0, 0.0, "admitted")
            return
        prio = PRIORITIES[priority]
        t0 = self.clock()
        queued = await self.limiter.acquire(prio, self.cfg.queue_timeout_s)
        wait_ms = (self.clock() - t0) * 1000
        self.ladder.record_queue_wait(wait_ms)
        try:
            yield Ticket(tenant, priority, self.level, wait_ms, "queued" if queued else "admitted")
        finally:
            self.limiter.release(prio)

    def record_ttft(self, ms: float | None) -> None:
        """Feed a TTFT measured from arrival (queue wait included) into the ladder."""
        if ms is not None:
            self.ladder.record_ttft(ms)


__all__ = ["LEVEL_NAMES", "PRIORITIES", "AdmissionController", "Buckets", "DegradeLadder", "MemoryBuckets",
           "PriorityLimiter", "RedisBuckets", "SlidingWindow", "Ticket", "make_buckets"]

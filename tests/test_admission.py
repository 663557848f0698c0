"""Admission control: token buckets (memory and a real redis-server), priority queue, degradation ladder."""

from __future__ import annotations

import asyncio

import pytest
import redis

from ragbudget.stages.admission import (AdmissionController, DegradeLadder, MemoryBuckets, PriorityLimiter,
                                 RedisBuckets, SlidingWindow)
from ragbudget.config import AdmissionConfig, LimitsConfig, TenantConfig
from ragbudget.errors import AdmissionError


def _controller(**adm) -> AdmissionController:
    tenants = [TenantConfig(name="a", requests_per_s=1000, burst=1000),
               TenantConfig(name="slow", requests_per_s=0.5, burst=2, tokens_per_s=100, token_burst=150)]
    return AdmissionController(AdmissionConfig(**adm), LimitsConfig(max_concurrent=2), tenants)


# ---------------------------------------------------------------------------------------------- buckets

@pytest.mark.parametrize("kind", ["memory", "redis"])
def test_bucket_allows_burst_then_refuses_with_retry_after(kind, redis_server):  # noqa: F811
    if kind == "memory":
        b = MemoryBuckets()
    else:
        redis.Redis.from_url(redis_server).flushdb()
        b = RedisBuckets(redis_server, prefix="t1:")
    results = [b.take("k", 1, rate=0.1, burst=3) for _ in range(5)]
    assert [ok for ok, _ in results] == [True, True, True, False, False]
    retry = results[3][1]
    assert 0 < retry <= 10.0  # one token at 0.1/s takes at most 10 s
    # another key has its own bucket
    assert b.take("other", 1, rate=0.1, burst=3)[0]


def test_bucket_clamps_cost_above_burst():
    b = MemoryBuckets()
    assert b.take("k", 500, rate=1, burst=100) == (True, 0.0)  # full bucket admits one oversize request
    ok, retry = b.take("k", 500, rate=1, burst=100)
    assert not ok and retry > 90


def test_redis_bucket_is_shared_between_replicas(redis_server):  # noqa: F811
    redis.Redis.from_url(redis_server).flushdb()
    r1, r2 = RedisBuckets(redis_server, prefix="shared:"), RedisBuckets(redis_server, prefix="shared:")
    taken = [(r1 if i % 2 else r2).take("tenant:req", 1, rate=0.01, burst=4)[0] for i in range(8)]
    assert taken.count(True) == 4  # one limit across both "replicas", not 4 each


def test_redis_bucket_falls_back_when_redis_is_down():
    b = RedisBuckets("redis://127.0.0.1:1/0", timeout_s=0.05)  # nothing listens on port 1
    assert b.take("k", 1, rate=1, burst=1)[0]
    assert not b.take("k", 1, rate=0.01, burst=1)[0]  # the in-process fallback still limits
    assert b.fallbacks == 2


async def test_controller_rate_limit_per_tenant():
    c = _controller()
    for _ in range(2):
        async with c.admit("slow"):
            pass
    with pytest.raises(AdmissionError) as ei:
        async with c.admit("slow"):
            pass
    assert ei.value.retry_after_s > 0
    async with c.admit("a") as ticket:  # other tenant unaffected
        assert ticket.decision == "admitted" and ticket.degrade_level == 0


async def test_controller_token_bucket():
    c = _controller()
    async with c.admit("slow", est_tokens=120):
        pass
    with pytest.raises(AdmissionError, match="tokens/s"):
        async with c.admit("slow", est_tokens=120):
            pass


async def test_unknown_tenant_and_priority_are_refused():
    c = _controller()
    with pytest.raises(AdmissionError, match="unknown tenant"):
        async with c.admit("nobody"):
            pass
    with pytest.raises(AdmissionError, match="unknown priority"):
        async with c.admit("a", priority="urgent"):
            pass


# ---------------------------------------------------------------------------------------------- limiter

async def test_limiter_serves_interactive_before_batch_and_is_bounded():
    lim = PriorityLimiter(slots=1, queue_size=3, batch_slots=1)
    assert await lim.acquire(0, 5) is False
    order: list[str] = []

    async def waiter(prio: int, name: str) -> None:
        await lim.acquire(prio, 5)
        order.append(name)
        lim.release(prio)

    tasks = [asyncio.create_task(waiter(1, "batch1"))]
    await asyncio.sleep(0)
    tasks.append(asyncio.create_task(waiter(1, "batch2")))
    await asyncio.sleep(0)
    tasks.append(asyncio.create_task(waiter(0, "inter")))
    await asyncio.sleep(0)
    assert lim.depth == 3
    with pytest.raises(AdmissionError, match="queue is full"):
        await lim.acquire(0, 5)
    lim.release(0)
    await asyncio.gather(*tasks)
    assert order == ["inter", "batch1", "batch2"]
    assert lim.active == 0 and lim.depth == 0


async def test_limiter_batch_share_leaves_slots_for_interactive():
    lim = PriorityLimiter(slots=2, queue_size=4, batch_slots=1)
    assert await lim.acquire(1, 1) is False
    second_batch = asyncio.create_task(lim.acquire(1, 5))
    await asyncio.sleep(0)
    assert lim.depth == 1  # batch waits: its share is used although a slot is free
    assert await lim.acquire(0, 1) is False  # interactive takes the free slot at once
    lim.release(1)
    assert await second_batch is True
    assert lim.active == 2 and lim.active_batch == 1


async def test_limiter_timeout_and_cancel_leave_no_leak():
    lim = PriorityLimiter(slots=1, queue_size=4, batch_slots=1)
    await lim.acquire(0, 1)
    with pytest.raises(AdmissionError, match="waited"):
        await lim.acquire(0, 0.05)
    t = asyncio.create_task(lim.acquire(0, 5))
    await asyncio.sleep(0)
    assert lim.depth == 1
    t.cancel()
    with pytest.raises(asyncio.CancelledError):
        await t
    assert lim.depth == 0
    lim.release(0)
    assert lim.active == 0
    assert await lim.acquire(0, 1) is False


class StepClock:
    """A monotonic clock the test moves by hand: hold and wait times are exact, not measured."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, s: float) -> None:
        self.now += s


async def test_expected_wait_refuses_at_once_what_would_time_out():
    clock = StepClock()
    tenants = [TenantConfig(name="a", requests_per_s=1000, burst=1000)]
    c = AdmissionController(AdmissionConfig(queue_size=8, queue_timeout_s=0.03), LimitsConfig(max_concurrent=2),
                            tenants, clock=clock)
    assert c.limiter.expected_wait_s(0) == 0.0  # nothing measured yet: no estimate, nothing refused
    for _ in range(3):  # slots are held exactly 60 ms each
        async with c.admit("a"), c.admit("a"):
            clock.advance(0.06)
    assert c.limiter.hold_ewma_s == pytest.approx(0.06)
    async with c.admit("a"), c.admit("a"):  # both slots just taken: 60 ms left > 30 ms timeout
        assert c.limiter.expected_wait_s(0) == pytest.approx(0.06)
        # check() is synchronous: the refusal comes before anything waits or queues
        with pytest.raises(AdmissionError, match="estimated queue wait 60 ms"):
            c.check("a")
        assert c.queue_depth == 0
        c.cfg = c.cfg.model_copy(update={"queue_timeout_s": 5.0})  # a wait the caller can afford: queue
        waiter = asyncio.create_task(_hold_once(c))
        for _ in range(5):
            await asyncio.sleep(0)
        assert c.queue_depth == 1
        clock.advance(0.02)
        # the second slot to free up: both holders have 40 ms left, the one queued takes the first
        assert c.limiter.expected_wait_s(0) == pytest.approx(0.04)
        assert c.limiter.expected_wait_s(0, now=clock.now + 1e9) == 0.0  # holders long past the mean
        clock.advance(0.01)
    ticket = await waiter
    assert ticket.decision == "queued" and ticket.queue_wait_ms == pytest.approx(30.0)  # queued for 20 + 10 ms
    c.cfg = c.cfg.model_copy(update={"queue_timeout_s": 0.001, "reject_expected_wait": False})
    async with c.admit("a"), c.admit("a"):
        c.check("a")  # switched off: only the queue timeout refuses


async def _hold_once(c: AdmissionController):
    async with c.admit("a") as t:
        return t


async def test_controller_queues_when_slots_are_taken():
    c = _controller(queue_size=1, queue_timeout_s=5)
    release = asyncio.Event()
    tickets = []

    async def hold() -> None:
        async with c.admit("a") as t:
            tickets.append(t)
            await release.wait()

    holders = [asyncio.create_task(hold()) for _ in range(3)]  # 2 slots + 1 queued
    for _ in range(10):
        await asyncio.sleep(0)
    assert c.queue_depth == 1
    with pytest.raises(AdmissionError, match="queue is full"):
        async with c.admit("a"):
            pass
    release.set()
    await asyncio.gather(*holders)
    assert sorted(t.decision for t in tickets) == ["admitted", "admitted", "queued"]
    assert c.limiter.active == 0


# ----------------------------------------------------------------------------------------------- ladder

def test_sliding_window_forgets_old_samples():
    w = SlidingWindow(window_s=10)
    for i in range(20):
        w.add(float(i), now=100.0 + i)
    assert w.percentile(95, now=119.0) == (18.5, 11)  # samples at t >= 109 remain; linear interpolation
    assert w.percentile(95, now=1000.0) == (None, 0)


@pytest.mark.parametrize("ttft_ms,level", [(1000, 0), (2100, 1), (2600, 2), (3500, 3), (5000, 4), (7000, 5)])
def test_ladder_levels_follow_ttft_p95(ttft_ms, level):
    lad = DegradeLadder(AdmissionConfig(slo_ttft_p95_ms=2000, min_samples=5))
    for _ in range(10):
        lad.record_ttft(ttft_ms, now=50.0)
    assert lad.level(now=51.0) == level
    assert lad.level(now=500.0) == 0  # the window moved past the slow period


def test_ladder_needs_min_samples_and_uses_queue_wait():
    lad = DegradeLadder(AdmissionConfig(slo_queue_wait_ms=100, min_samples=5))
    for _ in range(4):
        lad.record_queue_wait(1000, now=1.0)
    assert lad.level(now=1.0) == 0
    lad.record_queue_wait(1000, now=1.0)
    assert lad.level(now=1.0) == 5


async def test_controller_sheds_at_level_5_and_batch_earlier():
    c = _controller(slo_ttft_p95_ms=100, min_samples=1, reject_retry_after_s=3, batch_reject_level=3)
    for _ in range(5):
        c.record_ttft(160)  # ratio 1.6 → level 3
    assert c.level == 3
    async with c.admit("a") as t:
        assert t.degrade_level == 3
    async with c.admit("a"):  # one slot busy; batch work would have to wait for its share → shed
        async with c.admit("a", priority="batch"):  # the other slot is free: batch may use it
            pass
        async with c.admit("a"):
            with pytest.raises(AdmissionError, match="shed"):
                async with c.admit("a", priority="batch"):
                    pass
    for _ in range(50):
        c.record_ttft(1000)
    assert c.level == 5
    async with c.admit("a"), c.admit("a") as t:  # free slots are still used at level 5 ...
        assert t.degrade_level == 5
        with pytest.raises(AdmissionError) as ei:  # ... but nothing may queue
            async with c.admit("a"):
                pass
    assert ei.value.retry_after_s == 3 and c.queue_depth == 0


async def test_default_sheds_batch_as_soon_as_interactive_misses_its_slo():
    c = _controller(slo_ttft_p95_ms=100, min_samples=1)
    for _ in range(5):
        c.record_ttft(110)  # P95 just over the SLO → level 1
    assert c.level == 1
    async with c.admit("a"), c.admit("a", priority="batch"):  # free slots are still used by batch ...
        with pytest.raises(AdmissionError, match="shed"):  # ... but batch may not queue at level 1
            c.check("a", priority="batch")
        c.check("a")  # interactive may


async def test_disabled_controller_admits_everything():
    c = _controller(enabled=False)
    for _ in range(20):
        async with c.admit("slow") as t:
            assert t.degrade_level == 0


def test_config_rejects_bad_thresholds():
    with pytest.raises(ValueError):
        AdmissionConfig(thresholds=[2.0, 1.0, 3.0, 4.0, 5.0])


async def test_two_replicas_share_one_tenant_limit_through_redis(redis_server):  # noqa: F811
    redis.Redis.from_url(redis_server).flushdb()
    cfg = AdmissionConfig(backend="redis", redis_url=redis_server, key_prefix="replicas:")
    tenants = [TenantConfig(name="t", requests_per_s=0.01, burst=3)]
    replicas = [AdmissionController(cfg, LimitsConfig(), tenants) for _ in range(2)]
    admitted = 0
    for i in range(6):
        try:
            async with replicas[i % 2].admit("t"):
                admitted += 1
        except AdmissionError:
            pass
    assert admitted == 3

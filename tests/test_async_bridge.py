"""The one sync→async bridge (ragbudget.kernels.async_bridge): ready items arrive as one list, in order; errors come
after the items before them; leaving early stops and closes the producer in its thread."""

from __future__ import annotations

import asyncio
import threading

import pytest

from ragbudget.kernels.async_bridge import iterate_in_thread


async def test_items_ready_together_arrive_as_one_list():
    pushed, release = threading.Event(), threading.Event()

    def produce(cancel):
        yield from range(50)
        pushed.set()
        release.wait(10)
        yield 50

    batches = iterate_in_thread(produce)
    first = asyncio.ensure_future(batches.__anext__())
    await asyncio.sleep(0)  # the bridge starts its worker and waits for a wake-up
    assert pushed.wait(10)  # hold the event loop while the worker pushes all 50
    assert await first == list(range(50))  # one wake-up, one list: not one step per item
    release.set()
    assert [b async for b in batches] == [[50]]


async def test_an_error_follows_the_items_before_it():
    def produce(cancel):
        yield "a"
        yield "b"
        raise ValueError("engine failed")

    got = []
    with pytest.raises(ValueError, match="engine failed"):
        async for batch in iterate_in_thread(produce):
            got += batch
    assert got == ["a", "b"]


async def test_leaving_early_cancels_and_closes_the_producer_in_its_thread():
    closed, seen_cancel = threading.Event(), threading.Event()
    threads = []

    def produce(cancel):
        try:
            i = 0
            while not cancel.wait(0.001):
                yield i
                i += 1
            seen_cancel.set()
        finally:
            threads.append(threading.current_thread().name)
            closed.set()

    batches = iterate_in_thread(produce, name="bridge-test")
    async for batch in batches:
        assert batch
        break
    await batches.aclose()
    assert await asyncio.to_thread(closed.wait, 10)  # the generator's finally ran: it stopped producing
    assert threads == ["bridge-test"]  # in the worker, not at garbage collection on the loop


async def test_the_wrapper_runs_the_worker():
    calls = []

    def wrap(fn):
        def run():
            calls.append("wrapped")
            fn()
        return run

    assert [b async for b in iterate_in_thread(lambda cancel: iter([1, 2]), wrap=wrap)] in ([[1, 2]], [[1], [2]])
    assert calls == ["wrapped"]

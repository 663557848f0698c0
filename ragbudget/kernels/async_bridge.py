"""The one bridge from blocking iterators to asyncio.

:func:`iterate_in_thread` runs a blocking iterator in a worker thread and yields, on the event loop, every
item that is ready as one list (at least one item). The worker never wakes the loop per item: it appends to a
buffer and schedules one wake-up when the buffer goes from empty to not empty, so a burst of items (an
extractive answer, a cache hit, a fast engine) reaches the consumer in one step, and one send for a server.

Leaving early (``break``, ``aclose``, a client disconnect) sets the ``cancel`` event the producer receives
and closes the iterator in the worker, so a generation stops between tokens instead of running on.
Exceptions raised by the producer are re-raised in the consumer, after the items that came before them.
"""

from __future__ import annotations

import asyncio
import threading
from typing import AsyncGenerator, Callable, Iterable, TypeVar

T = TypeVar("T")
Wrap = Callable[[Callable[[], None]], Callable[[], None]]

_END = object()


class _Raised:
    def __init__(self, err: BaseException) -> None:
        self.err = err


def _no_wrap(fn: Callable[[], None]) -> Callable[[], None]:
    return fn


async def iterate_in_thread(produce: Callable[[threading.Event], Iterable[T]], *, name: str = "ragbudget-bridge",
                            wrap: Wrap = _no_wrap) -> AsyncGenerator[list[T], None]:
    """Yield lists of the items ``produce(cancel)`` iterates in a worker thread. ``wrap`` wraps the worker's
    body (e.g. a tracer binding the caller's span as the parent)."""
    loop = asyncio.get_running_loop()
    cancel = threading.Event()
    wake = asyncio.Event()
    lock = threading.Lock()
    pending: list[object] = []
    scheduled = False

    def push(item: object) -> bool:
        nonlocal scheduled
        with lock:
            pending.append(item)
            if scheduled:
                return True
            scheduled = True
        try:
            loop.call_soon_threadsafe(wake.set)
            return True
        except RuntimeError:  # the consumer's event loop is gone: stop producing
            cancel.set()
            return False

    def work() -> None:
        it = iter(produce(cancel))
        try:
            for item in it:
                if not push(item) or cancel.is_set():
                    break
        except BaseException as err:  # noqa: BLE001 - re-raised in the consumer
            push(_Raised(err))
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                try:
                    close()  # a generator's finally runs here, in the worker, not at garbage collection
                except Exception:  # noqa: BLE001 - the consumer has what it needs; closing is best effort
                    pass
        push(_END)

    threading.Thread(target=wrap(work), name=name, daemon=True).start()
    try:
        while True:
            await wake.wait()
            wake.clear()
            with lock:
                items, pending[:] = list(pending), []
                scheduled = False
            ready: list[T] = []
            for item in items:
                if item is _END or isinstance(item, _Raised):
                    if ready:
                        yield ready
                    if isinstance(item, _Raised):
                        raise item.err
                    return
                ready.append(item)  # type: ignore[arg-type]
            if ready:
                yield ready
    finally:
        cancel.set()

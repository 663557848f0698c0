"""In-process backend: LRU with per-entry TTL on the monotonic clock, entry and value-size bounds."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Callable

from .base import BackendBase


class MemoryBackend(BackendBase):
    """Thread-safe LRU + TTL store. Expiry uses ``time.monotonic`` so wall-clock jumps do not matter."""

    name = "memory"

    def __init__(self, *, max_entries: int = 100_000, max_value_bytes: int = 1_000_000,
                 default_ttl_s: float = 86400.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries = int(max_entries)
        super().__init__(max_value_bytes=max_value_bytes, default_ttl_s=default_ttl_s)
        self._clock = clock
        self._data: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> bytes | None:
        self.stats.incr("gets")
        with self._lock:
            item = self._data.get(key)
            if item is None:
                return None
            expires, value = item
            if expires <= self._clock():
                del self._data[key]
                self.stats.incr("expired")
                return None
            self._data.move_to_end(key)
            return value

    def set(self, key: str, value: bytes, ttl_s: float | None = None) -> bool:
        ttl = self.admit(key, value, ttl_s)
        if ttl is None:
            return False
        with self._lock:
            self._data[key] = (self._clock() + ttl, bytes(value))
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)
                self.stats.incr("evictions")
        self.stats.incr("sets")
        return True

    def delete(self, key: str) -> None:
        with self._lock:
            self._data.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def close(self) -> None:
        self.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)

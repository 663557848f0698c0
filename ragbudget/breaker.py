"""Circuit breaker per backend: stop calling a failing backend, try again after a pause."""

from __future__ import annotations

import threading
import time
from typing import Callable

__all__ = ["CircuitBreaker"]


class CircuitBreaker:
    """Closed → open after ``failures`` consecutive failures → half-open after ``reset_s`` (one trial call:
    success closes it, failure opens it again)."""

    def __init__(self, failures: int = 3, reset_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.failures, self.reset_s, self._clock = failures, reset_s, clock
        self._count = 0
        self._opened_at: float | None = None
        self._trial = False
        self._lock = threading.Lock()

    @property
    def state(self) -> str:
        if self._opened_at is None:
            return "closed"
        return "half_open" if self._clock() - self._opened_at >= self.reset_s else "open"

    def allow(self) -> bool:
        with self._lock:
            st = self.state
            if st == "closed":
                return True
            if st == "half_open" and not self._trial:
                self._trial = True
                return True
            return False

    def success(self) -> None:
        with self._lock:
            self._count, self._opened_at, self._trial = 0, None, False

    def failure(self) -> None:
        with self._lock:
            self._count += 1
            if self._trial or self._count >= self.failures:
                self._opened_at, self._trial = self._clock(), False

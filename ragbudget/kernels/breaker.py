"""Circuit breaker per backend: stop calling a failing backend, try again after a pause."""

from __future__ import annotations

import threading
import time
from typing import Callable

__all__ = ["CircuitBreaker", "ProbedBreaker"]


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


class ProbedBreaker(CircuitBreaker):
    """A breaker for a shared service (Redis) whose half-open trial is a background ``probe``, so that
    no request ever waits on a backend that is down or frozen.

    Closed: requests call the backend; ``failures`` consecutive failures (timeouts) open it. Open: every
    request skips the backend at once (``allow()`` is False, no I/O). After ``reset_s`` a single probe runs
    in a daemon thread; while it runs requests still skip. The probe returning closes the breaker; the
    probe raising opens it for another ``reset_s``. ``probes`` counts probes started (tests and metrics).
    """

    def __init__(self, probe: Callable[[], object], failures: int = 1, reset_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(failures, reset_s, clock)
        self._probe = probe
        self._probe_thread: threading.Thread | None = None
        self.probes = 0

    def allow(self) -> bool:
        st = self.state
        if st == "closed":
            return True
        if st == "half_open":
            self._start_probe()
        return False

    def _start_probe(self) -> None:
        with self._lock:
            if self._probe_thread is not None and self._probe_thread.is_alive():
                return
            self.probes += 1
            self._probe_thread = threading.Thread(target=self._run_probe, daemon=True, name="ragbudget-probe")
            self._probe_thread.start()

    def _run_probe(self) -> None:
        try:
            self._probe()
        except Exception:  # noqa: BLE001 - any failure keeps the backend out
            with self._lock:
                self._count, self._opened_at, self._trial = self.failures, self._clock(), False
            return
        self.success()

    def wait_probe(self, timeout_s: float = 5.0) -> None:
        """Block until a running probe has finished (tests)."""
        t = self._probe_thread
        if t is not None:
            t.join(timeout_s)

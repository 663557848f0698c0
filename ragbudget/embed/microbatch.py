"""Embedding micro-batching for concurrent queries.

:class:`MicroBatcher` wraps an :class:`~ragbudget.embed.encoder.Embedder`. Concurrent :meth:`embed_query` calls
are collected by one worker thread: it takes everything already waiting (up to ``max_batch``), then waits
up to ``max_wait_ms`` for more while the batch is not full, and embeds the batch in one forward pass. A
lone caller never waits (``max_wait_ms`` only applies while other callers are in flight). Identical texts
in a batch are embedded once. ``embed`` (documents) passes straight through.

Defaults come from ``benchmarks/microbatch.py`` (BENCHMARKS.md, issue 7).
"""

from __future__ import annotations

import queue
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..config import MicroBatchConfig
from .encoder import Embedder
from ..errors import ConfigError

_STOP = object()


@dataclass
class BatchStats:
    requests: int = 0
    batches: int = 0
    max_batch_seen: int = 0

    @property
    def mean_batch(self) -> float:
        return self.requests / self.batches if self.batches else 0.0


class MicroBatcher:
    """Thread-safe batching wrapper around an embedder (same ``embed`` / ``embed_query`` interface)."""

    def __init__(self, embedder: Embedder, max_batch: int = 16, max_wait_ms: float = 2.0,
                 recent: int = 1024) -> None:
        if max_batch < 1:
            raise ConfigError(f"embedding.microbatch.max_batch must be ≥ 1, got {max_batch}",
                              fix="set embedding.microbatch.max_batch to 1 or more")
        if max_wait_ms < 0:
            raise ConfigError(f"embedding.microbatch.max_wait_ms must be ≥ 0, got {max_wait_ms}",
                              fix="set embedding.microbatch.max_wait_ms to 0 or more")
        self.inner = embedder
        self.max_batch = max_batch
        self.max_wait_s = max_wait_ms / 1000.0
        self.stats = BatchStats()
        self._q: queue.Queue[Any] = queue.Queue()
        self._lock = threading.Lock()
        self._in_flight = 0
        self._thread: threading.Thread | None = None
        self._closed = False
        self._recent: OrderedDict[str, np.ndarray] = OrderedDict()
        self._recent_max = recent

    @classmethod
    def from_config(cls, embedder: Embedder, cfg: MicroBatchConfig) -> "MicroBatcher":
        return cls(embedder, max_batch=cfg.max_batch, max_wait_ms=cfg.max_wait_ms)

    # --- delegation: model_id, dim, warm_up, cache… behave like the wrapped embedder
    @property
    def model_id(self) -> str:  # explicit, so the Embedder Protocol sees it without __getattr__
        return self.inner.model_id

    @property
    def dim(self) -> int:
        return self.inner.dim

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.embed(texts)

    def embed_query(self, text: str) -> np.ndarray:
        """One query vector; blocks until the batch holding it is embedded."""
        with self._lock:
            if self._closed:
                raise RuntimeError("MicroBatcher is closed")
            hit = self._recent.get(text)
            if hit is not None:
                self._recent.move_to_end(text)
                return hit
            self._in_flight += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ragbudget-microbatch", daemon=True)
                self._thread.start()
        fut: Future[np.ndarray] = Future()
        self._q.put((text, fut))
        try:
            return fut.result()
        finally:
            with self._lock:
                self._in_flight -= 1

    def close(self) -> None:
        with self._lock:
            self._closed = True
            t = self._thread
        if t is not None:
            self._q.put(_STOP)
            t.join(timeout=5)

    # --- worker
    def _collect(self, first: Any) -> tuple[list[tuple[str, Future]], bool]:
        batch = [first]
        stop = False
        while len(batch) < self.max_batch:  # everything already queued
            try:
                item = self._q.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                return batch, True
            batch.append(item)
        deadline = time.perf_counter() + self.max_wait_s
        while len(batch) < self.max_batch and self.max_wait_s > 0:
            with self._lock:
                others = self._in_flight > len(batch)
            remaining = deadline - time.perf_counter()
            if not others or remaining <= 0:
                break
            try:
                item = self._q.get(timeout=remaining)
            except queue.Empty:
                break
            if item is _STOP:
                stop = True
                break
            batch.append(item)
        return batch, stop

    def _run(self) -> None:
        while True:
            first = self._q.get()
            if first is _STOP:
                return
            batch, stop = self._collect(first)
            texts = list(dict.fromkeys(t for t, _ in batch))
            try:
                vecs = self.inner.embed_query(texts[0])[None, :] if len(texts) == 1 else self.inner.embed(texts)
            except BaseException as err:  # noqa: BLE001 - every waiter gets the error
                for _, fut in batch:
                    fut.set_exception(err)
            else:
                by_text = {}
                for t, v in zip(texts, vecs):
                    v = np.array(v, dtype=np.float32)
                    v.setflags(write=False)
                    by_text[t] = v
                with self._lock:
                    self.stats.requests += len(batch)
                    self.stats.batches += 1
                    self.stats.max_batch_seen = max(self.stats.max_batch_seen, len(batch))
                    for t, v in by_text.items():
                        self._recent[t] = v
                        if len(self._recent) > self._recent_max:
                            self._recent.popitem(last=False)
                for t, fut in batch:
                    fut.set_result(by_text[t])
            if stop:
                return


__all__ = ["MicroBatcher", "BatchStats"]

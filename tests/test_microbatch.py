"""Micro-batcher over the real MiniLM embedder: same vectors, real batching under concurrency, errors."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from ragbudget.config import MicroBatchConfig
from ragbudget.errors import ConfigError
from ragbudget.embed.microbatch import MicroBatcher

QUESTIONS = [f"what is the lift coefficient of wing model {i} at mach {i / 10:.1f}?" for i in range(24)]


class Counting:
    """Delegates to the real embedder and records each call's batch size (the seam under test)."""

    def __init__(self, inner, fail: bool = False) -> None:
        self.inner, self.fail, self.calls, self.texts = inner, fail, [], []
        self.model_id = inner.model_id

    def embed(self, texts):
        self.calls.append(len(texts))
        self.texts.append(list(texts))
        if self.fail:
            raise RuntimeError("encoder exploded")
        return self.inner.embed(texts)

    def embed_query(self, text):
        self.calls.append(1)
        self.texts.append([text])
        if self.fail:
            raise RuntimeError("encoder exploded")
        return self.inner.embed_query(text)


def _concurrent(mb: MicroBatcher, texts: list[str]) -> list[np.ndarray]:
    barrier = threading.Barrier(len(texts))

    def one(t: str) -> np.ndarray:
        barrier.wait()
        return mb.embed_query(t)

    with ThreadPoolExecutor(len(texts)) as pool:
        return list(pool.map(one, texts))


def test_batched_vectors_match_unbatched(embedder) -> None:
    inner = Counting(embedder)
    mb = MicroBatcher(inner, max_batch=8, max_wait_ms=2000)
    try:
        got = _concurrent(mb, QUESTIONS[:16])
    finally:
        mb.close()
    want = embedder.embed(QUESTIONS[:16])
    np.testing.assert_allclose(np.stack(got), want, atol=1e-5)
    assert sum(inner.calls) == 16
    assert mb.stats.batches < 16 and mb.stats.max_batch_seen >= 2
    assert max(inner.calls) <= 8  # max_batch respected
    assert mb.model_id == embedder.model_id  # delegation


def test_lone_caller_and_repeats(embedder) -> None:
    inner = Counting(embedder)
    mb = MicroBatcher(inner, max_batch=8, max_wait_ms=5000)  # a lone caller must not wait 5 s
    try:
        a = mb.embed_query(QUESTIONS[0])
        b = mb.embed_query(QUESTIONS[0])
        # duplicates inside one concurrent batch are embedded once
        _concurrent(mb, [QUESTIONS[1]] * 6)
    finally:
        mb.close()
    assert a is b and not a.flags.writeable
    assert inner.texts[0] == [QUESTIONS[0]]  # the repeat came from the batcher's memory
    # six concurrent identical calls: never the same text twice in one model call, and at most two calls
    # (the first caller may be embedded alone before the others queue)
    assert all(len(set(t)) == len(t) for t in inner.texts)
    assert 1 <= sum(t == [QUESTIONS[1]] for t in inner.texts) <= 2 and len(inner.texts) <= 3


def test_errors_reach_every_waiter(embedder) -> None:
    mb = MicroBatcher(Counting(embedder, fail=True), max_batch=4, max_wait_ms=500)
    errors = []

    def one(t: str) -> None:
        try:
            mb.embed_query(t)
        except RuntimeError as err:
            errors.append(str(err))

    threads = [threading.Thread(target=one, args=(q,)) for q in QUESTIONS[:5]]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    mb.close()
    assert errors == ["encoder exploded"] * 5
    with pytest.raises(RuntimeError, match="closed"):
        mb.embed_query("after close")


def test_bad_settings(embedder) -> None:
    with pytest.raises(ConfigError):
        MicroBatcher(embedder, max_batch=0)
    with pytest.raises(ConfigError):
        MicroBatcher(embedder, max_wait_ms=-1)
    mb = MicroBatcher.from_config(embedder, MicroBatchConfig(max_batch=3, max_wait_ms=1.5))
    assert (mb.max_batch, mb.max_wait_s) == (3, 0.0015)

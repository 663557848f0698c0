"""Semantic response cache: a similar question in the same scope gets the stored answer.

Per :class:`~ragbudget.cache.keys.ResponseScope` (everything but the question, conversation state
included) the layer keeps a small in-process matrix of normalised question embeddings. A lookup takes
the best cosines ≥ ``threshold`` and serves the first candidate that also passes the lexical guards
(:mod:`ragbudget.cache.guards`) and the optional verifier hook. Answers live in the KV backend under
their own key, so TTL, size bounds and Redis/SQLite sharing apply to them as to exact entries.

The vector index itself is per process: with Redis, a replica serves semantic hits for the questions
it has seen (answers are shared; the exact layer is fully shared).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from ..config import SemanticCacheConfig
from ..embed.encoder import Embedder
from . import contrast, guards
from .base import CacheStats, KVBackend, decode_json, encode_json
from .keys import ResponseScope, semantic_entry_key
from .response import CacheHit, saved_ms, saved_tokens

log = logging.getLogger(__name__)

Verifier = Callable[[str, str], bool]
"""``verifier(stored_question, new_question) -> bool``: a last say on a candidate hit."""

MAX_CANDIDATES = 5


def guard_settings(config: SemanticCacheConfig) -> guards.GuardSettings:
    """The guard settings a :class:`SemanticCacheConfig` asks for."""
    on = config.guards
    return guards.GuardSettings(numbers=on and config.guard_numbers, entities=on and config.guard_entities,
                                negation=on and config.guard_negation, content=on and config.guard_content,
                                max_unmatched=config.max_unmatched_words,
                                max_unmatched_ratio=config.max_unmatched_ratio,
                                contrast=on and config.guard_contrast)


@dataclass
class _Scope:
    dim: int
    vecs: np.ndarray = field(init=False)
    questions: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    expires: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.vecs = np.zeros((0, self.dim), dtype=np.float32)

    def remove(self, i: int) -> None:
        self.vecs = np.delete(self.vecs, i, axis=0)
        del self.questions[i], self.keys[i], self.expires[i]


class SemanticResponseCache:
    """Guarded nearest-question lookup within one response scope."""

    layer = "semantic"

    def __init__(self, backend: KVBackend, embedder: Embedder, config: SemanticCacheConfig | None = None, *,
                 ttl_s: float = 86400.0, verifier: Verifier | None = None, stats: CacheStats | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.backend = backend
        self.embedder = embedder
        self.config = config or SemanticCacheConfig()
        self.ttl_s = float(ttl_s)
        self.verifier = verifier
        self.guard = guard_settings(self.config)
        if self.config.enabled and self.guard.contrast:
            contrast.lexicon()  # load the contrast lexicon once per process now, not in the first lookup
        self.stats = stats or CacheStats("semantic")
        self._clock = clock
        self._scopes: dict[str, _Scope] = {}
        self._order: deque[tuple[str, str]] = deque()  # (scope id, entry key), oldest first
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return sum(len(s.keys) for s in self._scopes.values())

    def _embed(self, question: str, embedding: np.ndarray | None) -> np.ndarray:
        v = np.asarray(self.embedder.embed_query(question) if embedding is None else embedding, dtype=np.float32)
        n = float(np.linalg.norm(v))
        return v / n if n > 0 else v

    def candidates(self, scope: ResponseScope, question: str,
                   embedding: np.ndarray | None = None) -> list[tuple[float, str, str]]:
        """(cosine, stored question, entry key) at or above the threshold, best first (no guards)."""
        with self._lock:
            sc = self._scopes.get(scope.id)
            if sc is None or not sc.keys:
                return []
        q = self._embed(question, embedding)
        now = self._clock()
        with self._lock:
            sc = self._scopes.get(scope.id)
            if sc is None or not sc.keys:
                return []
            sims = sc.vecs @ q
            order = np.argsort(-sims)[:MAX_CANDIDATES]
            return [(float(sims[i]), sc.questions[i], sc.keys[i]) for i in order
                    if sims[i] >= self.config.threshold and sc.expires[i] > now]

    def lookup(self, scope: ResponseScope, question: str, embedding: np.ndarray | None = None) -> CacheHit | None:
        """The stored answer of the most similar guarded question in ``scope``, or None."""
        if not self.config.enabled:
            return None
        for sim, stored_q, key in self.candidates(scope, question, embedding):
            reason = guards.check(stored_q, question, self.guard)
            if reason is not None:
                self.stats.incr("rejected_by_guard")
                log.debug("semantic candidate %r rejected for %r by the %s guard", stored_q, question, reason)
                continue
            if self.verifier is not None and not self.verifier(stored_q, question):
                self.stats.incr("rejected_by_guard")
                continue
            entry = decode_json(self.backend.get(key))
            if not isinstance(entry, dict) or not isinstance(entry.get("record"), dict):
                continue  # expired, evicted or backend unavailable
            record = entry["record"]
            self.stats.hit(saved_tokens(record), saved_ms(record))
            return CacheHit(record=record, layer=self.layer, key=key, similarity=sim, matched_question=stored_q)
        self.stats.miss()
        return None

    def store(self, scope: ResponseScope, question: str, record: Mapping[str, Any],
              embedding: np.ndarray | None = None) -> bool:
        """Store a record; a non-JSON record raises CacheError before anything is written."""
        value = encode_json({"question": question, "record": dict(record)})
        return self.store_encoded(scope, question, value, embedding)

    def store_encoded(self, scope: ResponseScope, question: str, value: bytes,
                      embedding: np.ndarray | None = None) -> bool:
        if not self.config.enabled:
            return False
        key = semantic_entry_key(scope, question)
        if not self.backend.set(key, value, self.ttl_s):
            self.stats.incr("store_failures")
            return False
        v = self._embed(question, embedding)
        expires = self._clock() + self.ttl_s
        with self._lock:
            sc = self._scopes.get(scope.id)
            if sc is None:
                sc = self._scopes[scope.id] = _Scope(dim=v.shape[0])
            if key in sc.keys:
                sc.remove(sc.keys.index(key))
                self._order.remove((scope.id, key))
            sc.vecs = np.vstack([sc.vecs, v[None, :]])
            sc.questions.append(question)
            sc.keys.append(key)
            sc.expires.append(expires)
            self._order.append((scope.id, key))
            self._evict_over_capacity()
        self.stats.incr("stores")
        return True

    def _evict_over_capacity(self) -> None:
        total = sum(len(s.keys) for s in self._scopes.values())
        while total > self.config.max_entries and self._order:
            scope_id, key = self._order.popleft()
            sc = self._scopes.get(scope_id)
            if sc is None or key not in sc.keys:
                continue  # stale order entry (re-stored later)
            sc.remove(sc.keys.index(key))
            total -= 1
            if not sc.keys:
                del self._scopes[scope_id]

    def clear(self) -> None:
        with self._lock:
            self._scopes.clear()
            self._order.clear()

"""Exact response cache and the answer record (de)serialisation shared by the response layers.

The pipeline stores ``Answer.to_dict()``; a hit returns that record (with its original ledger, usage
and timings) plus the layer that served it, and :meth:`Answer.from_dict` (the one codec) rebuilds the
:class:`Answer`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Mapping

from ..types import Answer
from .base import CacheStats, KVBackend, decode_json, encode_json
from .keys import ResponseScope, response_key

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CacheHit:
    """A served answer record, the layer that served it, and (semantic) what it matched."""

    record: dict[str, Any]
    layer: str  # "exact" | "semantic"
    key: str
    similarity: float | None = None
    matched_question: str | None = None
    decision: str | None = None  # semantic: why it was served (Decision.describe())

    def answer(self) -> Answer:
        return Answer.from_dict(self.record, cache_layer=self.layer)


def saved_tokens(record: Mapping[str, Any]) -> int:
    """Tokens a hit saves: the stored answer's prompt + completion tokens."""
    usage = record.get("usage") or {}
    total = usage.get("total_tokens")
    if total is None:
        total = int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))
    return int(total or 0)


def saved_ms(record: Mapping[str, Any]) -> float:
    """Milliseconds a hit saves: the stored answer's original end-to-end latency."""
    return float((record.get("timings") or {}).get("total_ms") or 0.0)


def answer_from_dict(d: Mapping[str, Any], *, cache_layer: str | None = None) -> Answer:
    """Rebuild an :class:`Answer` from ``Answer.to_dict()`` (kept for importers: :meth:`Answer.from_dict`
    is the one codec); ``cache_layer`` marks where it came from."""
    return Answer.from_dict(d, cache_layer=cache_layer)


class ExactResponseCache:
    """Normalised question + full :class:`ResponseScope` → answer record."""

    layer = "exact"

    def __init__(self, backend: KVBackend, *, ttl_s: float | None = None, stats: CacheStats | None = None) -> None:
        self.backend = backend
        self.ttl_s = ttl_s
        self.stats = stats or CacheStats("exact")

    def lookup(self, scope: ResponseScope, question: str) -> CacheHit | None:
        key = response_key(scope, question)
        record = decode_json(self.backend.get(key))
        if not isinstance(record, dict):
            self.stats.miss()
            return None
        self.stats.hit(saved_tokens(record), saved_ms(record))
        return CacheHit(record=record, layer=self.layer, key=key)

    def store(self, scope: ResponseScope, question: str, record: Mapping[str, Any]) -> bool:
        """Store a record; a non-JSON record raises CacheError before anything is written."""
        return self.store_encoded(scope, question, encode_json(dict(record)))

    def store_encoded(self, scope: ResponseScope, question: str, value: bytes) -> bool:
        ok = self.backend.set(response_key(scope, question), value, self.ttl_s)
        self.stats.incr("stores" if ok else "store_failures")
        return ok

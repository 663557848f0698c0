"""Exact response cache and the answer record (de)serialisation shared by the response layers.

The pipeline stores ``Answer.to_dict()``; a hit returns that record (with its original ledger, usage
and timings) plus the layer that served it, and :func:`answer_from_dict` rebuilds the :class:`Answer`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Mapping

from ..types import Answer, Chunk, Citation, Ledger, Scored, Timings, Usage
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

    def answer(self) -> Answer:
        return answer_from_dict(self.record, cache_layer=self.layer)


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
    """Rebuild an :class:`Answer` from ``Answer.to_dict()``; ``cache_layer`` marks where it came from."""
    context = []
    for s in d.get("context", []):
        chunk = Chunk(id=s["chunk_id"], doc_id=s["doc_id"], text=s.get("text", ""),
                      position=int(s.get("position", 0)),
                      metadata={"source": s.get("source", s["doc_id"]), "title": s.get("title", "")})
        context.append(Scored(chunk=chunk, score=float(s.get("score", 0.0)), dense_score=s.get("dense_score"),
                              sparse_score=s.get("sparse_score"), fused_score=s.get("fused_score"),
                              rerank_score=s.get("rerank_score")))
    u = d.get("usage") or {}
    t = d.get("timings") or {}
    ledger = Ledger.from_dict(d.get("ledger") or {})
    layer = cache_layer if cache_layer is not None else d.get("cache_layer")
    ledger.cache_layer = layer
    return Answer(
        question=d.get("question", ""), answer=d.get("answer", ""),
        citations=[Citation(**c) for c in d.get("citations", [])], context=context, ledger=ledger,
        usage=Usage(prompt_tokens=int(u.get("prompt_tokens", 0)), cached_tokens=int(u.get("cached_tokens", 0)),
                    completion_tokens=int(u.get("completion_tokens", 0))),
        timings=Timings(stages=dict(t.get("stages", {})), ttft_ms=t.get("ttft_ms"),
                        itl_ms=list(t.get("itl_ms", [])), total_ms=float(t.get("total_ms", 0.0))),
        route=d.get("route", ""), cache_layer=layer, partial=bool(d.get("partial", False)),
        extractive=bool(d.get("extractive", False)))


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

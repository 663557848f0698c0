"""Cache layers (exact, semantic, retrieval, tool) over one KV backend (memory, SQLite, Redis).

A cached answer is never wrong for the asker: every input of an answer is in its key
(:class:`ResponseScope`), semantic hits pass lexical guards, and backends fail soft (a miss), never
raising to the caller except :class:`~ragbudget.errors.CacheError` for a value that cannot be stored.
"""

from .base import BackendStats, CacheStats, KVBackend, decode_json, encode_json
from .guards import GuardSettings
from .keys import (ResponseScope, conversation_fingerprint, normalize_question, response_key, retrieval_key,
                   tool_key)
from .layers import CacheLayers, ResponseCache, make_backend
from .memory import MemoryBackend
from .redis_backend import RedisBackend
from .response import CacheHit, ExactResponseCache, answer_from_dict
from .retrieval import RetrievalCache, ToolCache
from .semantic import SemanticResponseCache, Verifier
from .sqlite import SQLiteBackend

__all__ = [
    "BackendStats", "CacheHit", "CacheLayers", "CacheStats", "ExactResponseCache", "GuardSettings", "KVBackend",
    "MemoryBackend", "RedisBackend", "ResponseCache", "ResponseScope", "RetrievalCache", "SQLiteBackend",
    "SemanticResponseCache", "ToolCache", "Verifier", "answer_from_dict", "conversation_fingerprint",
    "decode_json", "encode_json", "make_backend", "normalize_question", "response_key", "retrieval_key",
    "tool_key",
]

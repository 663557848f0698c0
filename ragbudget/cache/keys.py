"""Cache keys: everything that changes an answer is part of its key.

A :class:`ResponseScope` holds every input of an answer except the question itself (tenant, index
content version, prompt version, model tier, generation parameters, response mode and the conversation
state the prompt carried). Exact keys add the normalised question; the semantic layer searches
questions within one scope. Changing any scope field (e.g. re-ingesting changed documents, which
changes the index content version) makes every older entry unreachable.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Any, Iterable, Mapping

from ..types import Message

KEY_FORMAT = "v1"  # bump when key construction changes, so old entries stop matching

_WS = re.compile(r"\s+")
_TRAILING_PUNCT = re.compile(r"[\s?!.,;:…。？！]+$")


def normalize_question(text: str) -> str:
    """NFKC, casefold, collapse whitespace, strip surrounding space and trailing punctuation."""
    t = unicodedata.normalize("NFKC", text).casefold()
    t = _WS.sub(" ", t).strip()
    return _TRAILING_PUNCT.sub("", t)


def digest(*parts: Any) -> str:
    """SHA-256 (hex) of the canonical JSON of ``parts``."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def conversation_fingerprint(history: Iterable[Message | Mapping[str, str]]) -> str:
    """Fingerprint of the history turns kept in the prompt ("" for none).

    Pass the turns as they went into the prompt (after trimming/compression), so two conversations
    share cached answers only when the answer depended on the same conversation state.
    """
    turns = [(m.role, m.content) if isinstance(m, Message) else (m["role"], m["content"]) for m in history]
    return digest("conv", turns) if turns else ""


@dataclass(frozen=True)
class ResponseScope:
    """Every input of an answer except the question. ``id`` is its stable hash."""

    tenant: str
    index_version: str
    prompt_version: str
    model_tier: str
    max_tokens: int
    temperature: float = 0.0
    mode: str = "concise"
    conversation: str = ""  # conversation_fingerprint(...) of the history kept in the prompt
    filters: str = ""  # the query's metadata filters (index.filters.fingerprint): other filters, other answer
    top_p: float | None = None  # the rest of the request's sampling (types.Sampling): other sampling,
    stop: tuple[str, ...] = ()  # other answer
    seed: int | None = None

    @cached_property
    def id(self) -> str:
        """Computed once per scope object (fields are frozen): a lookup and its store ask for it often."""
        return digest(KEY_FORMAT, "scope", asdict(self))


def response_key(scope: ResponseScope, question: str) -> str:
    """Key of the exact response layer."""
    return "resp:" + digest(KEY_FORMAT, scope.id, normalize_question(question))


def semantic_entry_key(scope: ResponseScope, question: str) -> str:
    """Backend key under which the semantic layer keeps one stored answer."""
    return "sem:" + digest(KEY_FORMAT, scope.id, normalize_question(question))


def retrieval_key(index_version: str, settings: Mapping[str, Any], query: str) -> str:
    """Key of the retrieval layer: index content version + retrieval settings + normalised query."""
    return "retr:" + digest(KEY_FORMAT, index_version, dict(settings), normalize_question(query))


def tool_key(tool: str, args: Mapping[str, Any], version: str = "") -> str:
    """Key of the tool/handler output layer: tool name, its version and its arguments."""
    return "tool:" + digest(KEY_FORMAT, tool, version, dict(args))

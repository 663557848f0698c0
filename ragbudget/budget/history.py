"""Fit chat history into its budget: recent turns verbatim, older turns compressed.

The newest turns are kept word for word while they fit; the older ones are compressed into one
"earlier conversation" note, extractively by default (sentences chosen by overlap with the current
question, names and recency) or by a ``summarize(text, max_tokens)`` hook when a generator is configured.
The current question is not part of the history and is never dropped here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ..config import TrimConfig
from ..errors import QueryError
from ..kernels.text import CONVERSATION_STOPWORDS, compound_words
from ..kernels.text import content_words as _content_words
from ..kernels.tokens import Tokenizer
from ..kernels.sentences import split_sentences
from ..types import Message

Summarize = Callable[[str, int], str]
SUMMARY_LABEL = "Earlier conversation (compressed): "
ROLES = ("system", "user", "assistant")


@dataclass
class HistoryResult:
    messages: list[Message]
    used: int
    dropped: list[dict[str, Any]] = field(default_factory=list)
    compressed: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def coerce_history(history: Sequence[Any] | None) -> list[Message]:
    """Accept ``list[Message]`` or a list of ``{"role", "content"}`` dicts; anything else is a clear error."""
    if history is None:
        return []
    if isinstance(history, (str, bytes, Mapping)):
        raise QueryError("history must be a list of messages, got a single " + type(history).__name__,
                         fix='pass [{"role": "user", "content": "..."}, ...] or list[Message]')
    out = []
    for i, m in enumerate(history):
        if isinstance(m, Message):
            role, content = m.role, m.content
        elif isinstance(m, Mapping) and "role" in m and "content" in m:
            role, content = m["role"], m["content"]
        else:
            raise QueryError(f"history[{i}] is not a message: {m!r:.80}",
                             fix='each item needs "role" (system|user|assistant) and "content" (text)')
        if role not in ROLES:
            raise QueryError(f"history[{i}].role {role!r} is not one of {ROLES}",
                             fix=f"give each history message a role from {ROLES}")
        if not isinstance(content, str):
            raise QueryError(f"history[{i}].content must be text, got {type(content).__name__}",
                             fix="send the message text as a string")
        out.append(Message(role, content))
    return out


def last_answer(messages: Sequence[Message]) -> str:
    """The conversation's latest assistant turn ("" when it has none): where a follow-up picks up."""
    return next((m.content for m in reversed(messages) if m.role == "assistant"), "")


def message_tokens(m: Message, tokenizer: Tokenizer) -> int:
    """Tokens a message costs in the rendered history (``role: content`` plus a newline)."""
    return tokenizer.count(f"{m.role}: {m.content}") + 1


def content_words(text: str) -> set[str]:
    """The lowercased words of ``text`` that say what it is about (:data:`~ragbudget.kernels.text.CONVERSATION_STOPWORDS`
    removed; hyphenated compounds kept whole)."""
    return set(_content_words(compound_words(text), CONVERSATION_STOPWORDS))


def fit_history(history: Sequence[Any] | None, budget: int, tokenizer: Tokenizer, cfg: TrimConfig, *,
                query: str = "", summarize: Summarize | None = None) -> HistoryResult:
    """Keep the newest turns that fit ``budget``; compress the rest into one note (see module doc)."""
    msgs = coerce_history(history)
    budget = max(int(budget), 0)
    costs = [message_tokens(m, tokenizer) for m in msgs]
    if sum(costs) <= budget:
        return HistoryResult(messages=msgs, used=sum(costs))
    compress = cfg.history_compression != "none" and budget > 0
    recent_budget = int(budget * (1 - cfg.history_summary_share)) if compress else budget
    keep_from, used = len(msgs), 0
    for i in range(len(msgs) - 1, -1, -1):
        if used + costs[i] > recent_budget:
            break
        keep_from, used = i, used + costs[i]
    older, recent = msgs[:keep_from], msgs[keep_from:]
    result = HistoryResult(messages=list(recent), used=used)
    if not older:
        return result
    room = budget - used - tokenizer.count(f"system: {SUMMARY_LABEL}") - 1
    summary = ""
    if compress and room > 0:
        if cfg.history_compression == "llm" and summarize is not None:
            summary = tokenizer.truncate(summarize(render(older), room).strip(), room)
        else:
            if cfg.history_compression == "llm":
                result.notes.append("history_compression=llm without a generator: used extractive")
            summary = extractive_summary(older, room, tokenizer, query)
    before = sum(costs[:keep_from])
    if summary:
        note = Message("system", SUMMARY_LABEL + summary)
        result.messages.insert(0, note)
        result.used += message_tokens(note, tokenizer)
        result.compressed.append({"turns": len(older), "tokens_before": before,
                                  "tokens_after": message_tokens(note, tokenizer)})
    else:
        for i in range(keep_from):
            result.dropped.append({"turn": i, "reason": "over budget", "tokens": costs[i]})
    return result


def render(msgs: Sequence[Message]) -> str:
    return "\n".join(f"{m.role}: {m.content}" for m in msgs)


def extractive_summary(msgs: Sequence[Message], max_tokens: int, tokenizer: Tokenizer, query: str = "") -> str:
    """Sentences of ``msgs`` chosen by overlap with ``query``, capitalised names and recency, packed into
    ``max_tokens`` and kept in conversation order."""
    qwords = content_words(query)
    sents: list[tuple[int, str]] = []
    for m in msgs:
        for s in split_sentences(m.content) or ([m.content] if m.content.strip() else []):
            sents.append((len(sents), s))
    n = max(len(sents), 1)
    scored = []
    for idx, s in sents:
        words = content_words(s)
        overlap = len(words & qwords) / (len(qwords) or 1)
        tokens = compound_words(s)
        names = sum(1 for w in tokens if w[:1].isupper()) / (len(tokens) or 1)
        scored.append((2.0 * overlap + names + 0.5 * idx / n + (0.5 if idx < 2 else 0.0), idx, s))
    scored.sort(key=lambda t: (-t[0], t[1]))
    chosen: dict[int, str] = {}
    used = 0
    for _, idx, s in scored:
        c = tokenizer.count(s) + 1
        if used + c <= max_tokens:
            chosen[idx] = s
            used += c
    return " ".join(chosen[i] for i in sorted(chosen))

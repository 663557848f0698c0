"""Follow-up questions: a retrieval query condensed from the chat history.

"And what about his brother?" retrieves nothing useful on its own: its content words are in the
history. :func:`condense` is the deterministic rewrite run before retrieval: when the question leans on
the conversation (a pronoun or demonstrative, an elliptical opener such as "what about", or fewer than
three content words), it appends the topics the conversation is about — names and noun phrases of the
latest turns first, then the conversation's topic line (a system message) — that the question itself
lacks. The prompt still shows the question as asked, with the history; only retrieval (and the retrieval
cache key) sees the condensed query. An optional LLM rewrite (``retrieval.condense: llm``) asks a
configured tier for a self-contained question and falls back to the deterministic rewrite on any error.

Measured on CANARD (``ragbudget eval followups``): see BENCHMARKS.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

from ..kernels.text import CONDENSE_STOPWORDS, compound_words
from ..kernels.text import content_words as _content_words
from ..types import Message

ANAPHORA = frozenset(
    "he she they it him her them his hers its their theirs this that these those there then such "
    "one ones former latter the_same".split())
OPENERS = ("what about", "how about", "and ", "also ", "what else", "anything else", "why not", "what other",
           "tell me more", "more about", "is that", "was that", "did he", "did she", "did they")
# A run of capitalised words (allowing "of", "the", "and" inside), or a number with a unit-ish word.
_ENTITY = re.compile(r"\b(?:[A-Z][\w'\-]*)(?:\s+(?:of|the|and|de|von|van|for|on)?\s*[A-Z][\w'\-]*)*")
# Capitalised words that open sentences without naming anything.
_NOT_NAMES = CONDENSE_STOPWORDS | {
    "what", "when", "where", "who", "why", "how", "which", "did", "does", "do", "is", "was", "are", "were", "in",
    "on", "after", "before", "during", "yes", "no", "i", "he", "she", "they", "it", "the", "a", "an", "this",
    "that", "there", "also", "however", "cannotanswer"}


@dataclass(frozen=True)
class Condensed:
    """The retrieval query and why it differs from the question (empty ``added`` = unchanged)."""

    query: str
    added: tuple[str, ...] = ()
    method: str = "none"

    @property
    def changed(self) -> bool:
        return bool(self.added) or self.method == "llm"


def content_words(text: str) -> list[str]:
    """Lowercased words of two or more characters that name a topic (:data:`~ragbudget.kernels.text.CONDENSE_STOPWORDS`
    removed; hyphenated compounds kept whole)."""
    return _content_words(compound_words(text), CONDENSE_STOPWORDS, min_len=2)


def needs_context(question: str) -> bool:
    """Does the question lean on the conversation (anaphora, elliptical opener, too few content words)?"""
    low = question.strip().lower()
    words = [w.lower() for w in compound_words(question)]
    if any(w in ANAPHORA for w in words):
        return True
    if low.startswith(OPENERS):
        return True
    return len(content_words(question)) < 3


def _entities(text: str) -> list[str]:
    out = []
    for m in _ENTITY.finditer(text):
        phrase = m.group(0).strip()
        words = phrase.split()
        while words and words[0].lower() in _NOT_NAMES:
            words = words[1:]
        if words and not all(w.lower() in _NOT_NAMES for w in words):
            out.append(" ".join(words))
    return out


def condense(question: str, history: Sequence[Message], *, max_added: int = 3, max_words: int = 12) -> Condensed:
    """The deterministic rewrite (see the module docstring)."""
    if not history or not needs_context(question):
        return Condensed(question)
    have = set(content_words(question))
    added: list[str] = []
    words = 0
    turns = [m for m in history if m.role != "system"]
    # The conversation's subject (its topic line, else the names of its opening turn) is the likeliest
    # referent of "he" or "they"; the latest turns hold the rest.
    topic = [m.content for m in history if m.role == "system"] or [m.content for m in turns[:2]]
    sources = [(topic, 1)] + [([m.content for m in turns[::-1][:4]], max_added)] + [(topic, max_added)]
    for texts, upto in sources:
        for ent in (e for t in texts for e in _entities(t)):
            if len(added) >= upto:
                break
            ws = content_words(ent)
            if not ws or set(ws) <= have or words + len(ws) > max_words:
                continue
            added.append(ent)
            have.update(ws)
            words += len(ws)
    turns = turns[::-1]  # newest first
    if not added and turns:
        # no names: fall back to the content words of the last user turn
        last_user = next((m.content for m in turns if m.role == "user"), "")
        extra = [w for w in content_words(last_user) if w not in have][:4]
        if extra:
            added.append(" ".join(extra))
    if not added:
        return Condensed(question)
    return Condensed(f"{question.strip()} ({'; '.join(added)})", tuple(added), "deterministic")


REWRITE_INSTRUCTION = ("Rewrite the last question of the conversation as one self-contained question that "
                       "names what its pronouns refer to. Reply with the question only.")


def condense_with_llm(question: str, history: Sequence[Message], generate: Callable[[str], str]) -> Condensed:
    """``generate(prompt_text) -> text`` from a configured tier; the deterministic rewrite on any error or
    an answer that is empty or not a question-sized line."""
    fallback = condense(question, history)
    if not history:
        return fallback
    convo = "\n".join(f"{m.role}: {m.content}" for m in history[-6:])
    try:
        text = generate(f"{REWRITE_INSTRUCTION}\n\n{convo}\nuser: {question}\n\nSelf-contained question:")
    except Exception:  # noqa: BLE001 - a rewrite must never fail the request
        return fallback
    line = (text or "").strip().splitlines()[0].strip() if (text or "").strip() else ""
    if not line or len(line) > 4 * max(len(question), 40):
        return fallback
    return Condensed(line, (), "llm")


__all__ = ["Condensed", "condense", "condense_with_llm", "content_words", "needs_context"]

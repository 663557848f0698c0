"""The offline default backend: a short cited answer built from the budgeted context, no model.

Query-aware sentence selection: each context sentence is scored by the stemmed query terms it contains
(weighted by inverse sentence frequency) plus a small bonus for the passage's retrieval rank; the best
sentences (within ``max_tokens``) are joined, each followed by its citation ``[n]``, and streamed word by
word. The backend name is ``extractive`` (``Generation.backend``), so callers can label the answer as
extracted rather than written by a model. When no sentence shares a term with the question it says that
the documents do not contain the answer.

Context comes from the explicit ``context`` argument (``list[Scored]``, numbered [1], [2]… in order) or,
without it, is parsed from the prompt text: passages introduced by ``[n]`` at the start of a line, either
``[n] text`` or the ``ragbudget.stages.prompt`` fence (``[n] source — title`` header, text on the next lines,
inside ``<documents>``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterator, Sequence

from ..kernels.text import EXTRACTIVE_STOPWORDS, clitic_words, stemmed_content_words
from ..kernels.tokens import Tokenizer
from ..kernels.sentences import split_sentences as punkt_sentences
from ..types import Prompt, Scored
from .base import BaseGenerator, StreamState

NO_ANSWER = "The retrieved documents do not contain an answer to this question."
SHORT_SENTENCE_WORDS = 8
_PARA = re.compile(r"\n\s*\n")
_PASSAGE = re.compile(r"^\[(\d+)\][ \t]*(.*)$", re.M)
_QUESTION = re.compile(r"^\s*(?:Question|Q)\s*:\s*(.+)$", re.M | re.I)


@dataclass(frozen=True)
class Passage:
    number: int
    text: str
    rank: int


def terms(text: str) -> list[str]:
    """Lower-cased, stemmed content words (:data:`~ragbudget.kernels.text.EXTRACTIVE_STOPWORDS` removed)."""
    return stemmed_content_words(clitic_words(text), EXTRACTIVE_STOPWORDS)


_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+\S.*$", re.MULTILINE)


def split_sentences(text: str) -> list[str]:
    """Sentences worth quoting: paragraphs split by punkt (the splitter trimming uses, memoised), with
    markdown heading lines and fragments under three words left out (a heading such as "# Refunds" matches
    a question's words but answers nothing). Punkt, unlike a capital-letter rule, also ends a sentence
    before one that starts in lower case ("... a Retry-After header. ragbudget measures ...")."""
    text = _HEADING.sub("\n", text)
    return [s for para in _PARA.split(text) for s in punkt_sentences(para) if len(s.split()) >= 3]


def passages_from_context(context: Sequence[Scored]) -> list[Passage]:
    return [Passage(number=i + 1, text=s.chunk.text, rank=i) for i, s in enumerate(context)]


def passages_from_prompt(text: str) -> list[Passage]:
    """Passages introduced by ``[n]`` at a line start; each runs until the next passage or a blank line
    followed by a non-passage label (e.g. ``Question:``)."""
    out: list[Passage] = []
    matches = list(_PASSAGE.finditer(text))
    for k, m in enumerate(matches):
        end = matches[k + 1].start() if k + 1 < len(matches) else len(text)
        body = text[m.start(2):end]
        q = _QUESTION.search(body)
        if q:
            body = body[:q.start()]
        body = re.split(r"\n(?:```|</?documents?>|---)", body)[0].strip()
        head, sep, rest = body.partition("\n")
        if sep and rest.strip() and not re.search(r"[.!?]\s*$", head):
            body = rest.strip()  # "[n] source — title" header line, text below (ragbudget.stages.prompt's fence)
        out.append(Passage(number=int(m.group(1)), text=body, rank=k))
    return out


def question_from_prompt(prompt: Prompt) -> str:
    """The last ``Question:`` line, else the last user message's last non-empty line."""
    found = _QUESTION.findall(prompt.text)
    if found:
        return found[-1].strip()
    users = [m.content for m in prompt.messages if m.role == "user"]
    source = users[-1] if users else prompt.text
    lines = [ln.strip() for ln in source.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def select_sentences(question: str, passages: Sequence[Passage], *, max_sentences: int = 3,
                     min_ratio: float = 0.7) -> list[tuple[str, int, float]]:
    """Best ``(sentence, passage number, score)`` triples, best first; empty when nothing matches."""
    q = set(terms(question))
    if not q:
        return []
    cands: list[tuple[str, int, int, set[str]]] = []
    for p in passages:
        for s in split_sentences(p.text):
            cands.append((s, p.number, p.rank, set(terms(s))))
    if not cands:
        return []
    n = len(cands)
    df = {t: sum(1 for c in cands if t in c[3]) for t in q}
    scored = []
    for i, (s, num, rank, ts) in enumerate(cands):
        hit = q & ts
        if not hit:
            continue
        score = sum(math.log(1 + n / (1 + df[t])) for t in hit) / math.sqrt(len(q))
        score += 0.1 / (1 + rank) - 0.001 * i
        scored.append((s, num, score))
    scored.sort(key=lambda x: -x[2])
    if not scored:
        return []
    best = scored[0][2]
    picked = [x for x in scored[:max_sentences] if x[2] >= min_ratio * best]
    return _with_followers(picked, cands, q)


def _with_followers(picked: list[tuple[str, int, float]], cands: list[tuple[str, int, int, set[str]]],
                    q: set[str]) -> list[tuple[str, int, float]]:
    """A short picked sentence (under ``SHORT_SENTENCE_WORDS`` words, e.g. "Unused budget can be lent.")
    is often a topic sentence whose substance is the next one; when that next sentence also shares a
    question term, quote the two together."""
    chosen = {s for s, _, _ in picked}
    nxt = {c[0]: cands[i + 1] for i, c in enumerate(cands[:-1]) if cands[i + 1][1] == c[1]}
    out = []
    for s, num, score in picked:
        f = nxt.get(s)
        follower = f[0] if f is not None and f[3] & q else None
        if len(s.split()) < SHORT_SENTENCE_WORDS and follower and follower not in chosen:
            chosen.add(follower)
            s = f"{s} {follower}"
        out.append((s, num, score))
    return out


class ExtractiveGenerator(BaseGenerator):
    """Cited answers from the context, deterministic and offline."""

    name = "extractive"

    #: One sentence per this many output tokens (so ``concise`` and ``detailed`` modes differ), at least one.
    TOKENS_PER_SENTENCE = 48

    def __init__(self, *, tokenizer: Tokenizer | None = None, max_sentences: int = 5,
                 label: str = "") -> None:
        super().__init__(model="extractive")
        self.tokenizer = tokenizer or Tokenizer()
        self.max_sentences = max_sentences
        self.label = label

    def compose(self, question: str, passages: Sequence[Passage], max_tokens: int) -> tuple[str, bool]:
        """The answer text and whether it was cut at ``max_tokens``."""
        n = min(self.max_sentences, max(1, max_tokens // self.TOKENS_PER_SENTENCE))
        picked = select_sentences(question, passages, max_sentences=n)
        if not picked:
            text = self.label + NO_ANSWER
        else:
            parts: list[str] = []
            budget = max_tokens - self.tokenizer.count(self.label)
            for sent, num, _ in picked:
                flat = " ".join(sent.split())  # source line breaks are not answer structure
                piece = f"{flat} [{num}]"
                cost = self.tokenizer.count(piece + " ")
                if parts and cost > budget:
                    break
                if cost > budget:  # the best sentence alone is over max_tokens: cut it, keep its citation
                    cite = f"… [{num}]"
                    head = self.tokenizer.truncate(flat, budget - self.tokenizer.count(cite) - 1)
                    cut = self.label + f"{head.rstrip()}{cite}"
                    if self.tokenizer.count(cut) <= max_tokens:
                        return cut, True
                    parts.append(piece)  # tiny budgets: plain truncation below
                    break
                parts.append(piece)
                budget -= cost
            text = self.label + " ".join(parts)
        if self.tokenizer.count(text) > max_tokens:
            return self.tokenizer.truncate(text, max_tokens), True
        return text, False

    def _pieces(self, prompt: Prompt, state: StreamState, *, max_tokens: int, temperature: float,
                stop: Sequence[str] | None, context: Sequence[Scored] | None, top_p: float | None = None,
                seed: int | None = None) -> Iterator[str]:
        # temperature, top_p and seed are accepted and ignored: composing quoted sentences samples nothing
        passages = passages_from_context(context) if context is not None else passages_from_prompt(prompt.text)
        question = question_from_prompt(prompt)
        text, cut = self.compose(question, passages, max_tokens)
        if stop:
            for s in stop:
                if s and s in text:
                    text = text[:text.index(s)]
        state.prompt_tokens = prompt.total_tokens
        state.completion_tokens = self.tokenizer.count(text)
        state.finish_reason = "length" if cut else "stop"
        state.extra["extractive"] = True
        yield from re.findall(r"\s*\S+", text)

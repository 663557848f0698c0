"""Semantic-hit guards: cheap lexical checks that veto a cosine match that would change the meaning.

A high cosine says two questions talk about the same thing, not that they ask the same thing. A
semantic hit is rejected when the stored and the new question differ in

- numbers (digits or number words: "8" = "eight"; "4.4%" ≠ "4.6%"),
- named entities (capitalised tokens not opening a sentence, acronyms; "Gmail" ≠ "Outlook"); a name only
  written out longer on one side ("Skelton" / "Red Skelton") in a question otherwise the same is a soft
  ``name`` refusal instead (:func:`name_expansion`): the cache serves it within one conversation, or when
  the new question's retrieval agrees with the cached answer's citations,
- negation ("not", "no", "never", "n't", "without", ...),
- content: too many content words (stemmed, stop words removed) on either side that the other lacks —
  the typical false paraphrase adds or drops a clause ("... although it is first among 18-49s"),
- contrast (:mod:`ragbudget.cache.contrast`, on by default): the words in which the two differ must be
  evidence of the same question — antonyms, comparatives, direction, units, currencies, tense, swapped
  roles and unexplained word substitutions are rejected (returns "contrast", "role_swap",
  "substitution"; with it on, the content guard counts words after fillers and synonyms are removed).

Every check is a pure function of the two texts (the contrast check may also consult an optional
word-similarity callable); :func:`check` returns the first failing guard's name. Words, stop words
(:data:`~ragbudget.kernels.text.GUARD_STOPWORDS`) and stems come from :mod:`ragbudget.kernels.text`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Callable

from ..kernels.text import GUARD_STOPWORDS, UNICODE_WORD, stem, unicode_words
from . import contrast
from .wordlists import NEGATIONS, NUMBER_WORDS

_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:[.,:/]\d+)*")
_SENTENCE_START = re.compile(r"(?:^|[.!?:;\"“(]\s*)$")

# Capitalised words that open questions or are pronouns/fillers, not entities.
_NOT_ENTITIES = GUARD_STOPWORDS | {"please", "hi", "hello", "thanks", "mr", "mrs", "ms", "dr", "st"}


@dataclass(frozen=True)
class GuardSettings:
    """Which guards run, and how much unmatched content a hit may have."""

    numbers: bool = True
    entities: bool = True
    negation: bool = True
    content: bool = True
    # Content guard: a side fails when more than ``max_unmatched`` of its content words are missing
    # from the other side AND they are more than ``max_unmatched_ratio`` of its content words.
    max_unmatched: int = 0
    max_unmatched_ratio: float = 0.2
    contrast: bool = True


# "How can one apply …", "What does one need …", "One should …": the pronoun, not a count
_ONE_AS_PRONOUN = frozenset({"can", "could", "does", "did", "do", "should", "would", "will", "may", "might",
                             "must", "shall", "if", "when", "where", "how", "that"})


def _canon_number(tok: str) -> str:
    t = tok.replace(",", "")
    if re.fullmatch(r"[-+]?\d+\.\d+", t):
        t = t.rstrip("0").rstrip(".")
    return t.lstrip("+")


def numbers(text: str) -> frozenset[str]:
    """Numbers in ``text`` (digits and number words), canonicalised."""
    found = {_canon_number(m.group(0)) for m in _NUMBER.finditer(text)}
    ws = [w.casefold() for w in unicode_words(text)]
    found |= {NUMBER_WORDS[w] for i, w in enumerate(ws) if w in NUMBER_WORDS
              and not (w == "one" and (i == 0 or ws[i - 1] in _ONE_AS_PRONOUN))}
    return frozenset(found)


def negation_count(text: str) -> int:
    """How many negation cues ``text`` holds ("n't" contractions included)."""
    n = 0
    for w in unicode_words(text.replace("’", "'")):
        lw = w.casefold()
        if lw in NEGATIONS or lw.endswith("n't"):
            n += 1
    return n


_POSSESSIVE = re.compile(r"['’]s$")


def _name_key(word: str) -> str:
    """How an entity word is compared: casefolded, without a possessive ("Skelton's" → skelton)."""
    return _POSSESSIVE.sub("", word.casefold())


def entities(text: str) -> frozenset[str]:
    """Named-entity-like tokens: capitalised words that do not open a sentence, acronyms, CamelCase."""
    out: set[str] = set()
    for m in UNICODE_WORD.finditer(text.replace(".", "") if re.search(r"\b(?:[A-Z]\.){2,}", text) else text):
        w = m.group(0)
        lw = w.casefold()
        base = _name_key(w)
        if not w[0].isupper() or base in _NOT_ENTITIES or lw in NUMBER_WORDS or base.isdigit():
            continue
        at_start = bool(_SENTENCE_START.search(text[:m.start()]))
        acronym = len(w) > 1 and w.isupper()
        camel = any(c.isupper() for c in w[1:]) and not w.isupper()
        if at_start and not (acronym or camel):
            continue
        out.add(base)
    return frozenset(out)


def content_words(text: str) -> frozenset[str]:
    """Stemmed, lowercased content words (stopwords, numbers and negations removed)."""
    out = set()
    for w in unicode_words(text.replace("’", "'")):
        lw = re.sub(r"'s$", "", w.casefold())
        if lw in GUARD_STOPWORDS or lw in NEGATIONS or lw in NUMBER_WORDS or lw.endswith("n't") or lw.isdigit():
            continue
        if any(c.isdigit() for c in lw):
            continue
        out.add(stem(lw))
    return frozenset(out)


def _unmentioned(ents: frozenset[str], other: str) -> bool:
    """True when some entity is not mentioned (in any case) in ``other``."""
    if not ents:
        return False
    words = {_name_key(w) for w in unicode_words(other.replace(".", ""))}
    return not ents <= words


def name_expansion(stored: str, new: str) -> tuple[str, str] | None:
    """When the two differ in entities only because one side writes a name out longer — each extra entity
    word in a run of capitalised words that holds an entity both sides name ("Red Skelton" / "Skelton",
    "Gottfried Wilhelm Leibniz" / "Leibniz") — the two texts with those extra words left out; else None."""
    ea, eb = entities(stored), entities(new)
    for long, el, es in ((stored, ea, eb), (new, eb, ea)):
        extra, shared = el - es, el & es
        if not extra or not es <= el or not shared:
            continue
        toks = [(m.group(0), _name_key(m.group(0))) for m in UNICODE_WORD.finditer(long)]
        runs: list[set[str]] = [set()]
        for w, lw in toks:
            if w[0].isupper():
                runs[-1].add(lw)
            elif runs[-1]:
                runs.append(set())
        if all(any(x in r and r & shared for r in runs) for x in extra):
            short = " ".join(w for w, lw in toks if lw not in extra)
            return (short, new) if long is stored else (stored, short)
    return None


def _side_unmatched(mine: frozenset[str], other: frozenset[str], s: GuardSettings) -> bool:
    missing = len(mine - other)
    return missing > s.max_unmatched and missing > s.max_unmatched_ratio * max(len(mine), 1)


def check(stored: str, new: str, settings: GuardSettings = GuardSettings(),
          similarity: Callable[[str, str], float] | None = None) -> str | None:
    """Name of the first guard that rejects serving ``stored``'s answer for ``new``; None if all pass.

    ``similarity(word_a, word_b)`` is the optional word-embedding evidence of the contrast check."""
    return explain(stored, new, settings, similarity).reason


def explain(stored: str, new: str, settings: GuardSettings = GuardSettings(),
            similarity: Callable[[str, str], float] | None = None) -> contrast.Verdict:
    """:func:`check` with its evidence: numbers, negation and entities are hard refusals (no score
    overrides them); the contrast verifier's own verdict says which of its refusals are hard."""
    if settings.numbers and numbers(stored) != numbers(new):
        return contrast.Verdict("numbers", hard=True)
    if settings.negation and negation_count(stored) != negation_count(new):
        return contrast.Verdict("negation", hard=True)
    if settings.entities and (_unmentioned(entities(stored), new) or _unmentioned(entities(new), stored)):
        shorter = name_expansion(stored, new)
        if shorter is not None and explain(*shorter, replace(settings, entities=False), similarity).reason is None:
            return contrast.Verdict("name")  # the same question, one name written out (see name_expansion)
        return contrast.Verdict("entities", hard=True)
    if settings.contrast:
        big = 1 << 30
        cs = contrast.ContrastSettings(max_unmatched=settings.max_unmatched if settings.content else big,
                                       max_unmatched_ratio=settings.max_unmatched_ratio if settings.content else 1.0)
        verdict = contrast.explain(stored, new, cs, similarity)
        if verdict.reason is None:
            fa, fb = contrast.question_forms(stored), contrast.question_forms(new)
            if fa and fb and not fa & fb:  # same words, another question: "what did X do after …" / "why did X …"
                return replace(verdict, reason="question_form", hard=True)
        return verdict
    if settings.content:
        a, b = content_words(stored), content_words(new)
        if _side_unmatched(a, b, settings) or _side_unmatched(b, a, settings):
            return contrast.Verdict("content")
    return contrast.Verdict(None)

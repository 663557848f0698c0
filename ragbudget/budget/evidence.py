"""The signals a sentence's evidence score and the packing's stops are made of: the question's term weights
and the share of them a sentence holds, the rank prior, the score gap (adaptive-k), titles named in running text,
pronoun-led sentences, and the flow of a conversation through a document (the sentence after the last answer)."""

from __future__ import annotations

import html
import re
import unicodedata
from functools import lru_cache
from typing import Callable, Mapping, Sequence

import numpy as np

from ..config import BM25Config, TrimConfig
from ..index.sparse import Analyzer
from ..kernels.sentences import split_sentences
from ..types import Scored

TermsFn = Callable[[str], Sequence[str]]
WeightsFn = Callable[[Sequence[str]], Mapping[str, float]]


_REFERENCE = re.compile(r"^\W*(he|she|it|they|his|her|its|their|them|him|this|these|that|those|there|the latter|"
                        r"the former|both|such)\b", re.IGNORECASE)


def opens_with_reference(sentence: str) -> bool:
    """Does the sentence open with a pronoun or demonstrative whose referent is in an earlier sentence?"""
    return bool(_REFERENCE.match(sentence))


def bare_title(title: str) -> str:
    """A title as running text would name it: HTML entities decoded ("Tunnels &amp; Trolls" is named "Tunnels &
    Trolls"), lower case, without a trailing "(qualifier)"; "" when too short to be a name (under 4 characters)."""
    t = re.sub(r"\s*\([^)]*\)\s*$", "", " ".join(html.unescape(str(title or "")).split())).lower()
    return t if len(t) >= 4 else ""


def drop_title_line(sentence: str, title: str) -> str:
    """A record indexed as ``title\n\ntext`` whose first sentence names the title again ("Picric acid\n\nPicric
    acid is …", "Shellite (explosive)\n\nShellite (known as …", "Memphis Hustle\n\nThe Memphis Hustle are …":
    :func:`names_title`) pays for the title twice: the sentence without its title line. Anything else is
    returned as it is."""
    head = " ".join(str(title or "").split())
    first, sep, rest = sentence.partition("\n")
    name = bare_title(head)
    if not sep or not name or " ".join(first.split()) != head:
        return sentence
    rest = rest.lstrip()
    return rest if names_title(rest, name) else sentence


_PAREN = re.compile(r"\s*\(([^()]*)\)")
_LABEL_ONLY = re.compile(r"^[^\W\d_]+(?: [^\W\d_]+)?:\W*$")  # "Italian: \"\"": a gloss whose text is gone


def _script(ch: str) -> str:
    """The script of a letter as its Unicode name begins (LATIN, CYRILLIC, CJK, GREEK…); IPA and modifier
    letters (U+0250–U+02FF, pronunciations) count as their own script."""
    if "\u0250" <= ch <= "\u02ff":
        return "IPA"
    return unicodedata.name(ch, "?").split(" ", 1)[0]


def question_scripts(question: str) -> frozenset[str]:
    """The scripts the question's letters are written in."""
    return frozenset(_script(ch) for ch in question if ch.isalpha())


_MONTHS = ("january|february|march|april|may|june|july|august|september|october|november|december|"
           "jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec")
# a part of a parenthesis that is dates and nothing else: "born 11 April 1973", "June 12, 1802 – December 21, 1867",
# "c. 1320 BC – 1250 BC", "presumably on or after 8 May 1927"
_DATES_ONLY = re.compile(r"^(?:\s|[,.–—\-/?]|\d{1,4}(?:st|nd|rd|th|s)?|born|b|died|d|c|ca|circa|fl|bc|bce|ad|ce|"
                         r"presumably|probably|on|or|and|after|before|about|around|between|in|" + _MONTHS + r")+$",
                         re.IGNORECASE)
# a question that asks about time (when, a year, an age, an order in time) needs the dates
_TEMPORAL = re.compile(r"\b(?:when|years?|born|birth\w*|die[ds]?|death|age[ds]?|old|older|oldest|young|younger|"
                       r"youngest|earl(?:y|ier|iest)|lat(?:e|er|est)|first|last|before|after|dates?|century|"
                       r"centuries|decades?|months?|days?|lived?|long|since|until|time|period|era|\d+)\b",
                       re.IGNORECASE)


def asks_about_time(question: str) -> bool:
    """Does the question ask when, how old, in what year, or which came first?"""
    return bool(_TEMPORAL.search(question))


def prune_parentheses(sentence: str, scripts: frozenset[str], question_words: frozenset[str], *,
                      glosses: bool = True, dates: bool = False) -> str:
    """The sentence without the parts of its parentheses the question cannot use. A parenthesis is split at
    ";"; a part holding one of ``question_words`` (lower case) always stays. With ``glosses``, a part holding a
    letter of a script the question does not use goes — native names and pronunciations glossing a name
    ("Mikhail Gorbachev ( ; Russian: Михаи́л Горбачёв ; ] ; born 2 March 1931)" → "(born 2 March 1931)"; "What
    is his Russian name?" keeps it; within a part, only the comma-separated pieces in that script go) — and so
    does what is left of such a gloss (punctuation, a bare label).
    With ``dates`` (for a question that does not ask about time, :func:`asks_about_time`), a part that is
    dates and nothing else goes too ("(born 11 April 1973)", "(June 12, 1802 – December 21, 1867)"). A
    parenthesis with no part left goes whole; everything outside parentheses is kept as it is."""
    if "(" not in sentence or not ((glosses and scripts) or dates):  # most sentences: nothing to look at
        return sentence

    def foreign(text: str) -> bool:
        return any(ch.isalpha() and _script(ch) not in scripts for ch in text)

    def clean(part: str) -> str:
        """The part as it may stay ("" when it goes)."""
        words = {w.lower() for w in re.findall(r"\w+", part)}
        if words & question_words:
            return part
        if glosses and foreign(part):  # "櫻井 敦司 , Sakurai Atsushi , born … in Fujioka, Gunma": the name goes
            part = ", ".join(x.strip() for x in part.split(",") if not foreign(x))
        if glosses and _LABEL_ONLY.match(part.strip()):  # 'Italian: ""', or a label whose gloss just went
            return ""
        if dates and _DATES_ONLY.match(part) and re.search(r"\d{3,4}", part):  # a year in it
            return ""
        return part if re.search(r"\w", part) else ""

    def repl(m: re.Match[str]) -> str:
        parts = [p.strip() for p in m.group(1).split(";")]
        kept = [c for c in map(clean, parts) if c]
        if kept == parts:
            return m.group(0)
        return f" ({'; '.join(kept)})" if kept else ""

    return _PAREN.sub(repl, sentence)


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])|\n")


def names_title(text: str, name: str) -> bool:
    """Does the first sentence of ``text`` name ``name`` (a :func:`bare_title`) — the phrase as whole words
    anywhere in it ("The Memphis Hustle are …", "… commonly known as the DISCLOSE Act"), or, for a name of two
    words or more, every one of its words ("Cressida Bonas" in "Cressida Curzon Bonas (born …") — so a reader
    of the sentence knows which document it is without the title line? "Tomori was born …" does not name
    "Oyewale Tomori"."""
    if not name:
        return False
    first = _SENTENCE_END.split(text.lstrip()[:400], maxsplit=1)[0].lower()
    if re.search(r"(?<!\w)" + re.escape(name) + r"(?!\w)", first):
        return True
    words = re.findall(r"\w+", name)
    return len(words) >= 2 and set(words) <= set(re.findall(r"\w+", first))


def gap_limit(scores: Sequence[float], cfg: TrimConfig) -> tuple[int, str]:
    """Adaptive-k over sentences: how many of the best-first ``scores`` to take, from the largest drop among
    the first ``cfg.gap_window`` (+ ``cfg.gap_buffer``), and the ledger's note for that stop."""
    top = list(scores[:cfg.gap_window + 1])
    if cfg.gap_window <= 0 or len(top) < 3:
        return len(scores), ""
    gaps = [top[i] - top[i + 1] for i in range(len(top) - 1)]
    k = max(range(len(gaps)), key=lambda i: (gaps[i], -i)) + 1  # first of the largest drops
    limit = k + cfg.gap_buffer
    return limit, (f"score gap: the largest drop among the best {len(top)} sentences comes after sentence {k} "
                   f"({top[k - 1]:.2f} → {top[k]:.2f}); {limit} taken")


@lru_cache(maxsize=1)
def default_terms() -> TermsFn:
    """The BM25 analyzer with default settings (memoised): the terms a default sparse index matches."""
    return Analyzer(BM25Config()).terms


def question_weights(q: Sequence[str], sents: list[list[str]], terms: TermsFn,
             weights: WeightsFn | None) -> dict[str, float]:
    """Each question term's weight: the index's idf, or idf over the candidate chunks themselves."""
    if not q:
        return {}
    if weights is not None:
        return {t: max(float(v), 0.0) for t, v in weights(q).items()}
    chunk_sets = [set(terms(" ".join(ss))) for ss in sents]
    n = len(chunk_sets)
    return {t: float(np.log(1 + (n - df + 0.5) / (df + 0.5)))
            for t in q for df in [sum(1 for cs in chunk_sets if t in cs)]}


def question_share(q: Sequence[str], sets: Sequence[frozenset[str]], w: Mapping[str, float]) -> list[float]:
    """Per sentence (``sets``: its terms), the share of the question's term weight it contains (0 … 1)."""
    total = sum(w.get(t, 0.0) for t in q)
    if not q or not sets or total <= 0:
        return [0.0] * len(sets)
    return [sum(w.get(t, 0.0) for t in q if t in st) / total for st in sets]


def retrieval_ranks(items: Sequence[Scored]) -> list[int]:
    """Rank of each item in retrieval (fused) order when known, else in list order."""
    if items and all(s.fused_score is not None for s in items):
        order = sorted(range(len(items)), key=lambda i: (-float(items[i].fused_score or 0.0), i))
        return [order.index(i) for i in range(len(items))]
    return list(range(len(items)))


def minmax(vals: Sequence[float]) -> list[float]:
    if not vals:
        return []
    arr = np.asarray(vals, dtype=float)
    lo, hi = float(arr.min()), float(arr.max())
    if hi - lo < 1e-12:
        return [1.0] * len(arr)
    return list((arr - lo) / (hi - lo))


def dialog_flow(previous_answer: str, term_sets: Sequence[Sequence[frozenset[str]]], terms: TermsFn,
                match: float) -> list[tuple[int, int]]:
    """Where the conversation goes next: per chunk, the (chunk, sentence) right after the sentence the previous
    answer came from — the one whose terms overlap the answer's last sentence the most, at least ``match``
    (Jaccard). A question that follows an answer most often asks about what the document says next (QuAC's
    dialogs move forward through their section; conversational QA models feed the previous answer's position)."""
    parts = split_sentences(previous_answer) if previous_answer.strip() else []
    last = frozenset(terms(parts[-1])) if parts else frozenset()
    if not last:
        return []
    out = []
    for ci, sets in enumerate(term_sets):
        best_j, best_v = -1, 0.0
        for j, ts in enumerate(sets):
            v = len(last & ts) / len(last | ts) if ts else 0.0
            if v > best_v:
                best_j, best_v = j, v
        if best_v >= match and best_j + 1 < len(sets):
            out.append((ci, best_j + 1))
    return out

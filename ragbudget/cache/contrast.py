"""Contrast verifier: a semantic hit needs evidence that the two questions ask the same thing.

Cosine and the number/entity/negation guards say that two questions are about the same thing. What
decides whether they *ask* the same thing is the words in which they differ, so this module looks only
at the difference (after removing ways of asking, :data:`~.contrast_lexicon.FILLERS`):

1. **Contrast classes** (``contrast``): a word on one side and a word on the other that are antonyms
   (WordNet direct and indirect antonyms, hand list, ``un-/in-/dis-/non-`` and ``-less/-ful`` affixes),
   two values of one closed class (currencies, units, weekdays, tense, modality, person, wh-word...),
   or one adjective in two degrees (``cheap`` / ``cheapest``). A word of such a class, a comparative or
   superlative, or a word with an antonym ("polar") that only one side has is a contrast too.
2. **Role swap** (``role_swap``): two content words in the opposite order around a word both sides
   share ("Did Google acquire YouTube?" / "Did YouTube acquire Google?"); a passive with ``by`` flips
   the order back ("Was YouTube acquired by Google?" is the same question).
3. **Substitution** (``substitution``): a content word on each side that the other lacks needs positive
   evidence — same lemma (inflections are equal already), a shared frequent WordNet sense or a hand
   synonym group, or (optional) a MiniLM cosine of the two words ≥ ``word_similarity``; never when they
   contrast. Unexplained substitutions are rejected.
4. **Content** (``content``): what remains on one side only is allowed up to ``max_unmatched`` words
   (or that share of the side's content words), as in :mod:`~ragbudget.cache.guards`.

:func:`check` returns the first failing check's name, or None. It is a pure function of the two texts
(plus the optional word-similarity callable) and costs tens of microseconds; the lexicon is loaded once.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

from ..kernels.text import GUARD_STOPWORDS, contrast_tokens, stem
from . import contrast_lexicon as hand
from .wordlists import NEGATIONS, NUMBER_WORDS

WordSimilarity = Callable[[str, str], float]
"""``similarity(word_a, word_b) -> cosine``: optional last evidence for a substituted word pair."""

LEXICON_PATH = Path(__file__).with_name("data") / "wordnet_lexicon.json.gz"
_AFFIXES = ("un", "in", "im", "il", "ir", "dis", "non", "non-", "anti", "mis", "de")
_COORD = frozenset({"and", "or", "nor", "vs", "versus", "&", "plus"})  # "X and Y" = "Y and X"
_ARTICLES = frozenset({"a", "an", "the"})
_MAX_SPAN = 5  # a role swap is a local reordering: at most this many tokens between the two words
_BE = frozenset({"is", "was", "were", "are", "been", "being", "be", "get", "got", "gets", "getting"})
# Classes whose words are function words: they contrast only when both sides use the class.
_BOTH_SIDES = frozenset({"tense", "modal", "person", "wh"})
FUNCTION = GUARD_STOPWORDS | NEGATIONS


@dataclass(frozen=True)
class Lexicon:
    """Lookup tables, keyed by stems of lemmas (see :func:`lexicon`)."""

    antonyms: frozenset[frozenset[str]]
    polar: frozenset[str]
    synonyms: dict[str, frozenset[int]]
    classes: dict[str, tuple[tuple[str, int], ...]]
    exceptions: dict[str, str]
    degree: dict[str, tuple[str, str]]


@lru_cache(maxsize=1)
def lexicon() -> Lexicon:
    """WordNet tables (shipped, built by :mod:`~ragbudget.cache.build_lexicon`) merged with the hand list."""
    with gzip.open(LEXICON_PATH, "rt", encoding="utf-8") as f:
        wn = json.load(f)
    pairs = [(a, b) for a, b in wn["antonyms"]] + list(hand.ANTONYMS)
    antonyms = frozenset(frozenset((stem(a), stem(b))) for a, b in pairs if stem(a) != stem(b))
    polar = frozenset(stem(w) for w in wn["polar"])
    synonyms: dict[str, set[int]] = {}
    groups = [g for g in wn["synsets"]] + [sorted(g) for g in hand.SYNONYMS]
    for i, group in enumerate(groups):
        for w in group:
            synonyms.setdefault(stem(w), set()).add(i)
    classes: dict[str, list[tuple[str, int]]] = {}
    for name, cls in hand.CLASSES.items():
        for gid, group in enumerate(cls):
            for w in group:
                for k in {w, stem(w)}:
                    classes.setdefault(k, []).append((name, gid))
    degree = {**{k: (v[0], v[1]) for k, v in wn["degree"].items()}, **hand.DEGREE_FORMS}
    return Lexicon(antonyms=antonyms, polar=polar, synonyms={k: frozenset(v) for k, v in synonyms.items()},
                   classes={k: tuple(dict.fromkeys(v)) for k, v in classes.items()},
                   exceptions=dict(wn["exceptions"]), degree=degree)


@dataclass(frozen=True)
class Word:
    """One token of a question: surface form, lemma-like base, comparison key, degree."""

    text: str
    base: str
    key: str
    degree: str  # "", "er" or "est"
    function: bool


@lru_cache(maxsize=65536)
def analyse(token: str) -> Word:
    """Lemma, stem key and degree of one lowercase token ("cheapest" -> base cheap, degree est)."""
    lex = lexicon()
    base, deg = lex.degree.get(token, (lex.exceptions.get(token, token), ""))
    key = stem(base) + (f"+{deg}" if deg else "")
    return Word(token, base, key, deg, token in FUNCTION or token in NUMBER_WORDS)


def strip_fillers(text: str) -> str:
    """``text`` lowercased, without the phrases that only change how a question is asked (and with a phrase
    that asks what a wh-word asks rewritten to it)."""
    t = text.casefold().replace("’", "'")
    for pattern, repl in hand.REWRITES:
        t = pattern.sub(repl, t)
    for pattern in hand.FILLERS:
        t = pattern.sub(" ", t)
    return t


WH_WORDS = ("what", "which", "who", "whom", "whose", "where", "when", "why", "how")
WH_GROUP = {"which": "what", "how": "what", "whom": "who", "whose": "who"}  # these ask alike
AUXILIARIES = frozenset({"is", "are", "was", "were", "do", "does", "did", "can", "could", "should", "would",
                         "will", "shall", "may", "might", "must", "has", "have", "had", "am"})
_TIME_NOUNS = frozenset({"year", "years", "date", "day", "month", "time", "century", "decade", "era", "season"})
_CAUSE_VERBS = frozenset({"causes", "cause", "caused", "makes", "make", "made"})


def _form(wh: str, nxt: str) -> str:
    if wh in ("what", "which") and nxt in _TIME_NOUNS:
        return "when"
    if wh == "what" and nxt in _CAUSE_VERBS:  # "What causes hiccups?" asks "Why do we get hiccups?"
        return "why"
    return WH_GROUP.get(wh, wh)


def question_forms(text: str) -> frozenset[str]:
    """What kinds of answer a question may ask for: the groups of its wh-words ("what" for what/which/how:
    "How are X and Y different?" asks what "What is the difference between X and Y?" asks; "when" for
    "what year", "which date" …; "why" for "what causes/makes"; "who", "where"), plus "yesno" when it opens
    with an auxiliary ("Did …", "Do we know where …"); empty when not question-shaped. Two questions with
    the same words but no form in common ask different things ("did X tour?" / "who did X tour with?")."""
    toks = contrast_tokens(strip_fillers(text))
    wh = frozenset(_form(t, nxt) for t, nxt in zip(toks, [*toks[1:], ""]) if t in WH_WORDS)
    return wh | {"yesno"} if toks and toks[0] in AUXILIARIES else wh


def words(text: str) -> list[Word]:
    """The analysed tokens of ``text`` after :func:`strip_fillers` (digits dropped: the number guard's)."""
    return [analyse(t[:-2] if t.endswith("'s") else t) for t in contrast_tokens(strip_fillers(text))]


def _classes_of(w: Word) -> tuple[tuple[str, int], ...]:
    lex = lexicon()
    return lex.classes.get(w.text) or lex.classes.get(w.base) or lex.classes.get(stem(w.base), ())


def _affix_pair(a: str, b: str) -> bool:
    if len(a) < len(b):
        a, b = b, a
    if any(a == p + b for p in _AFFIXES) and len(b) >= 3:
        return True
    for x, y in ((a, b), (b, a)):
        if x.endswith("less") and (y == x[:-4] or y == x[:-4] + "ful" or y.endswith("ful") and y[:-3] == x[:-4]):
            return True
    return False


def contrast_between(a: Word, b: Word) -> str | None:
    """Why ``a`` and ``b`` mean opposite or exclusive things ("antonym", a class name, "degree"), or None."""
    lex = lexicon()
    ka, kb = a.key.split("+")[0], b.key.split("+")[0]
    if ka == kb:
        return "degree" if a.degree != b.degree else None
    # the surface stem too: "lower" is the degree form of "low" and the verb that "raise" opposes
    if any(frozenset((x, y)) in lex.antonyms for x in {ka, stem(a.text)} for y in {kb, stem(b.text)}) \
            or _affix_pair(a.base, b.base) or _affix_pair(a.text, b.text):
        return "antonym"
    ca, cb = dict(_classes_of(a)), dict(_classes_of(b))
    for name in ca.keys() & cb.keys():
        if ca[name] != cb[name]:
            return name
    return None


def synonymous(a: Word, b: Word, similarity: WordSimilarity | None = None, min_similarity: float = 1.0) -> bool:
    """Positive evidence that ``b`` can replace ``a``: WordNet/hand synonyms, one closed-class group,
    or a word-embedding cosine ≥ ``min_similarity`` (only with ``similarity``)."""
    lex = lexicon()
    sa, sb = lex.synonyms.get(a.key), lex.synonyms.get(b.key)
    if sa and sb and sa & sb:
        return True
    ca, cb = dict(_classes_of(a)), dict(_classes_of(b))
    if any(ca[n] == cb[n] for n in ca.keys() & cb.keys()):
        return True
    return similarity is not None and min_similarity < 1.0 and similarity(a.text, b.text) >= min_similarity


def one_sided_contrast(w: Word) -> str | None:
    """Why a word that only one side has changes the question by itself (degree, class, polar), or None."""
    if w.degree or w.text in hand.DEGREE_MARKERS:
        return "degree"
    for name, _ in _classes_of(w):
        if name not in _BOTH_SIDES:
            return name
    if not w.function and (w.key in lexicon().polar or stem(w.text) in lexicon().polar):
        return "polar"
    return None


def _function_class_contrast(wa: list[Word], wb: list[Word]) -> str | None:
    """Tense, modality, person and wh-word: a contrast when both sides say it and say it differently.

    Tense compares the first tense marker of each side (the question's auxiliary); the other classes
    contrast when each side has a value the other lacks ("he" / "she", "should" / "can")."""
    for name in sorted(_BOTH_SIDES):
        ga = [g for w in wa for n, g in _classes_of(w) if n == name]
        gb = [g for w in wb for n, g in _classes_of(w) if n == name]
        if not ga or not gb:
            continue
        if name == "tense":
            if ga[0] != gb[0]:
                return name
        elif set(ga) - set(gb) and set(gb) - set(ga):
            return name
    return None


def _passive_between(ws: list[Word], i: int, j: int) -> bool:
    lo, hi = min(i, j), max(i, j)
    return any(w.text == "by" for w in ws[lo + 1:hi]) and any(w.text in _BE for w in ws[:hi])


def role_swap(wa: list[Word], wb: list[Word]) -> tuple[str, str] | None:
    """Two content words whose order (voice-corrected) differs around a word both sides share."""
    def positions(ws: list[Word]) -> dict[str, int]:
        counts = Counter(w.key for w in ws if not w.function)
        return {w.key: i for i, w in enumerate(ws) if not w.function and counts[w.key] == 1}

    pa, pb = positions(wa), positions(wb)
    shared = [k for k in pa if k in pb]
    for n, x in enumerate(shared):
        for y in shared[n + 1:]:
            ia, ja, ib, jb = pa[x], pa[y], pb[x], pb[y]
            before_a = (ia < ja) ^ _passive_between(wa, ia, ja)
            before_b = (ib < jb) ^ _passive_between(wb, ib, jb)
            if before_a == before_b or max(abs(ia - ja), abs(ib - jb)) > _MAX_SPAN + 1:
                continue
            between_a = {w.key for w in wa[min(ia, ja) + 1:max(ia, ja)]}
            between_b = {w.key for w in wb[min(ib, jb) + 1:max(ib, jb)]}
            if (between_a | between_b) & _COORD:
                continue
            juxtaposed = bool(between_a) and bool(between_b) and (between_a | between_b) <= _ARTICLES
            if (between_a & between_b) - _ARTICLES or juxtaposed:
                # a word both sides share ties the two roles ("X acquire Y", "from X to Y"); with only
                # articles between them the two are juxtaposed roles ("Is a square a rectangle?")
                return (x, y)
    return None


@dataclass(frozen=True)
class ContrastSettings:
    """How much one-sided content a hit may keep, and the optional word-embedding evidence."""

    max_unmatched: int = 0
    max_unmatched_ratio: float = 0.2
    # MiniLM cosine of two substituted words that counts as a synonym (with ``similarity``); 1 = off.
    # Measured (BENCHMARKS.md, issue 13): at 0.80-0.90 it adds <= 0.5 points of MRPC hits, so the
    # cache does not pass a similarity function.
    word_similarity: float = 1.0


def difference(stored: str, new: str) -> tuple[list[Word], list[Word], list[Word], list[Word]]:
    """(stored's words, new's words, words only in stored, words only in new), by key, with multiplicity."""
    wa, wb = words(stored), words(new)
    ca, cb = Counter(w.key for w in wa), Counter(w.key for w in wb)
    only_a, only_b = ca - cb, cb - ca
    return (wa, wb, [w for w in {w.key: w for w in wa}.values() if w.key in only_a],
            [w for w in {w.key: w for w in wb}.values() if w.key in only_b])


@dataclass(frozen=True)
class Verdict:
    """What :func:`explain` found: the failing check (None: same question) and the word counts behind it.

    ``hard`` marks a contrast both sides state (an antonym or class pair, tense/modality/person/wh) or a
    role swap: evidence of a different question that no score may override. The other reasons
    (``substitution``, a one-sided ``contrast``, ``content``) are absence of evidence; a learned verifier
    (:mod:`~ragbudget.cache.verifier`) may still accept those near misses."""

    reason: str | None
    hard: bool = False
    left_a: int = 0  # content words only the stored question has, after synonyms
    left_b: int = 0  # ... only the new question has
    n_a: int = 0  # content words (distinct keys) of the stored question
    n_b: int = 0
    one_sided: int = 0  # one-sided degree / class / polar words
    shared: int = 0  # content keys both sides have


def check(stored: str, new: str, settings: ContrastSettings = ContrastSettings(),
          similarity: WordSimilarity | None = None) -> str | None:
    """Name of the check that finds ``new`` asking something else than ``stored``; None if the same."""
    return explain(stored, new, settings, similarity).reason


def explain(stored: str, new: str, settings: ContrastSettings = ContrastSettings(),
            similarity: WordSimilarity | None = None) -> Verdict:
    """:func:`check` with the counts behind its answer (see :class:`Verdict`)."""
    wa, wb, only_a, only_b = difference(stored, new)
    if _function_class_contrast(wa, wb):
        return Verdict("contrast", hard=True)
    for a in only_a:
        for b in only_b:
            if contrast_between(a, b):
                return Verdict("contrast", hard=True)
    if role_swap(wa, wb):
        return Verdict("role_swap", hard=True)
    left_a = [w for w in only_a if not w.function]
    left_b = [w for w in only_b if not w.function]
    spare_a = [w for w in only_a if w.function]  # "get" may stand for "obtain"
    spare_b = [w for w in only_b if w.function]
    for left, other, spare in ((left_a, left_b, spare_b), (left_b, left_a, spare_a)):
        for a in list(left):
            match = next((b for b in other + spare if synonymous(a, b, similarity, settings.word_similarity)), None)
            if match is not None:
                left.remove(a)
                for pool in (other, spare):
                    if match in pool:
                        pool.remove(match)
    keys_a = {w.key for w in wa if not w.function}
    keys_b = {w.key for w in wb if not w.function}
    one_sided = sum(1 for w in left_a + left_b if one_sided_contrast(w)) + sum(
        1 for w in only_a + only_b if w.text in hand.DEGREE_MARKERS)
    reason = None
    if left_a and left_b:
        reason = "substitution"
    elif one_sided:
        reason = "contrast"
    elif any(len(left) > settings.max_unmatched and len(left) > settings.max_unmatched_ratio * max(n, 1)
             for left, n in ((left_a, len(keys_a)), (left_b, len(keys_b)))):
        reason = "content"
    return Verdict(reason, False, len(left_a), len(left_b), len(keys_a), len(keys_b), one_sided, len(keys_a & keys_b))

"""Words: the package's tokenisers, its one stop-word list, stemming and content words.

Every stage that looks at words rather than model tokens (BM25, the semantic-cache guards, history
compression, query condensing, the extractive answerer, the router) takes them from here.

Tokenisers. A few patterns are genuinely different, each named for the job it does. They are not
interchangeable (swapping one changes its caller's results), so each stays with its caller:

- :func:`bm25_tokens`: ASCII letter/digit runs of the lowercased text. The BM25 analyzer (indexes on disk).
- :func:`unicode_words`: letters/digits of any script, inner apostrophes kept. The semantic-cache guards.
- :func:`compound_words`: ASCII words keeping hyphens and apostrophes. History compression, query condensing.
- :func:`clitic_words`: ASCII words with at most one clitic ("it's"). The extractive answerer.
- :func:`contrast_tokens`: lowercase letter words and currency signs. The cache's contrast check.
- :func:`route_words`: runs of word characters, apostrophes and hyphens. The router's question length.

Stop words. :data:`STOPWORDS` is the one list: NLTK's English list as shipped inside llama-index-core
(read from the file, so it is exactly what NLTK users get). Callers that were tuned with a different list
use a named variant, written as :data:`STOPWORDS` plus or minus small named sets with the reason for each;
tests/test_text.py pins every variant to the list its caller used before, word for word.

Stemming. :func:`stem` is Snowball English (Porter 2), one stemmer per thread (a shared snowball stemmer
fails under concurrent calls: ``IndexError: string index out of range`` in ``find_among_b``, seen in the
load test), memoised per word.
"""

from __future__ import annotations

import importlib.util
import re
import threading
from functools import lru_cache
from pathlib import Path
from typing import Iterable

import snowballstemmer

# ------------------------------------------------------------------------------------------- tokenisers

BM25_TOKEN = re.compile(r"[a-z0-9]+")
"""ASCII letters and digits, matched in lowercased text; anything else separates."""

UNICODE_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
"""Letters and digits of any script, joined by inner straight or curly apostrophes; '_' and '-' separate."""

COMPOUND_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'\-]*")
"""An ASCII letter or digit followed by letters, digits, apostrophes and hyphens."""

CLITIC_WORD = re.compile(r"[A-Za-z0-9]+(?:'[a-z]+)?")
"""ASCII letters and digits with at most one lowercase clitic after an apostrophe; hyphens separate."""

CONTRAST_TOKEN = re.compile(r"[a-z]+(?:'[a-z]+)*|[$€£¥]")
"""Lowercase ASCII letters joined by inner apostrophes, or one currency sign; digits are dropped."""

ROUTE_WORD = re.compile(r"[\w'-]+")
"""Word characters of any script (digits and '_' included), apostrophes and hyphens."""


def bm25_tokens(text: str) -> list[str]:
    """The BM25 analyzer's tokens: ASCII alphanumeric runs of the lowercased text.

    "State-of-the-art" → state, of, the, art; "don't" → don, t; "café" → caf. Frozen: indexes on disk were
    analysed with it (their manifests record only the analyzer's stemmer and stop-word settings)."""
    return BM25_TOKEN.findall(text.lower())


def unicode_words(text: str) -> list[str]:
    """Words of any script with inner apostrophes kept, case kept: "O’Brien's", "don't", "São", "4.5" → 4, 5.

    The semantic-cache guards' tokeniser: entities, negations ("don't" stays one word), number words and
    content words are read from it."""
    return UNICODE_WORD.findall(text)


def compound_words(text: str) -> list[str]:
    """ASCII words that keep hyphens and apostrophes ("state-of-the-art", "Zappa's", "rock'n'roll"), case kept.

    History compression and query condensing: a hyphenated compound is one topic word there."""
    return COMPOUND_WORD.findall(text)


def clitic_words(text: str) -> list[str]:
    """ASCII words with one optional lowercase clitic ("it's", "don't"); hyphens split ("media-rich" → 2).

    The extractive answerer's terms."""
    return CLITIC_WORD.findall(text)


def contrast_tokens(text: str) -> list[str]:
    """Lowercase letter words (inner apostrophes kept) and currency signs of already-lowercased ``text``.

    The contrast check's tokens: hyphens split ("media-rich" = "media rich"), digits are left to the
    number guard, and "$" / "€" are kept because a currency change is a contrast."""
    return CONTRAST_TOKEN.findall(text)


def route_words(text: str) -> list[str]:
    """Runs of word characters, apostrophes and hyphens: exactly ``re.findall(r"[\\w'-]+", text)``.

    The router's question-length measure (it passes lowercased text)."""
    return ROUTE_WORD.findall(text)


# ------------------------------------------------------------------------------------------- stop words

_NLTK_ENGLISH = ("_static", "nltk_cache", "corpora", "stopwords", "english")


def _nltk_english_file() -> Path:
    """NLTK's English stop-word file inside llama-index-core, located without importing llama-index."""
    spec = importlib.util.find_spec("llama_index.core")
    if spec is None or not spec.submodule_search_locations:  # pragma: no cover - a hard dependency
        raise ImportError("llama-index-core is not installed (it ships the NLTK English stop-word list)")
    return Path(next(iter(spec.submodule_search_locations))).joinpath(*_NLTK_ENGLISH)


@lru_cache(maxsize=1)
def nltk_english() -> tuple[str, ...]:
    """NLTK's English stop-word list as shipped, in file order (contractions such as "don't" included)."""
    return tuple(_nltk_english_file().read_text(encoding="utf-8").split())


STOPWORDS: frozenset[str] = frozenset(t for w in nltk_english() for t in bm25_tokens(w))
"""The stop-word list: NLTK English, its entries split like :func:`bm25_tokens` ("don't" → "don", "t").

The split adds nothing (NLTK lists each piece too), so this is NLTK's list without the contractions. The
BM25 analyzer uses it as is."""

CONTRACTION_STUBS = frozenset(
    "ain aren couldn didn doesn don hadn hasn haven isn ma mightn mustn needn shan shouldn wasn weren won "
    "wouldn".split())
"""NLTK's first halves of contractions ("don" of "don't", "won" of "won't"). Stop words for a tokeniser that
splits at the apostrophe; a tokeniser that keeps "don't" whole only meets them as real words ("won",
"Don"), so the lists of such callers leave them out."""

CLITICS = frozenset("d ll m o re s t ve y".split())
"""NLTK's second halves of contractions ('d, 'll, 'm, 're, 's, 't, 've) and o', y'. Left out where the
tokeniser keeps the clitic on its word (a lone "s" there is an initial: "U S")."""

NLTK_NEGATIONS = frozenset({"no", "nor", "not"})
"""The negations on NLTK's list. The cache guards compare negations, so these are not their stop words."""

MODAL_VERBS = frozenset("could may might must shall would".split())
"""Modals NLTK does not list ("can", "should", "will" it does)."""

REPORTING_WORDS = frozenset("according said say says told get got also us".split())
"""Verbs of reporting and other words that rephrase a question without changing what it asks
("what did the CEO say about X" = "according to the CEO, X"). Cache guards only."""

CONVERSATION_CONTENT = frozenset(
    "above again against am because below between both doing down during each few further having hers "
    "herself him himself itself myself nor now off once ours ourselves theirs themselves through under "
    "until while yours yourself yourselves".split())
"""NLTK stop words that history compression and query condensing count as content: relations of place,
time and cause ("between", "during", "because", "until"), quantifiers ("both", "each", "few"), reflexive
and independent possessive pronouns, and "am", "doing", "having". Their hand list was shorter than NLTK's;
these stay content words so that the history and follow-up results measured on CANARD do not move."""

CONVERSATION_EXTRA = frozenset("also could may might would us whose yes".split())
"""Words the conversation scorers drop although NLTK keeps them: modals without must/shall, "also",
"us", "whose", "yes" — they say nothing about a conversation's topic."""

CHAT_FILLERS = frozenset("know like ok okay please tell thanks".split())
"""Chat politeness and fillers ("tell me more", "ok thanks"): never a follow-up question's topic."""

FOCUS_WORDS = frozenset("also here if just more most only other out own same so too up very".split())
"""Degree, focus and comparison words ("more", "most", "only", "same", "very", "too") that the extractive
answerer keeps as terms: "the most common X" then prefers the sentence that says "most"."""

GUARD_STOPWORDS: frozenset[str] = (
    (STOPWORDS - CONTRACTION_STUBS - NLTK_NEGATIONS - {"now", "o"}) | MODAL_VERBS | REPORTING_WORDS)
"""Semantic-cache guards (content words, entities, the contrast check's function words): NLTK without the
contraction stubs (:func:`unicode_words` keeps "don't" whole), without negations (compared, not ignored),
without "now" (a time a question can turn on) and "o" (an initial: "O Connell"); plus modals and
:data:`REPORTING_WORDS`."""

CONVERSATION_STOPWORDS: frozenset[str] = (
    (STOPWORDS - CONTRACTION_STUBS - CLITICS - CONVERSATION_CONTENT) | CONVERSATION_EXTRA)
"""History compression (which earlier sentences share the question's words): see
:data:`CONVERSATION_CONTENT` and :data:`CONVERSATION_EXTRA`. :func:`compound_words` keeps contractions
whole, so their pieces are left out."""

CONDENSE_STOPWORDS: frozenset[str] = CONVERSATION_STOPWORDS | CHAT_FILLERS
"""Query condensing (does a follow-up name its topic?): the conversation list plus :data:`CHAT_FILLERS`."""

EXTRACTIVE_STOPWORDS: frozenset[str] = (
    (CONVERSATION_STOPWORDS - FOCUS_WORDS) | {"between", "during", "under", "must", "shall"})
"""The extractive answerer: the conversation list less :data:`FOCUS_WORDS`, plus "between", "during",
"under", "must" and "shall" (on its hand list, unlike the conversation one; kept so answers do not change)."""


def content_words(tokens: Iterable[str], stopwords: frozenset[str] = STOPWORDS, *, min_len: int = 1) -> list[str]:
    """The lowercased ``tokens`` that are not stop words and have at least ``min_len`` characters, in order.

    ``content_words(compound_words(text), CONDENSE_STOPWORDS, min_len=2)``: pick the tokeniser and the list."""
    return [w for w in (t.lower() for t in tokens) if len(w) >= min_len and w not in stopwords]


# -------------------------------------------------------------------------------------------- stemming

_local = threading.local()


def _stemmer() -> snowballstemmer.stemmer:
    s = getattr(_local, "stemmer", None)
    if s is None:
        s = _local.stemmer = snowballstemmer.stemmer("english")
    return s


@lru_cache(maxsize=262144)
def stem(word: str) -> str:
    """The English (Porter 2) stem of one lowercase word; safe from any thread, memoised."""
    return _stemmer().stemWord(word)


def stem_words(words: Iterable[str]) -> list[str]:
    """:func:`stem` of each word, in order."""
    return [stem(w) for w in words]


def stemmed_content_words(tokens: Iterable[str], stopwords: frozenset[str] = STOPWORDS) -> list[str]:
    """:func:`content_words` stemmed: the terms that lexical matching compares."""
    return stem_words(content_words(tokens, stopwords))


__all__ = [
    "BM25_TOKEN", "CHAT_FILLERS", "CLITICS", "CLITIC_WORD", "COMPOUND_WORD", "CONDENSE_STOPWORDS",
    "CONTRACTION_STUBS", "CONTRAST_TOKEN", "CONVERSATION_CONTENT", "CONVERSATION_EXTRA", "CONVERSATION_STOPWORDS",
    "EXTRACTIVE_STOPWORDS", "FOCUS_WORDS", "GUARD_STOPWORDS", "MODAL_VERBS", "NLTK_NEGATIONS", "REPORTING_WORDS",
    "ROUTE_WORD", "STOPWORDS", "UNICODE_WORD", "bm25_tokens", "clitic_words", "compound_words", "content_words",
    "contrast_tokens", "nltk_english", "route_words", "stem", "stem_words", "stemmed_content_words",
    "unicode_words",
]

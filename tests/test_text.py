"""ragbudget.kernels.text: tokenisers, the stop-word list and its named variants, content words, stemming."""

import re
from concurrent.futures import ThreadPoolExecutor

import pytest
import snowballstemmer

from ragbudget.kernels import text
from ragbudget.kernels.text import (CONDENSE_STOPWORDS, CONVERSATION_STOPWORDS, EXTRACTIVE_STOPWORDS, GUARD_STOPWORDS,
                            STOPWORDS, bm25_tokens, clitic_words, compound_words, content_words, contrast_tokens,
                            nltk_english, route_words, stem, stem_words, stemmed_content_words, unicode_words)

SAMPLE = "Don't you know O’Brien's café? State-of-the-art rock'n'roll, it's 4.5% in São Paulo; $5 or €3_x"

# ------------------------------------------------------------------------------------------- tokenisers


def test_bm25_tokens_are_lowercase_ascii_alnum_runs():
    assert bm25_tokens(SAMPLE) == ["don", "t", "you", "know", "o", "brien", "s", "caf", "state", "of", "the", "art",
                                   "rock", "n", "roll", "it", "s", "4", "5", "in", "s", "o", "paulo", "5", "or", "3",
                                   "x"]
    assert bm25_tokens("") == [] and bm25_tokens("— … !") == []


def test_unicode_words_keep_scripts_and_inner_apostrophes():
    assert unicode_words(SAMPLE) == ["Don't", "you", "know", "O’Brien's", "café", "State", "of", "the", "art",
                                     "rock'n'roll", "it's", "4", "5", "in", "São", "Paulo", "5", "or", "3", "x"]
    assert unicode_words("'quoted' words_with_underscores") == ["quoted", "words", "with", "underscores"]


def test_compound_words_keep_hyphens_and_apostrophes():
    assert compound_words(SAMPLE) == ["Don't", "you", "know", "O", "Brien's", "caf", "State-of-the-art",
                                      "rock'n'roll", "it's", "4", "5", "in", "S", "o", "Paulo", "5", "or", "3", "x"]
    assert compound_words("-lead and trailing- words'") == ["lead", "and", "trailing-", "words'"]


def test_clitic_words_keep_one_lowercase_clitic_and_split_hyphens():
    assert clitic_words(SAMPLE) == ["Don't", "you", "know", "O", "Brien's", "caf", "State", "of", "the", "art",
                                    "rock'n", "roll", "it's", "4", "5", "in", "S", "o", "Paulo", "5", "or", "3", "x"]
    assert clitic_words("IT'S") == ["IT", "S"]  # an uppercase clitic is a word of its own


def test_contrast_tokens_are_letter_words_and_currency_signs():
    assert contrast_tokens(SAMPLE.lower()) == ["don't", "you", "know", "o", "brien's", "caf", "state", "of", "the",
                                               "art", "rock'n'roll", "it's", "in", "s", "o", "paulo", "$", "or", "€",
                                               "x"]
    assert contrast_tokens("media-rich £10 ¥") == ["media", "rich", "£", "¥"]


@pytest.mark.parametrize("s", [SAMPLE, SAMPLE.lower(), "", "a--b ''x'' _y_ 3.14 naïve İstanbul ﬁne straße",
                               "What's the half-life of C-14?", "tabs\tand\nnewlines — dashes"])
def test_route_words_reproduce_the_router_pattern(s):
    assert route_words(s) == re.findall(r"[\w'-]+", s)


# ------------------------------------------------------------------------------------------- stop words


def test_stopwords_are_nltk_english_split_like_bm25_tokens():
    raw = nltk_english()
    assert len(raw) == len(set(raw)) > 150 and "don't" in raw and "the" in raw
    assert STOPWORDS == {t for w in raw for t in bm25_tokens(w)}
    assert STOPWORDS == {w for w in raw if "'" not in w}  # NLTK lists every piece of its contractions
    assert all(re.fullmatch(r"[a-z]+", w) for w in STOPWORDS)


# The lists the callers used before ragbudget.kernels.text existed, word for word: each variant must stay equal to
# its caller's list (guard decisions, history compression, condensing and extractive answers depend on them).
OLD_GUARDS = frozenset("""
a about above after again against all also am an and any are as at be because been before being below
between both but by can could did do does doing down during each few for from further had has have
having he her here hers herself him himself his how i if in into is it its itself just me more most my
myself of off on once only or other our ours ourselves out over own same she should so some such than
that the their theirs them themselves then there these they this those through to too under until up
very was we were what when where which while who whom why will with would you your yours yourself
yourselves said says say told according would may might must shall us s t ll d m re ve y get got
""".split())
OLD_HISTORY = frozenset(
    "a an the and or but if of to in on at by for with from as is are was were be been being do does did "
    "has have had what which who whom whose when where why how that this these those it its he she they "
    "them his her their i you we me my your our us not no yes so than then there here about into over "
    "after before also can could would should will may might did does any some all more most other such "
    "only own same too very just up out".split())
OLD_CONDENSE = frozenset(
    "a an the and or but if of to in on at by for with from as is are was were be been being do does did "
    "has have had what which who whom whose when where why how that this these those it its he she they "
    "them his her their i you we me my your our us not no yes so than then there here about into over "
    "after before also can could would should will may might any some all more most other such only own "
    "same too very just up out tell know like please thanks ok okay".split())
OLD_EXTRACTIVE = frozenset(
    "a an the of to in on at for and or but is are was were be been being by with from as that this these "
    "those it its into than then there their what which who whom whose when where why how do does did "
    "can could should would will shall may might must have has had not no yes i you he she we they me "
    "my your our his her them us about over under between after before during any all some such".split())


@pytest.mark.parametrize("variant, old", [(GUARD_STOPWORDS, OLD_GUARDS), (CONVERSATION_STOPWORDS, OLD_HISTORY),
                                          (CONDENSE_STOPWORDS, OLD_CONDENSE), (EXTRACTIVE_STOPWORDS, OLD_EXTRACTIVE)],
                         ids=["guards", "history", "condense", "extractive"])
def test_each_variant_is_its_callers_old_list(variant, old):
    assert variant == old, (sorted(variant - old), sorted(old - variant))


def test_variant_amendments_are_real_amendments():
    """What a variant removes is on the NLTK list; what it adds is not (else the named set says nothing)."""
    for removed in (text.CONTRACTION_STUBS, text.CLITICS, text.NLTK_NEGATIONS, text.CONVERSATION_CONTENT):
        assert removed <= STOPWORDS
    for added in (text.MODAL_VERBS, text.REPORTING_WORDS, text.CONVERSATION_EXTRA, text.CHAT_FILLERS):
        assert not added & STOPWORDS
    assert text.FOCUS_WORDS <= CONVERSATION_STOPWORDS
    assert all(w + "'t" in nltk_english() for w in text.CONTRACTION_STUBS - {"ain", "ma"})


def test_the_callers_use_the_variants():
    from ragbudget.stages import condense
    from ragbudget.budget import history
    from ragbudget.cache import contrast, guards
    from ragbudget.llm import extractive

    assert history.content_words("The boundary-layer, between you and me, was thin") == {
        "boundary-layer", "between", "thin"}
    assert condense.content_words("Tell me more about Zappa's band, ok?") == ["zappa's", "band"]
    assert extractive.terms("Which pressures were measured during the tests?") == ["pressur", "measur", "test"]
    assert guards.content_words("What did the CEO say about Q3 revenue now?") == {"ceo", "revenu", "now"}
    assert contrast.FUNCTION >= GUARD_STOPWORDS


# ----------------------------------------------------------------------------------------- content words


def test_content_words_lowercase_filter_and_keep_order():
    assert content_words(["The", "Wings", "of", "a", "Wing"]) == ["wings", "wing"]
    assert content_words(["x", "Yz", "the"], frozenset(), min_len=2) == ["yz", "the"]
    assert content_words(compound_words("What about the Boundary-Layer of it? Tell me, OK"), CONDENSE_STOPWORDS,
                         min_len=2) == ["boundary-layer"]
    assert content_words([]) == []


def test_stemmed_content_words():
    assert stemmed_content_words(clitic_words("Which pressures were measured during the tests?"),
                                 EXTRACTIVE_STOPWORDS) == ["pressur", "measur", "test"]
    assert stemmed_content_words(bm25_tokens("The connections of connected nodes")) == ["connect", "connect", "node"]


# -------------------------------------------------------------------------------------------- stemming

WORDS = ["connections", "connected", "generalization", "hopefulness", "relational", "conditional",
         "rationalisation", "boundaries", "turbulence", "aerodynamically", "pressures", "vibrations"] * 50


def test_matches_snowball():
    ref = snowballstemmer.stemmer("english")
    assert stem_words(WORDS[:12]) == ref.stemWords(WORDS[:12])
    assert stem("running") == "run" and stem("") == ""


def test_concurrent_stemming_is_correct():
    """Stemming from many threads at once (a shared snowball stemmer fails under concurrency)."""
    expected = [snowballstemmer.stemmer("english").stemWord(w) for w in WORDS]
    stem.cache_clear()

    def work(offset: int) -> list[str]:
        words = WORDS[offset:] + WORDS[:offset]
        return [stem(w + "s") and stem(w) for w in words]  # misses and hits interleaved

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(work, range(16)))
    for offset, got in enumerate(results):
        assert got == expected[offset:] + expected[:offset]

"""Stemming from many threads at once (a shared snowball stemmer fails under concurrency)."""

from concurrent.futures import ThreadPoolExecutor

import snowballstemmer

from ragbudget.stemming import stem, stem_words

WORDS = ["connections", "connected", "generalization", "hopefulness", "relational", "conditional",
         "rationalisation", "boundaries", "turbulence", "aerodynamically", "pressures", "vibrations"] * 50


def test_matches_snowball():
    ref = snowballstemmer.stemmer("english")
    assert stem_words(WORDS[:12]) == ref.stemWords(WORDS[:12])


def test_concurrent_stemming_is_correct():
    expected = [snowballstemmer.stemmer("english").stemWord(w) for w in WORDS]
    stem.cache_clear()

    def work(offset: int) -> list[str]:
        words = WORDS[offset:] + WORDS[:offset]
        return [stem(w + "s") and stem(w) for w in words]  # misses and hits interleaved

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(work, range(16)))
    for offset, got in enumerate(results):
        assert got == expected[offset:] + expected[:offset]

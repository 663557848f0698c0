"""Word lists shared by the semantic-hit guards and the contrast verifier (a leaf: imports nothing).

:mod:`~ragbudget.cache.guards` and :mod:`~ragbudget.cache.contrast` both read these; keeping them here
lets imports point one way (guards → contrast → wordlists) instead of in a circle.
"""

from __future__ import annotations

NUMBER_WORDS = {
    "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6", "seven": "7",
    "eight": "8", "nine": "9", "ten": "10", "eleven": "11", "twelve": "12", "thirteen": "13",
    "fourteen": "14", "fifteen": "15", "sixteen": "16", "seventeen": "17", "eighteen": "18",
    "nineteen": "19", "twenty": "20", "thirty": "30", "forty": "40", "fifty": "50", "sixty": "60",
    "seventy": "70", "eighty": "80", "ninety": "90", "hundred": "100", "thousand": "1000",
    "million": "1e6", "billion": "1e9", "trillion": "1e12", "first": "1st", "second": "2nd",
    "third": "3rd", "half": "0.5", "dozen": "12", "once": "1x", "twice": "2x",
}

NEGATIONS = frozenset({
    "not", "no", "never", "none", "nobody", "nothing", "nowhere", "neither", "nor", "without",
    "cannot", "cant", "can't", "won't", "don't", "doesn't", "didn't", "isn't", "aren't", "wasn't",
    "weren't", "shouldn't", "wouldn't", "couldn't", "hasn't", "haven't", "hadn't", "mustn't", "unable",
    "fail", "fails", "failed", "lack", "lacks",
})

__all__ = ["NEGATIONS", "NUMBER_WORDS"]

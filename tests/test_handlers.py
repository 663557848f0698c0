"""Deterministic handlers answer without a model, and decline what they cannot answer exactly."""

from __future__ import annotations

import datetime as dt

import pytest

from ragbudget.route.handlers import UnsafeExpression, answer, convert, safe_eval

NOW = dt.datetime(2026, 12, 2, 14, 30, tzinfo=dt.timezone.utc)


@pytest.mark.parametrize("q,expected", [
    ("What is 2 + 3 * 4?", "14"), ("calculate (1.5 + 2.5) / 2", "2"), ("2^10", "1024"), ("7 % 3", "1"),
    ("what's 3 x 4", "12"), ("-2 * -3", "6"), ("10 / 4", "2.5"),
])
def test_arithmetic(q: str, expected: str) -> None:
    a = answer(q)
    assert a is not None and a.handler == "arithmetic" and a.text == expected


@pytest.mark.parametrize("expr", ["__import__('os').system('true')", "2 ** 100000", "(lambda: 1)()",
                                  "a + 1", "[1] * 3", "10 ** 10 ** 10"])
def test_safe_eval_refuses(expr: str) -> None:
    with pytest.raises(UnsafeExpression):
        safe_eval(expr)


@pytest.mark.parametrize("q", ["What is 7 / 0?", "What is 1990?", "what is the capital of France?",
                               "Why is 2 + 2 four?", "How many people live in Paris?"])
def test_declines_non_exact_questions(q: str) -> None:
    assert answer(q, now=lambda: NOW) is None


@pytest.mark.parametrize("q,expected", [
    ("convert 5 km to miles", "5 km = 3.106856 miles"), ("how many feet in 2 m", "2 m = 6.56168 feet"),
    ("100 F in C", "100 F = 37.777778 C"), ("0 celsius to kelvin", "0 celsius = 273.15 kelvin"),
    ("3 pounds in kg", "3 pounds = 1.360777 kg"), ("2 GiB in MB", "2 GiB = 2147.483648 MB"),
])
def test_units(q: str, expected: str) -> None:
    a = answer(q)
    assert a is not None and a.handler == "units" and a.text == expected


def test_incompatible_units_decline() -> None:
    assert convert(1, "km", "kg") is None
    assert answer("convert 5 km to kg") is None


@pytest.mark.parametrize("q,expected", [
    ("What is today's date?", "Wednesday, 02 December 2026"), ("what time is it", "14:30 (UTC)"),
    ("What day of the week is 2024-03-05?", "Tuesday"), ("days between 2024-01-01 and 2024-03-01", "60 days"),
    ("format 2024-03-05 as us", "03/05/2024"),
])
def test_datetime(q: str, expected: str) -> None:
    a = answer(q, now=lambda: NOW)
    assert a is not None and a.handler == "datetime" and a.text == expected


def test_invalid_date_declines() -> None:
    assert answer("what day of the week is 2024-02-31", now=lambda: NOW) is None


def test_faq_exact_match_only() -> None:
    faq = {"How do I reset my password?": "Use Settings → Security → Reset."}
    a = answer("  how do I reset my   password ", faq=faq)
    assert a is not None and a.handler == "faq" and a.text.startswith("Use Settings")
    assert answer("How do I reset my email password?", faq=faq) is None

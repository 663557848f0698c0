"""Deterministic handlers: questions that code answers exactly, without a model.

:func:`answer` tries, in order: an exact FAQ entry (case, spacing and trailing punctuation ignored),
arithmetic (a safe AST evaluator: numbers, + - * / // % ** and parentheses, bounded exponents), unit
conversion ("convert 5 km to miles", "how many feet in 2 m", temperatures) and date/time questions
("what is today's date", "what day of the week is 2024-03-05", "days between A and B"). It returns
``None`` when no handler applies, so the caller goes on to retrieval and a model.
"""

from __future__ import annotations

import ast
import datetime as dt
import operator
import re
from dataclasses import dataclass
from typing import Callable, Mapping

#: Part of every tool-cache key: bump it when a handler's answers change, so no stale answer is served.
VERSION = "1"
_NUM = r"[-+]?\d+(?:[.,]\d+)?(?:e[-+]?\d+)?"


@dataclass(frozen=True)
class HandlerAnswer:
    """An answer computed by code; ``handler`` names which (``faq``, ``arithmetic``, ``units``, ``datetime``)."""

    text: str
    handler: str
    cacheable: bool = True  # False when the answer depends on the clock ("what time is it")


# ---------------------------------------------------------------- FAQ
def _norm(q: str) -> str:
    return re.sub(r"\s+", " ", q.strip().lower()).rstrip(" ?!.")


def faq_lookup(question: str, faq: Mapping[str, str]) -> str | None:
    """The configured answer for an exactly matching question (normalised), else None."""
    table = {_norm(k): v for k, v in faq.items()}
    return table.get(_norm(question))


# ---------------------------------------------------------------- arithmetic
_BIN: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UN: dict[type, Callable[[float], float]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
MAX_EXPONENT = 100
MAX_MAGNITUDE = 1e100


class UnsafeExpression(ValueError):
    """The expression uses something other than numbers and arithmetic operators."""


def safe_eval(expr: str) -> float | int:
    """Evaluate an arithmetic expression without ``eval``: only numbers and + - * / // % ** ( )."""
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as err:
        raise UnsafeExpression(f"not an arithmetic expression: {expr!r}") from err

    def ev(node: ast.AST) -> float | int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
                and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow) and (abs(b) > MAX_EXPONENT or abs(a) > MAX_MAGNITUDE):
                raise UnsafeExpression(f"exponent too large in {expr!r}")
            out = _BIN[type(node.op)](a, b)
            if isinstance(out, complex) or abs(out) > MAX_MAGNITUDE:
                raise UnsafeExpression(f"result out of range in {expr!r}")
            return out
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UN:
            return _UN[type(node.op)](ev(node.operand))
        raise UnsafeExpression(f"unsupported element {type(node).__name__} in {expr!r}")

    return ev(tree)


def _fmt(x: float | int) -> str:
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    if isinstance(x, float):
        return f"{x:.10g}"
    return str(x)


_ARITH = re.compile(r"^(?:what(?:'s| is)|calculate|compute|evaluate)?\s*([-+*/%().\d\s^x×÷]+?)\s*(?:=\s*)?\??$",
                    re.I)


def arithmetic(question: str) -> str | None:
    m = _ARITH.match(question.strip())
    if not m or not re.search(r"\d\s*[-+*/%^x×÷]\s*[-+(\d.]", m.group(1)):
        return None
    expr = m.group(1).replace("^", "**").replace("×", "*").replace("÷", "/")
    expr = re.sub(r"(?<=\d)\s*x\s*(?=[\d(])", "*", expr)
    try:
        return _fmt(safe_eval(expr))
    except (UnsafeExpression, ZeroDivisionError, OverflowError):
        return None


# ---------------------------------------------------------------- units
_UNITS: dict[str, tuple[str, float]] = {}
for _dim, _table in {
    "length": {"m": 1.0, "meter": 1.0, "metre": 1.0, "km": 1000.0, "kilometer": 1000.0, "kilometre": 1000.0,
               "cm": 0.01, "centimeter": 0.01, "mm": 0.001, "millimeter": 0.001, "mile": 1609.344,
               "mi": 1609.344, "yard": 0.9144, "yd": 0.9144, "foot": 0.3048, "feet": 0.3048, "ft": 0.3048,
               "inch": 0.0254, "inches": 0.0254, "in": 0.0254},
    "mass": {"kg": 1.0, "kilogram": 1.0, "g": 0.001, "gram": 0.001, "mg": 1e-6, "lb": 0.45359237,
             "pound": 0.45359237, "lbs": 0.45359237, "oz": 0.028349523125, "ounce": 0.028349523125,
             "tonne": 1000.0, "ton": 1000.0},
    "volume": {"l": 1.0, "liter": 1.0, "litre": 1.0, "ml": 0.001, "milliliter": 0.001, "gallon": 3.785411784,
               "gal": 3.785411784, "cup": 0.2365882365, "pint": 0.473176473, "quart": 0.946352946},
    "time": {"s": 1.0, "second": 1.0, "sec": 1.0, "minute": 60.0, "min": 60.0, "hour": 3600.0, "h": 3600.0,
             "hr": 3600.0, "day": 86400.0, "week": 604800.0},
    "data": {"b": 1.0, "byte": 1.0, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "kib": 1024.0,
             "mib": 1024.0 ** 2, "gib": 1024.0 ** 3},
}.items():
    for _name, _factor in _table.items():
        _UNITS[_name] = (_dim, _factor)
_TEMPS = {"c": "c", "celsius": "c", "f": "f", "fahrenheit": "f", "k": "k", "kelvin": "k"}


def _unit(name: str) -> str:
    n = name.lower().strip(". ").removeprefix("degrees ").removeprefix("°")
    if n in _UNITS or n in _TEMPS:
        return n
    if n.endswith("es") and n[:-2] in _UNITS:
        return n[:-2]
    if n.endswith("s") and n[:-1] in _UNITS:
        return n[:-1]
    return n


def convert(value: float, src: str, dst: str) -> float | None:
    """``value`` in unit ``src`` expressed in ``dst``; None for unknown or incompatible units."""
    s, d = _unit(src), _unit(dst)
    if s in _TEMPS and d in _TEMPS:
        c = {"c": value, "f": (value - 32) * 5 / 9, "k": value - 273.15}[_TEMPS[s]]
        return {"c": c, "f": c * 9 / 5 + 32, "k": c + 273.15}[_TEMPS[d]]
    if s in _UNITS and d in _UNITS and _UNITS[s][0] == _UNITS[d][0]:
        return value * _UNITS[s][1] / _UNITS[d][1]
    return None


_UNIT_WORD = r"(?:degrees\s+)?°?[a-zA-Z]+"
_CONV = [
    re.compile(rf"^(?:convert\s+|what is\s+|how much is\s+)?({_NUM})\s*({_UNIT_WORD})\s+(?:in|to|into|as)\s+"
               rf"({_UNIT_WORD})\s*\??$", re.I),
    re.compile(rf"^how many\s+({_UNIT_WORD})\s+(?:are\s+)?in\s+({_NUM})\s*({_UNIT_WORD})\s*\??$", re.I),
]


def units(question: str) -> str | None:
    q = question.strip()
    m = _CONV[0].match(q)
    if m:
        value, src, dst = m.group(1), m.group(2), m.group(3)
    else:
        m = _CONV[1].match(q)
        if not m:
            return None
        dst, value, src = m.group(1), m.group(2), m.group(3)
    out = convert(float(value.replace(",", ".")), src, dst)
    if out is None:
        return None
    return f"{value} {src} = {_fmt(round(out, 6))} {dst}"


# ---------------------------------------------------------------- date / time
_DATE = r"(\d{4}-\d{2}-\d{2})"


def datetime_answer(question: str, now: dt.datetime) -> str | None:
    q = question.strip().lower().rstrip("?. ")
    if re.fullmatch(r"what(?:'s| is) (?:today's date|the date(?: today)?|the date today)", q):
        return now.strftime("%A, %d %B %Y")
    if re.fullmatch(r"what time is it(?: now)?|what(?:'s| is) the (?:current )?time", q):
        return now.strftime("%H:%M (%Z)").replace(" ()", "")
    m = re.fullmatch(rf"what day (?:of the week )?(?:is|was|will be) {_DATE}", q)
    if m:
        return dt.date.fromisoformat(m.group(1)).strftime("%A")
    m = re.fullmatch(rf"(?:how many )?days between {_DATE} and {_DATE}", q)
    if m:
        a, b = dt.date.fromisoformat(m.group(1)), dt.date.fromisoformat(m.group(2))
        return f"{abs((b - a).days)} days"
    m = re.fullmatch(rf"format {_DATE} as (iso|us|eu|long)", q)
    if m:
        d = dt.date.fromisoformat(m.group(1))
        return {"iso": d.isoformat(), "us": d.strftime("%m/%d/%Y"), "eu": d.strftime("%d/%m/%Y"),
                "long": d.strftime("%d %B %Y")}[m.group(2)]
    return None


def answer(question: str, *, faq: Mapping[str, str] | None = None,
           now: Callable[[], dt.datetime] = lambda: dt.datetime.now().astimezone()) -> HandlerAnswer | None:
    """A deterministic answer, or None when the question needs retrieval and a model."""
    if faq:
        hit = faq_lookup(question, faq)
        if hit is not None:
            return HandlerAnswer(hit, "faq")
    for name, fn in (("arithmetic", arithmetic), ("units", units)):
        out = fn(question)
        if out is not None:
            return HandlerAnswer(out, name)
    try:
        out = datetime_answer(question, now())
    except ValueError:
        out = None
    if out is None:
        return None
    return HandlerAnswer(out, "datetime", cacheable=re.search(_DATE, question) is not None)

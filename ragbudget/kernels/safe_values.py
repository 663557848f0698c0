"""What every backend can store and compare: no NUL, no unpaired surrogate, no NaN or ±Infinity.

PostgreSQL refuses NUL in text and NaN/Infinity in JSON; a lone surrogate cannot be encoded as UTF-8 at
all. The local backend would store them, so without one check the same input is a 500 on one backend and
data on the other. Filters, deletes and ingested records all pass through :func:`unsafe_reason`.
"""

from __future__ import annotations

import math
from typing import Any

MAX_DEPTH = 32  # nesting deeper than this in a record's metadata is refused, not recursed into
MAX_JSON_DEPTH = 256  # a JSON text nested deeper than this is refused before it is parsed


def json_too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Does the JSON text open more than ``limit`` arrays or objects inside each other (brackets inside strings
    do not count)? Checked before ``json.loads``: parsing 100,000 nested brackets recurses in C to the edge of
    the stack, and a garbage collection that runs a finaliser there fails with an unraisable RecursionError."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return True
        elif ch in "]}":
            depth -= 1
    return False


def unsafe_reason(value: Any, depth: int = 0) -> str | None:
    """Why ``value`` (a string, number, or list/dict of them) cannot be stored or compared, or None."""
    if isinstance(value, str):
        if "\x00" in value:
            return "contains a NUL character (\\u0000)"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "contains an unpaired surrogate (not valid Unicode)"
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"is {value!r} (NaN and Infinity are not numbers JSON can hold)"
    if isinstance(value, (list, tuple, dict)):
        if depth >= MAX_DEPTH:
            return f"is nested more than {MAX_DEPTH} levels deep"
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for k, v in items:
            why = unsafe_reason(k, depth + 1) if isinstance(k, str) else None
            why = why or unsafe_reason(v, depth + 1)
            if why:
                return f"[{k!r}] {why}" if isinstance(value, dict) else why
    return None

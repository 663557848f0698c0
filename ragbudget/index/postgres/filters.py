"""Parsed metadata filters (:mod:`ragbudget.index.filters`) → a parameterised SQL ``WHERE`` fragment.

Values and metadata keys are always bound parameters (``%s``), never interpolated. The SQL keeps the local
semantics of :func:`~ragbudget.index.filters.matches`: a missing key (or a JSON null) fails every condition
except ``ne``, ``nin`` and ``exists: false``; numbers never compare with strings or booleans (jsonb keeps
the kinds apart; range comparisons are guarded by ``jsonb_typeof``); strings compare by code point
(``COLLATE "C"`` on UTF-8 is byte order, which is code-point order).
"""

from __future__ import annotations

import json
from typing import Any

from ..filters import Condition, Filters

_RANGE = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
_COLUMNS = ("doc_id", "source")


def _jsonb_expr(c: Condition, alias: str, params: list[Any]) -> str:
    if c.key in _COLUMNS:
        return f"to_jsonb({alias}.{c.key})"
    params.append(c.key)
    return f"({alias}.metadata -> %s)"


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    return "string"


def condition_sql(c: Condition, alias: str = "c") -> tuple[str, list[Any]]:
    params: list[Any] = []
    if c.key in _COLUMNS and c.op in ("eq", "in", "ne", "nin"):  # plain text columns: use their btree
        values = c.value if c.op in ("in", "nin") else (c.value,)
        strs = [v for v in values if isinstance(v, str)]
        positive = c.op in ("eq", "in")
        if not strs:
            return ("FALSE" if positive else "TRUE"), params
        params.append(strs)
        return (f"{alias}.{c.key} = ANY(%s::text[])" if positive
                else f"NOT ({alias}.{c.key} = ANY(%s::text[]))"), params
    x = _jsonb_expr(c, alias, params)
    present = f"coalesce(jsonb_typeof({x}) <> 'null', false)"
    if c.op == "exists":
        return (present if c.value else f"NOT {present}"), params
    if c.op in ("eq", "ne"):
        params.append(json.dumps(c.value))
        test = f"coalesce({x} = %s::jsonb, false)"
        return (test if c.op == "eq" else f"NOT {test}"), params
    if c.op in ("in", "nin"):
        params.append([json.dumps(v) for v in c.value])
        test = f"coalesce({x} = ANY(%s::jsonb[]), false)"
        return (test if c.op == "in" else f"NOT {test}"), params
    op = _RANGE[c.op]
    kind = _kind(c.value)
    # the key expression appears twice (type guard, comparison): bind the key twice
    params2: list[Any] = []
    x2 = _jsonb_expr(c, alias, params2)
    params += params2
    params.append(c.value)
    if kind == "number":
        return (f"(CASE WHEN jsonb_typeof({x}) = 'number' THEN ({x2})::numeric {op} %s ELSE false END)",
                params)
    return (f"(CASE WHEN jsonb_typeof({x}) = 'string' THEN ({x2} #>> '{{}}') COLLATE \"C\" {op} %s::text "
            f"COLLATE \"C\" ELSE false END)", params)


def filters_sql(filters: Filters, alias: str = "c") -> tuple[str, list[Any]]:
    """``AND``-joined conditions (``TRUE`` for no filter) and their parameters, in order."""
    parts, params = [], []
    for c in filters:
        s, p = condition_sql(c, alias)
        parts.append(s)
        params += p
    return (" AND ".join(f"({p})" for p in parts) if parts else "TRUE"), params

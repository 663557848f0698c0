"""Metadata filters for queries, validated once and applied inside the index (pre-filter, not after top-k).

    filters = {"source": "/docs/refunds.md", "year": {"gte": 2020}, "lang": ["en", "de"]}

A key names a chunk field: ``doc_id``, ``source``, ``title``, or any metadata key. A value is either a
scalar (equality), a list (one of), or a mapping of operators: ``eq``, ``ne``, ``gt``, ``gte``, ``lt``,
``lte``, ``in``, ``nin``, ``exists``. All conditions must hold (AND). A chunk that lacks the key fails
every condition except ``ne``, ``nin`` and ``exists: false``. Comparisons between a number and a string
never match (no silent coercion). Backends translate the parsed form: the local index evaluates
:func:`matches` per row and searches only the allowed rows; PostgreSQL turns it into a ``WHERE`` clause.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import QueryError
from ..kernels.safe_values import unsafe_reason
from ..types import Chunk

OPS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin", "exists")
_SCALAR = (str, int, float, bool)
MAX_CONDITIONS = 32
MAX_LIST = 1000


@dataclass(frozen=True)
class Condition:
    key: str
    op: str
    value: Any


Filters = tuple[Condition, ...]


def _bad(msg: str) -> QueryError:
    return QueryError(f"invalid filters: {msg}",
                      fix='use {"field": value}, {"field": [v1, v2]} or {"field": {"gte": 2020}}; '
                          f"operators: {', '.join(OPS)}")


def parse_filters(raw: Mapping[str, Any] | None) -> Filters:
    """Validate ``raw`` into conditions (empty tuple for no filter); a bad filter is a QueryError (HTTP 400)."""
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise _bad(f"expected an object of field → condition, got {type(raw).__name__}")
    why = unsafe_reason(dict(raw))
    if why:  # NUL, lone surrogates, NaN, ±Infinity: no backend can compare them (PostgreSQL: a 500)
        raise _bad(f"a field or value {why}")
    out: list[Condition] = []
    for key, val in raw.items():
        if not isinstance(key, str) or not key or len(key) > 128:
            raise _bad(f"field names are non-empty strings of at most 128 characters, got {key!r}")
        if isinstance(val, Mapping):
            if not val:
                raise _bad(f"{key!r} has an empty condition")
            for op, v in val.items():
                out.append(_condition(key, op, v))
        elif isinstance(val, (list, tuple)):
            out.append(_condition(key, "in", list(val)))
        else:
            out.append(_condition(key, "eq", val))
    if len(out) > MAX_CONDITIONS:
        raise _bad(f"{len(out)} conditions; at most {MAX_CONDITIONS}")
    return tuple(out)


def _condition(key: str, op: Any, v: Any) -> Condition:
    if op not in OPS:
        raise _bad(f"unknown operator {op!r} for {key!r}")
    if op == "exists":
        if not isinstance(v, bool):
            raise _bad(f"{key!r}: exists takes true or false")
        return Condition(key, op, v)
    if op in ("in", "nin"):
        if not isinstance(v, (list, tuple)) or not v or len(v) > MAX_LIST:
            raise _bad(f"{key!r}: {op} takes a non-empty list of at most {MAX_LIST} values")
        if not all(isinstance(x, _SCALAR) and x is not None for x in v):
            raise _bad(f"{key!r}: {op} values must be strings, numbers or booleans")
        return Condition(key, op, tuple(v))
    if not isinstance(v, _SCALAR) or v is None:
        raise _bad(f"{key!r}: {op} takes a string, number or boolean, got {type(v).__name__}")
    if op in ("gt", "gte", "lt", "lte") and isinstance(v, bool):
        raise _bad(f"{key!r}: {op} compares numbers or strings, not booleans")
    return Condition(key, op, v)


def field_value(chunk: Chunk, key: str) -> Any:
    """The value a filter key reads: ``doc_id``/``source``/``title`` or a metadata key (None when absent)."""
    if key == "doc_id":
        return chunk.doc_id
    if key == "source":
        return chunk.source
    md = chunk.metadata
    if key == "title":
        return md.get("title")
    return md.get(key)


def _same_kind(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool)
    num = (int, float)
    return (isinstance(a, num) and isinstance(b, num)) or (isinstance(a, str) and isinstance(b, str))


def _holds(c: Condition, have: Any) -> bool:
    if c.op == "exists":
        return (have is not None) == c.value
    if have is None:
        return c.op in ("ne", "nin")
    if c.op == "eq":
        return _same_kind(have, c.value) and have == c.value
    if c.op == "ne":
        return not (_same_kind(have, c.value) and have == c.value)
    if c.op == "in":
        return any(_same_kind(have, x) and have == x for x in c.value)
    if c.op == "nin":
        return not any(_same_kind(have, x) and have == x for x in c.value)
    if not _same_kind(have, c.value):
        return False
    if c.op == "gt":
        return bool(have > c.value)
    if c.op == "gte":
        return bool(have >= c.value)
    if c.op == "lt":
        return bool(have < c.value)
    return bool(have <= c.value)


def matches(chunk: Chunk, filters: Filters) -> bool:
    """True when every condition holds for ``chunk``."""
    return all(_holds(c, field_value(chunk, c.key)) for c in filters)


def fingerprint(filters: Filters) -> str:
    """A stable text form for cache keys (the same filters in any order give the same key)."""
    return repr(sorted((c.key, c.op, repr(c.value)) for c in filters))

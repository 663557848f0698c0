"""``--filter`` arguments → the filters mapping of :mod:`ragbudget.index.filters`.

    --filter source=/docs/a.md  --filter 'year>=2020'  --filter 'lang=en,de'  --filters '{"year": {"lt": 1990}}'

Values are read as YAML scalars (``2020`` is a number, ``true`` a boolean); a comma makes a list (one of).
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

import yaml

_EXPR = re.compile(r"^\s*([A-Za-z0-9_.:-]+)\s*(>=|<=|!=|=|>|<)\s*(.*)$")
_OPS = {">=": "gte", "<=": "lte", "!=": "ne", ">": "gt", "<": "lt"}


def _scalar(text: str) -> Any:
    try:
        v = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return v if isinstance(v, (str, int, float, bool)) else text


def add_filter_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--filter", dest="filter", action="append", default=[], metavar="FIELD=VALUE",
                   help="metadata filter, repeatable: source=PATH, 'year>=2020', lang=en,de")
    p.add_argument("--filters", default=None, metavar="JSON", help='filters as JSON: \'{"year": {"gte": 2020}}\'')


def filters_from_args(args: argparse.Namespace) -> dict[str, Any] | None:
    """The combined filters, or None; a malformed one exits with the syntax (argparse-style)."""
    out: dict[str, Any] = {}
    if getattr(args, "filters", None):
        try:
            got = json.loads(args.filters)
        except json.JSONDecodeError as err:
            raise SystemExit(f"ragbudget: --filters is not JSON ({err.msg}); e.g. --filters '{{\"year\": {{\"gte\": 2020}}}}'")
        if not isinstance(got, dict):
            raise SystemExit("ragbudget: --filters must be a JSON object of field → condition")
        out.update(got)
    for expr in getattr(args, "filter", None) or []:
        m = _EXPR.match(expr)
        if not m:
            raise SystemExit(f"ragbudget: --filter {expr!r} is not FIELD=VALUE or FIELD>=VALUE (ops: = != > >= < <=)")
        key, op, raw = m.groups()
        if raw[:1] in "<>=!":
            raise SystemExit(f"ragbudget: --filter {expr!r}: one operator between field and value (= != > >= < <=)")
        if op == "=":
            parts = [p for p in raw.split(",")] if "," in raw else None
            value: Any = [_scalar(p.strip()) for p in parts] if parts else _scalar(raw)
            if isinstance(out.get(key), dict):
                out[key]["in" if isinstance(value, list) else "eq"] = value
            else:
                out[key] = value
        else:
            cond = out.setdefault(key, {})
            if not isinstance(cond, dict):
                cond = out[key] = {"eq": cond}
            cond[_OPS[op]] = _scalar(raw)
    return out or None

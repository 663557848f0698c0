"""``ragbudget`` command line: thin commands over the library.

Each submodule adds its commands with ``add_parser(subparsers)`` (and eval commands with
``add_eval_parser(eval_subparsers)``); a command's handler receives the parsed args and returns an exit
code. Errors from the library (:class:`~ragbudget.errors.RagBudgetError`) are printed with their fix.

Command modules import the library (torch, faiss, llama-index, uvicorn) inside their handlers, not at
the top: building the parser then costs only argparse, rich and the config models, so ``ragbudget --help``
and ``--version`` answer in well under a second instead of several (a test checks that the parser
imports neither torch nor ``ragbudget.pipeline``). Output conventions: :mod:`.output`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Sequence

from ..errors import RagBudgetError

# Command modules, in help order. Each is imported only when present (helpers add them).
COMMAND_MODULES = ("index_cmds", "query_cmds", "eval_cmds", "model_cmds", "serve_cmds", "bench_cmds",
                   "cache_cmds", "pg_cmds")


def _version() -> str:
    try:
        return version("ragbudget")
    except PackageNotFoundError:  # a source tree that was never installed
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragbudget", description="RAG under explicit token budgets.")
    parser.add_argument("--config", default=None, help="YAML config (default: built-in defaults)")
    parser.add_argument("--version", action="version", version=f"ragbudget {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    ev = sub.add_parser("eval", help="evaluate retrieval, budgeted context, caches")
    eval_sub = ev.add_subparsers(dest="eval_command", metavar="KIND")
    for name in COMMAND_MODULES:
        try:
            mod = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as err:
            if err.name == f"{__name__}.{name}":
                continue
            raise
        if hasattr(mod, "add_parser"):
            mod.add_parser(sub)
        if hasattr(mod, "add_eval_parser"):
            mod.add_eval_parser(eval_sub)
    # `--config` is accepted after the command too (`ragbudget serve --config c.yaml`).
    for group in (sub, eval_sub):
        for p in group.choices.values():
            try:
                p.add_argument("--config", dest="config", default=argparse.SUPPRESS, help="YAML config")
            except argparse.ArgumentError:
                pass  # the command defines its own --config
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        return int(handler(args) or 0)
    except RagBudgetError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; nothing half-written was kept", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

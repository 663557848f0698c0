"""Commands that left the package: ``ragbudget bench headline`` and the like now run as scripts from a
checkout (``benchmarks/``, issue 14). Each old name stays as a hidden entry that says where it went."""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn, Sequence


class MovedParser(argparse.ArgumentParser):
    """Parses nothing: any use (``--help`` included) prints where the command went and exits 2."""

    def __init__(self, old: str, new: str) -> None:
        super().__init__(prog=old, add_help=False)
        self.old, self.new = old, new

    def parse_known_args(  # type: ignore[override]
            self, args: Sequence[str] | None = None, namespace: Any = None) -> NoReturn:
        print(f"error: `{self.old}` moved out of the package: run `{self.new}` (same options; --help lists "
              "them) from the root of a ragbudget checkout, see BENCHMARKS.md", file=sys.stderr)
        sys.exit(2)


def add_moved(subparsers: Any, name: str, old: str, new: str) -> None:
    """Register ``name`` under ``subparsers`` as a moved command (not listed in ``--help``)."""
    subparsers.choices[name] = MovedParser(old, new)

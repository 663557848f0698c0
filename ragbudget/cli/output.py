"""One output convention for every command.

- Results go to stdout: a rich table, or with ``--json`` the same data as JSON (commands that write a
  report file take ``--json OUT``). Progress bars, warnings and errors go to stderr, so piping stdout
  gets only the result.
- Text that comes from users or documents (answers, titles, paths, error messages) is printed with rich
  markup off, so ``[1]`` and other bracketed text stay as they are.
- A command whose work failed exits non-zero and says why on stderr (:func:`report_failures`).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from ..errors import ConfigError


def err_console() -> Console:
    return Console(stderr=True)


def plain(console: Console, text: str, style: str | None = None, **kw: Any) -> None:
    """Print user or document text exactly (no markup, no emoji codes, no highlighting)."""
    console.print(Text(text, style=style or ""), markup=False, emoji=False, highlight=False, **kw)


@contextmanager
def result_bar(total: int, label: str) -> Iterator[Callable[[Any], None]]:
    """A progress bar on stderr counting finished requests (ok / failed); yields its ``on_result``."""
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[bad]}"),
                  TimeElapsedColumn(), console=err_console(), transient=True) as bar:
        task = bar.add_task(label, total=max(total, 1), bad="")
        failed = 0

        def on_result(res: Any) -> None:
            nonlocal failed
            failed += 0 if getattr(res, "ok", True) else 1
            bar.update(task, advance=1, bad=f"{failed} failed" if failed else "")

        yield on_result


@contextmanager
def count_bar(label: str, quiet: bool = False) -> Iterator[Callable[[int, int], None] | None]:
    """A progress bar on stderr; yields ``update(done, total)`` (``None`` when quiet)."""
    if quiet:
        yield None
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err_console(), transient=True) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=max(total, 1))

        yield update


def report_failures(summaries: Mapping[str, Mapping[str, Any]], *, failed: int, aborted: str | None) -> int:
    """Exit code of a replay/compare: 1 when any request failed other than by load (429 admission, 408
    deadline) or the run stopped early, printing the most frequent causes per target to stderr; else 0."""
    if not failed and not aborted:
        return 0
    err = err_console()
    if aborted:
        plain(err, f"error: {aborted}", style="red")
    for name, s in summaries.items():
        if not s.get("errors"):
            continue
        plain(err, f"{name}: {s['errors']} of {s['sent']} requests failed; most frequent causes:", style="red")
        for c in s.get("error_causes", []):
            plain(err, f"  {c['count']} × status {c['status']}: {c['error']}")
    return 1


def output_file(path: str | None, option: str) -> str | None:
    """Make ready the file a command will write its result to, before its work starts: its folder is created
    (``--out scratch/traffic.jsonl`` needs no ``mkdir`` first), and a path that cannot be written is a
    :class:`~ragbudget.errors.ConfigError` naming ``option`` now, not a traceback after a long run."""
    if not path:
        return path
    target = Path(path)
    if target.is_dir():
        raise ConfigError(f"{option} {path!r} is a folder", fix=f"give {option} a file name")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"{option} {path!r}: cannot create its folder ({err.strerror or err})",
                          fix=f"give {option} a path in a folder you can write to") from None
    if not os.access(target.parent, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise ConfigError(f"{option} {path!r} is not writable", fix=f"give {option} a path you can write to")
    return path


def fail(message: str, fix: str | None = None) -> int:
    """Print ``error: message`` (and the fix) to stderr; return exit code 1."""
    plain(err_console(), f"error: {message}" + (f"\n  fix: {fix}" if fix else ""))
    return 1


__all__ = ["count_bar", "err_console", "fail", "output_file", "plain", "report_failures", "result_bar"]

"""One writer per index across processes: an exclusive ``flock`` on ``<index.dir>/.<name>.lock``.

Saves are atomic (see :mod:`ragbudget.index.hybrid`), but two writers that each load, change and save an
index would lose one writer's changes (the later save replaces the earlier one). Every ingest therefore holds
this lock from opening the index to saving it; a second writer — another ``ragbudget ingest``, the service's
background ingest, a notebook — waits up to ``index.lock_timeout_s`` and then fails with
:class:`~ragbudget.errors.IndexBusyError` naming the process that holds it. Readers never take it.

``flock`` locks belong to an open file, so two writers in one process also exclude each other, and the
kernel drops the lock when its holder exits or crashes (a stale lock file is harmless).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import IO, Callable, Iterator

from ..errors import IndexBusyError, IngestError

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX: no cross-process lock (documented)
    fcntl = None  # type: ignore[assignment]

POLL_S = 0.1


def lock_path(folder: str | os.PathLike[str]) -> Path:
    """The lock file of the index stored in ``folder`` (beside it, so a save's folder swap keeps it)."""
    folder = Path(folder)
    return folder.parent / f".{folder.name}.lock"


@contextlib.contextmanager
def index_write_lock(folder: str | os.PathLike[str], timeout_s: float,
                     on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the writer lock of the index in ``folder`` for the body; wait at most ``timeout_s`` for it."""
    path = lock_path(folder)
    name = Path(folder).name
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(path, "a+", encoding="utf-8")
    except OSError as err:
        raise IngestError(f"cannot write to the index folder {path.parent}: {err.strerror or err}",
                          fix="check index.dir and its permissions (the index needs a writable folder)") from None
    if fcntl is None:  # pragma: no cover
        with f:
            yield
        return
    with f:
        deadline = time.monotonic() + timeout_s
        told = False
        while True:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _holder(path)
                if time.monotonic() >= deadline:
                    raise IndexBusyError(
                        f"index {name!r} is being written by another process{holder} "
                        f"(waited {timeout_s:g} s)",
                        fix="wait for that ingest to finish, or raise index.lock_timeout_s") from None
                if on_wait is not None and not told:
                    on_wait(f"waiting for another writer of index {name!r}{holder}")
                    told = True
                time.sleep(POLL_S)
        try:
            _record(f, str(os.getpid()))
            yield
        finally:
            _record(f, "")
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _record(f: IO[str], holder: str) -> None:
    """Replace the lock file's content (the holder's pid, or nothing once released)."""
    f.seek(0)
    f.truncate()
    f.write(holder)
    f.flush()


def _holder(path: Path) -> str:
    try:
        pid = path.read_text(encoding="utf-8").strip()
    except OSError:
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""

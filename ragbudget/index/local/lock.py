"""One writer per index across processes: a :class:`filelock.FileLock` on ``<index.dir>/.<name>.lock``.

Saves are atomic (see :mod:`ragbudget.index.local.hybrid`), but two writers that each load, change and save an
index would lose one writer's changes (the later save replaces the earlier one). Every ingest therefore holds
this lock from opening the index to saving it; a second writer — another ``ragbudget ingest``, the service's
background ingest, a notebook — waits up to ``index.lock_timeout_s`` and then fails with
:class:`~ragbudget.errors.IndexBusyError` naming the process that holds it. Readers never take it.

On POSIX the lock is an ``flock`` on the open file (on Windows, ``msvcrt`` locking): two writers in one
process exclude each other too (each call opens the file anew), and the kernel drops the lock when its
holder exits or is killed (``kill -9`` included), so a lock file left behind is harmless. The holder writes
its pid into the file through filelock's ``on_acquired`` hook (a contender opens the file without truncating
it, so the pid stays readable while it waits) and clears it before releasing.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Callable, Iterator

from filelock import FileLock, Timeout

from ...errors import IndexBusyError, IngestError
from ..base import ProgressFn

POLL_S = 0.1


def lock_path(folder: str | os.PathLike[str]) -> Path:
    """The lock file of the index stored in ``folder`` (beside it, so a save's folder swap keeps it)."""
    folder = Path(folder)
    return folder.parent / f".{folder.name}.lock"


@contextlib.contextmanager
def index_write_lock(folder: str | os.PathLike[str], timeout_s: float,
                     on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the writer lock of the index in ``folder`` for the body; wait at most ``timeout_s`` for it.

    ``on_wait(message)`` is called once if the lock is busy at the first try."""
    path = lock_path(folder)
    name = Path(folder).name
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise IngestError(f"cannot write to the index folder {path.parent}: {err.strerror or err}",
                          fix="check index.dir and its permissions (the index needs a writable folder)") from None
    held: list[int] = []

    def stamp(fd: int) -> None:  # runs with the lock held, before acquire() returns
        _record(fd, str(os.getpid()))
        held.append(fd)

    lock = FileLock(path, poll_interval=POLL_S, on_acquired=stamp)
    try:
        try:
            lock.acquire(blocking=False)
        except Timeout:
            if timeout_s <= 0:
                raise
            if on_wait is not None:
                on_wait(f"waiting for another writer of index {name!r}{_holder(path)}")
            lock.acquire(timeout=timeout_s)
    except Timeout:  # before OSError: filelock's Timeout is a TimeoutError
        raise IndexBusyError(f"index {name!r} is being written by another process{_holder(path)} "
                             f"(waited {max(timeout_s, 0):g} s)",
                             fix="wait for that ingest to finish, or raise index.lock_timeout_s") from None
    except OSError as err:
        raise IngestError(f"cannot take the writer lock {path}: {err.strerror or err}",
                          fix="index.dir must be writable and on a file system with file locks "
                              "(a local disk; some network mounts lack them)") from None
    try:
        yield
    finally:
        try:
            if held:
                _record(held[0], "")  # no holder left behind
        finally:
            lock.release()


def _record(fd: int, holder: str) -> None:
    """Replace the lock file's content (the holder's pid, or nothing once released)."""
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, holder.encode())


def _holder(path: Path) -> str:
    try:
        pid = path.read_text(encoding="utf-8").strip()
    except OSError:
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""


def wait_notice(progress: ProgressFn | None) -> Callable[[str], None] | None:
    """Report a wait for the writer lock through the progress callback (stage ``"wait"``)."""
    if progress is None:
        return None
    return lambda message: progress(f"wait: {message}", 0, 1)

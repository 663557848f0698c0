"""What an ingest may read: paths resolved inside one root, symbolic links refused by default.

:class:`PathPolicy` is checked twice. Before any work (:meth:`PathPolicy.resolve` on the requested path,
then :meth:`PathPolicy.scan` over the folder it names) — the API answers 403 naming the rule — and again
as each file is opened (:meth:`PathPolicy.open_bytes`: ``O_NOFOLLOW`` and a resolved-path check), so a
link swapped in after the check is still not followed.

Rules (``PathRefusedError.rule``): ``path_outside_root`` (absolute, ``..`` out of the root, or a link
that leads out) and ``symlink_refused`` (any symbolic link, while ``follow_symlinks`` is off).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ..errors import PathRefusedError

HEAD_BYTES = 8192  # read first: a binary file is refused before the rest of it is read


class SkipFile(Exception):
    """A file an ingest passes over, with the reason (not a regular file, over the size cap, binary)."""


def read_bounded(p: Path, max_bytes: int | None = None, *, nofollow: bool = False, text: bool = True) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``. Opened non-blocking and checked with ``fstat``
    on the open descriptor, so a FIFO, socket or device is refused without ever blocking (no race with a
    swap after a check); the size cap is checked before reading, and the first 8 KiB before the rest
    (``text``: a binary file costs one small read). Raises :class:`SkipFile` or ``OSError``."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | (getattr(os, "O_NOFOLLOW", 0) if nofollow else 0)
    fd = os.open(p, flags)
    with os.fdopen(fd, "rb", buffering=0) as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "FIFO" if stat.S_ISFIFO(st.st_mode) else "socket" if stat.S_ISSOCK(st.st_mode) else \
                "device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "special file"
            raise SkipFile(f"not a regular file ({kind})")
        if max_bytes is not None and st.st_size > max_bytes:
            raise SkipFile(f"file of {st.st_size} bytes is over the cap of {max_bytes} "
                           "(service.limits.max_ingest_file_bytes)")
        os.set_blocking(fd, True)
        head = f.read(HEAD_BYTES) or b""
        if text and b"\x00" in head:
            raise SkipFile("binary content (NUL bytes)")
        limit = (max_bytes if max_bytes is not None else st.st_size) + 1 - len(head)
        chunks = [head]
        while limit > 0:
            got = f.read(min(limit, 1 << 20))
            if not got:
                break
            chunks.append(got)
            limit -= len(got)
        raw = b"".join(chunks)
    if max_bytes is not None and len(raw) > max_bytes:  # it grew while being read
        raise SkipFile(f"file grew past the cap of {max_bytes} bytes while being read")
    return raw


OUTSIDE = "path_outside_root"
SYMLINK = "symlink_refused"


@dataclass(frozen=True)
class PathPolicy:
    root: Path  # absolute and resolved
    follow_symlinks: bool = False

    @classmethod
    def at(cls, root: str | os.PathLike[str], *, follow_symlinks: bool = False) -> "PathPolicy":
        return cls(Path(root).expanduser().resolve(), follow_symlinks)

    def inside(self, p: Path) -> bool:
        return p == self.root or p.is_relative_to(self.root)

    def _refuse(self, rule: str, what: str) -> PathRefusedError:
        if rule == SYMLINK:
            return PathRefusedError(f"{what} is a symbolic link; links are not followed", rule=rule,
                                    fix="copy the file into the document root, or set service.follow_symlinks "
                                        "(links must still resolve inside the root)")
        return PathRefusedError(f"{what} is outside the document root", rule=rule,
                                fix="send a path relative to your document root, without '..' out of it")

    def resolve(self, rel: str) -> Path:
        """The absolute path for a request path, every component checked; raises PathRefusedError."""
        if not rel or Path(rel).is_absolute() or "\x00" in rel:
            raise self._refuse(OUTSIDE, f"path {rel!r}")
        norm = os.path.normpath(rel)
        if norm == ".." or norm.startswith(".." + os.sep):
            raise self._refuse(OUTSIDE, f"path {rel!r}")
        cur = self.root
        for part in Path(norm).parts if norm != "." else ():
            cur = cur / part
            self._check_link(cur, f"path {rel!r} ({cur.relative_to(self.root)})")
        if not self.inside(cur.resolve()):
            raise self._refuse(OUTSIDE, f"path {rel!r}")
        return cur

    def _check_link(self, p: Path, what: str) -> None:
        if p.is_symlink():
            if not self.follow_symlinks:
                raise self._refuse(SYMLINK, what)
            if not self.inside(p.resolve()):
                raise self._refuse(OUTSIDE, f"{what}, a link to {os.readlink(p)!r},")

    def violations(self, top: Path) -> list[tuple[str, str]]:
        """(path relative to the root, rule) for every link under ``top`` the policy refuses."""
        out: list[tuple[str, str]] = []
        if not top.is_dir():
            return out
        for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
            for name in dirnames + filenames:
                p = Path(dirpath) / name
                if not p.is_symlink():
                    continue
                rel = str(p.relative_to(self.root)) if self.inside(p.parent.resolve()) else str(p)
                if not self.follow_symlinks:
                    out.append((rel, SYMLINK))
                elif not self.inside(p.resolve()):
                    out.append((rel, OUTSIDE))
        return out

    def scan(self, top: Path) -> None:
        """Raise PathRefusedError naming the rule and the first links, if any link under ``top`` is refused."""
        bad = self.violations(top)
        if bad:
            rule = bad[0][1]
            listed = ", ".join(f"{p} ({r})" for p, r in bad[:10]) + (f" and {len(bad) - 10} more" if len(bad) > 10 else "")
            err = self._refuse(rule, f"{len(bad)} entr{'y' if len(bad) == 1 else 'ies'} under the folder: {listed};"
                                     " each")
            raise err

    def open_bytes(self, p: Path, max_bytes: int | None = None, *, text: bool = True) -> bytes:
        """Read a file the walk found: refuses links (O_NOFOLLOW) and anything resolving outside the root;
        regular files only, at most ``max_bytes`` (:func:`read_bounded`)."""
        if not self.inside(p.resolve()):
            raise self._refuse(OUTSIDE, f"file {str(p)!r}")
        try:
            return read_bounded(p, max_bytes, nofollow=not self.follow_symlinks, text=text)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise self._refuse(SYMLINK, f"file {str(p)!r}") from None
            raise


__all__ = ["OUTSIDE", "SYMLINK", "PathPolicy", "SkipFile", "read_bounded"]

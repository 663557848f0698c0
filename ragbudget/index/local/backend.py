"""``index.backend: local``: indexes as files under ``index.dir`` (the embedded default).

One writer per index at a time (a ``filelock`` lock, ``flock`` on POSIX), readers in any number of processes.
The committed version is read from ``manifest.json``; a stat of it (inode, size, mtime) decides whether to
read it again, so the check a serving process runs before each query costs one system call. Ingest jobs are
JSON files under ``<index.dir>/.jobs/`` written atomically, so every worker and process on the machine reads
the same job.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from ...config import Config
from ...errors import IndexError_, IngestError
from .hybrid import HybridIndex
from ..names import list_indexes
from .reader import SegmentCache
from ..base import ProgressFn
from ..report import IngestReport
from .lock import index_write_lock, wait_notice
from .manifest import MANIFEST_FILE

if TYPE_CHECKING:
    from ...embed.encoder import Embedder

SEGMENT_CACHE = 256  # segments kept for reuse across versions (they are shared, not copied)


class _BoundedCache(OrderedDict):  # type: ignore[type-arg]
    """Insertion-ordered mapping that forgets its oldest entries past ``size``."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def __setitem__(self, key: object, value: object) -> None:
        super().__setitem__(key, value)
        while len(self) > self.size:
            self.popitem(last=False)


_JOB_ID = re.compile(r"[A-Za-z0-9_.-]{1,128}")  # fullmatch: "$" matches before a final "\n"


class LocalJobStore:
    """Jobs as ``<dir>/<id>.json`` (temp file + rename: a reader never sees half a record)."""

    def __init__(self, folder: Path, keep: int = 1000) -> None:
        self.folder = folder
        self.keep = keep

    def _path(self, job_id: str) -> Path:
        if not _JOB_ID.fullmatch(job_id):
            raise IndexError_(f"invalid job id {job_id!r}", fix="use the id returned when the job was started")
        return self.folder / f"{job_id}.json"

    def put(self, job_id: str, record: Mapping[str, Any]) -> None:
        path = self._path(job_id)
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps({**record, "updated_at": time.time()}, default=str), encoding="utf-8")
        os.replace(tmp, path)

    def get(self, job_id: str) -> dict[str, Any] | None:
        try:
            return json.loads(self._path(job_id).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return None  # unreadable: treated as unknown (the writer rewrites it on its next update)

    def recent(self, limit: int = 50) -> list[dict[str, Any]]:
        if not self.folder.is_dir():
            return []
        files = sorted(self.folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in files[self.keep:]:
            old.unlink(missing_ok=True)
        out = []
        for p in files[:limit]:
            got = self.get(p.stem)
            if got is not None:
                out.append(got)
        return out


class LocalBackend:
    """Indexes under ``config.index.dir``."""

    kind = "local"

    def __init__(self, config: Config) -> None:
        self.config = config
        self.dir = Path(config.index.dir)
        self._seen: dict[str, tuple[tuple[int, int, int], str]] = {}
        self._lock = threading.Lock()
        # Segments are immutable: a new version of an index reads only the segments it added.
        self._segments: SegmentCache = _BoundedCache(SEGMENT_CACHE)

    def list(self) -> list[str]:
        return list_indexes(self.dir)

    def exists(self, name: str) -> bool:
        return HybridIndex.exists(name, self.config)

    def open(self, name: str, embedder: "Embedder", *, create: bool = False, rebuild: bool = False) -> HybridIndex:
        if create:
            return HybridIndex.open_or_create(name, self.config, embedder, rebuild=rebuild)
        return HybridIndex.load(name, self.config, model_id=embedder.model_id, cache=self._segments)

    def committed_version(self, name: str) -> str | None:
        path = HybridIndex.path_for(name, self.config) / MANIFEST_FILE
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        with self._lock:
            seen = self._seen.get(name)
        if seen is not None and seen[0] == key:
            return seen[1]
        try:
            version = str(json.loads(path.read_text(encoding="utf-8")).get("content_version", ""))
        except (OSError, ValueError):
            return seen[1] if seen else None  # mid-swap: the previous answer stands
        with self._lock:
            self._seen[name] = (key, version)
        return version

    @contextlib.contextmanager
    def write_lock(self, name: str, timeout_s: float,
                   on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
        with index_write_lock(HybridIndex.path_for(name, self.config), timeout_s, on_wait=on_wait):
            yield

    def jobs(self) -> LocalJobStore:
        return LocalJobStore(self.dir / ".jobs")

    def close(self) -> None:
        pass


def ingest_path(path: str | os.PathLike[str], name: str, cfg: Config, embedder: Embedder, *,
                rebuild: bool = False, progress: ProgressFn | None = None) -> IngestReport:
    """Open (or create) index ``name`` and ingest ``path`` into it. ``rebuild`` starts from empty."""
    if not Path(path).expanduser().exists():
        raise IngestError(f"path not found: {path}", fix="pass an existing folder or file to ingest")
    with index_write_lock(HybridIndex.path_for(name, cfg), cfg.index.lock_timeout_s,
                          on_wait=wait_notice(progress)):
        index = HybridIndex.open_or_create(name, cfg, embedder, rebuild=rebuild)
        return index.ingest(path, embedder, progress=progress)

"""The index-store seam: what the pipeline needs from an index, whatever holds it.

Backends (``index.backend``): ``local`` (files under ``index.dir``: FAISS + BM25, one writer at a time,
readers in any number of processes) and ``postgres`` (PostgreSQL + pgvector: any number of processes on
any number of machines share one index). Every backend passes the conformance suite in
``tests/index_conformance.py``.

Versions: every committed write (ingest, delete) gives the index a new ``version``. Caches key their entries
by it, so an entry made from an older version is never served. :meth:`IndexBackend.committed_version` is the
cheap check a serving process runs before each query (a ``stat`` of the manifest; one indexed ``SELECT``) to
notice another process's write; it then opens the new version beside the old one and swaps, so an in-flight
query finishes on the version it started with.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from ..types import Chunk, Document
from .filters import Filters

if TYPE_CHECKING:
    from ..embed.encoder import Embedder
    from ..ingest.paths import PathPolicy
    from .report import IngestReport
    from .sparse import Analyzer

ProgressFn = Callable[[str, int, int], None]
"""``progress(stage, done, total)``; stages: ``load``, ``chunk``, ``embed``, ``index``, ``save``."""


def progress_step(total: int, lo: int, hi: int, ticks: int = 20) -> int:
    """Items per model call in a long loop that reports progress: about ``ticks`` steps (so a bar advances
    steadily instead of jumping once at the end), never fewer than ``lo`` nor more than ``hi`` items a call."""
    return max(lo, min(hi, -(-total // ticks)))


@runtime_checkable
class IndexStore(Protocol):
    """One opened version of one named index (read side) plus its writer methods."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str:
        """Content version of what this object serves (changes with every committed write)."""
        ...

    @property
    def analyzer(self) -> "Analyzer":
        """The BM25 analyser (query terms for lexical sentence scores)."""
        ...

    def __len__(self) -> int: ...

    def get_chunks(self, ids: Sequence[str]) -> list[Chunk]:
        """Chunks by id, in the order asked; ids not in this version are left out."""
        ...

    def search_dense(self, query_vector: np.ndarray, k: int,
                     filters: Filters = ()) -> list[tuple[Chunk, float]]:
        """Top ``k`` by inner product among chunks matching ``filters`` (applied before ranking)."""
        ...

    def search_sparse(self, query: str, k: int, filters: Filters = ()) -> list[tuple[Chunk, float]]:
        """Top ``k`` by BM25 (score > 0) among chunks matching ``filters``."""
        ...

    def idf(self, terms: Sequence[str]) -> dict[str, float]:
        """Inverse document frequency of analysed terms (0 for unseen terms)."""
        ...

    def ingest(self, path: str, embedder: "Embedder", *, progress: ProgressFn | None = None,
               policy: "PathPolicy | None" = None) -> "IngestReport":
        """Load a folder or file, upsert its documents, drop documents gone from it, commit."""
        ...

    def add_documents(self, docs: Sequence[Document], embedder: "Embedder", *,
                      progress: ProgressFn | None = None) -> "IngestReport":
        """Upsert documents (same id: replaced in place) and commit."""
        ...

    def delete(self, *, doc_ids: Iterable[str] = (), sources: Iterable[str] = ()) -> int:
        """Remove documents by id or by source path and commit; returns the number of chunks removed."""
        ...

    def info(self) -> dict[str, Any]:
        """Name, counts, version, backend, manifest: what ``ragbudget index info`` shows."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class IndexBackend(Protocol):
    """Where indexes live: opens them, lists them, locks writers, reports committed versions."""

    kind: str

    def list(self) -> list[str]: ...

    def exists(self, name: str) -> bool: ...

    def open(self, name: str, embedder: "Embedder", *, create: bool = False, rebuild: bool = False) -> IndexStore:
        """The latest committed version of ``name`` (IndexNotFoundError unless ``create``)."""
        ...

    def committed_version(self, name: str) -> str | None:
        """The latest committed version, cheaply (None when the index does not exist)."""
        ...

    def write_lock(self, name: str, timeout_s: float,
                   on_wait: Callable[[str], None] | None = None) -> AbstractContextManager[None]:
        """One writer per index, across processes (and machines, for shared backends)."""
        ...

    def jobs(self) -> "JobStore": ...

    def close(self) -> None: ...


@runtime_checkable
class JobStore(Protocol):
    """Ingest jobs readable from every process that shares the backend."""

    def put(self, job_id: str, record: Mapping[str, Any]) -> None: ...

    def get(self, job_id: str) -> dict[str, Any] | None: ...

    def recent(self, limit: int = 50) -> list[dict[str, Any]]: ...

"""Named indexes of one configuration, loaded once, kept fresh, and swapped atomically after a write.

The :class:`IndexRegistry` is what the ``RAG`` facade queries: ``get(name)`` gives the loaded index and its
retriever. Before handing it out it asks the backend for the committed version (a ``stat`` on ``local``, one
indexed ``SELECT`` on ``postgres``): when another process — a CLI ingest, another server, another worker —
committed a write, the new version is opened and swapped in for the next query, while queries already
running finish on the object they hold. Caches key their entries by the version, so none made from an older
version is served. ``ingest``/``delete`` write under the backend's writer lock and swap in what they saved.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ContextManager, Iterable, Mapping

from ..config import Config
from ..embed.encoder import Embedder
from ..errors import IngestError, QueryError
from ..index import IngestReport, ProgressFn
from ..index.backends import make_backend
from ..index.base import IndexBackend, IndexStore, progress_step
from ..index.local.lock import wait_notice
from ..ingest.loaders import LoadReport, check_record_ids, load_jsonl_bytes
from ..ingest.paths import PathPolicy
from .search import HybridRetriever
from ..kernels.safe_values import unsafe_reason
from ..kernels.sentences import split_sentences
from ..types import Chunk, Document

log = logging.getLogger(__name__)


@dataclass
class LoadedIndex:
    index: IndexStore
    retriever: HybridRetriever
    identity: str = ""  # which index this is (backend location + name), see :func:`index_identity`

    @property
    def cache_version(self) -> str:
        """What caches key entries by: the index's identity and its content version. Two indexes holding the
        same chunk ids at the same revision (another name, another folder, another database) never share."""
        return f"{self.identity}@{self.index.version}"


def index_identity(config: Config, name: str) -> str:
    """A stable id for the index ``name`` of this configuration's backend: the local folder (resolved) or a
    digest of the PostgreSQL DSN and schema (no password in any key)."""
    ix = config.index
    if ix.backend == "postgres":
        where = hashlib.sha256(f"{ix.dsn}|{ix.postgres.schema_name}".encode()).hexdigest()[:16]
        return f"postgres:{where}:{name}"
    return f"local:{hashlib.sha256(str(Path(ix.dir).resolve()).encode()).hexdigest()[:16]}:{name}"


class IndexRegistry:
    """Loads indexes by name on first use, follows other processes' writes, ingests. Thread-safe."""

    def __init__(self, config: Config, embedder: Embedder, backend: IndexBackend | None = None) -> None:
        self.config = config
        self.embedder = embedder
        self.backend = backend if backend is not None else make_backend(config)
        self._loaded: dict[str, LoadedIndex] = {}
        self._lock = threading.RLock()
        self._reload_locks: dict[str, threading.Lock] = {}
        self._ingest_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="ragbudget-sparse")
        self.swaps = 0  # versions swapped in from other processes' writes
        # torch threads for ingest embedding (0: all cores); None keeps the serving setting (the service
        # sets None: its queries share the process with ingest jobs).
        self.bulk_threads: int | None = config.embedding.ingest_threads

    def _wrap(self, store: IndexStore) -> LoadedIndex:
        return LoadedIndex(store, HybridRetriever(store, self.config.retrieval, self.embedder, pool=self._pool),
                           index_identity(self.config, store.name))

    def get(self, name: str) -> LoadedIndex:
        """The index ``name`` at its latest committed version (opened on first use)."""
        with self._lock:
            got = self._loaded.get(name)
            lock = self._reload_locks.setdefault(name, threading.Lock())
        if got is not None and not self.config.index.follow_writes:
            return got
        if got is not None:
            committed = self.backend.committed_version(name)
            if committed is None or committed == got.index.version:
                return got  # unchanged (None: mid-swap or removed; keep serving what is loaded)
        with lock:  # one thread opens the new version; the others wait for it, then use it
            with self._lock:
                now = self._loaded.get(name)
            if now is not None and now is not got:
                return now
            store = self.backend.open(name, self.embedder)
            fresh = self._wrap(store)
            with self._lock:
                self._loaded[name] = fresh
            if got is not None:
                self.swaps += 1
                log.info("index %r: swapped in version %s (was %s), written by another process",
                         name, store.version, got.index.version)
            return fresh

    def loaded_names(self) -> list[str]:
        """Indexes held in memory now."""
        with self._lock:
            return sorted(self._loaded)

    def info(self, name: str) -> dict[str, Any]:
        return self.get(name).index.info()

    def _swap(self, name: str, store: IndexStore) -> None:
        with self._lock:
            self._loaded[name] = self._wrap(store)  # the old object stays valid for queries holding it

    def ingest(self, source: str | os.PathLike[str] | Iterable[Mapping[str, Any] | Document], name: str, *,
               rebuild: bool = False, progress: ProgressFn | None = None,
               policy: PathPolicy | None = None) -> IngestReport:
        """Upsert a folder/file or records into index ``name``, commit it, then swap it in."""
        with self._ingest_lock, self.backend.write_lock(name, self.config.index.lock_timeout_s,
                                                        on_wait=wait_notice(progress)), self._bulk():
            t0 = time.perf_counter()  # from holding the lock: waiting for another writer is not this write
            idx = self.backend.open(name, self.embedder, create=True, rebuild=rebuild)
            if isinstance(source, (str, os.PathLike)):
                if not Path(source).expanduser().exists():
                    raise IngestError(f"path not found: {source}", fix="pass an existing folder or file")
                report = idx.ingest(str(source), self.embedder, progress=progress, policy=policy)
            else:
                docs, load = records_to_documents(source)
                report = idx.add_documents(docs, self.embedder, progress=progress)
                report.absorb(load)
            if self.config.embedding.warm_sentences:  # every backend: the chunks this write embedded
                report.sentences_warmed = self._warm_sentences(list(getattr(idx, "added_chunks", ())), progress)
            self._swap(name, idx)
            report.seconds = time.perf_counter() - t0  # the whole write, sentence warm-up included
            return report

    def delete(self, name: str, *, doc_ids: Iterable[str] = (), sources: Iterable[str] = ()) -> int:
        """Remove documents by id or source from index ``name``; returns the chunks removed."""
        doc_ids, sources = list(doc_ids), list(sources)
        for what, values in (("doc_ids", doc_ids), ("sources", sources)):
            for v in values:
                why = "is not a string" if not isinstance(v, str) else unsafe_reason(v)
                if why:
                    raise QueryError(f"{what}: {v!r} {why}", fix=f"send {what} as plain text strings")
        with self._ingest_lock, self.backend.write_lock(name, self.config.index.lock_timeout_s):
            idx = self.backend.open(name, self.embedder)
            removed = idx.delete(doc_ids=list(doc_ids), sources=list(sources))
            if removed:
                self._swap(name, idx)
            return removed

    def _bulk(self) -> ContextManager[None]:
        inner = getattr(self.embedder, "inner", self.embedder)  # through a micro-batcher
        bulk = getattr(inner, "bulk", None)
        return bulk(self.bulk_threads) if bulk is not None else contextlib.nullcontext()

    def _warm_sentences(self, chunks: list[Chunk], progress: ProgressFn | None) -> int:
        """Embed the sentences of new chunks now (into the embedding cache), so that query-time
        sentence selection finds them cached instead of running the model on the request path.
        Returns how many distinct sentences that was."""
        sents = list(dict.fromkeys(x for c in chunks for x in split_sentences(c.text)))
        # sentences per embed call: enough batches to keep every bulk worker busy, and ~20 progress steps
        step = progress_step(len(sents), 256, 8192)
        for i in range(0, len(sents), step):
            self.embedder.embed(sents[i:i + step])
            if progress:
                progress("sentences", min(i + step, len(sents)), len(sents))
        return len(sents)

    def close(self) -> None:
        with self._lock:
            for loaded in self._loaded.values():
                loaded.index.close()
            self._loaded.clear()
        self._pool.shutdown(wait=False)
        self.backend.close()


def records_to_documents(source: Iterable[Mapping[str, Any] | Document]) -> tuple[list[Document], LoadReport]:
    """Documents pass through; mappings go through the JSONL loader (same validation, same report)."""
    docs: list[Document] = []
    lines: list[str] = []
    report = LoadReport()
    for i, rec in enumerate(source):
        if isinstance(rec, Document):
            why = unsafe_reason(rec.id) or unsafe_reason(rec.text) or unsafe_reason(dict(rec.metadata))
            if why:
                raise IngestError(f"record {i} ({rec.id!r}): a value {why}; nothing was ingested",
                                  fix="remove NUL characters, unpaired surrogates, NaN and Infinity from the record")
            docs.append(rec)
            report.records_read += 1  # the loader counts the mappings; a Document is a record read too
        elif isinstance(rec, Mapping):
            lines.append(json.dumps(dict(rec), default=str))
        else:
            raise IngestError(f"record {i} is a {type(rec).__name__}, not a mapping",
                              fix='pass records like {"id": "...", "title": "...", "text": "..."}')
    if lines:
        docs += load_jsonl_bytes("\n".join(lines).encode("utf-8"), "records", report)
    docs = check_record_ids(docs)  # repeated ids: IdCollisionError listing them, never a silent replace
    if not docs:
        raise IngestError("no record had text to ingest", fix='give each record a non-empty "text" field')
    return docs, report

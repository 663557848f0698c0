"""HybridIndex: chunk store + FAISS dense + BM25 sparse, persisted atomically under ``<index.dir>/<name>/``.

Layout: ``manifest.json``, ``chunks.jsonl``, ``vectors.npy``, ``bm25_tokens.json``, ``sources.json``.
Saving writes a sibling temp folder and swaps it in with renames, so a crash or Ctrl-C mid-save leaves
the previous index loadable (a swap interrupted between its two renames is repaired on the next load).

Re-ingesting diffs by chunk id: unchanged chunks keep their stored vectors, only new chunks are embedded,
and chunks of documents that disappeared from a re-ingested folder are removed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
import time
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from ..config import Config
from ..embed import Embedder, EmbeddingCache, SentenceTransformerEmbedder
from ..errors import IndexError_, IndexNotFoundError, IngestError
from ..ingest import Chunker, load_path
from ..ingest.paths import PathPolicy
from ..tokens import Tokenizer
from ..types import Chunk, Document
from .atomic import clean_leftovers, fsync_dir, recover_swap
from .base import ProgressFn
from .dense import DenseIndex
from .lock import index_write_lock
from .manifest import MANIFEST_FILE, Manifest, content_version
from .report import IngestReport
from .filters import Filters, fingerprint, matches
from .sparse import Analyzer, SparseIndex
from .store import ChunkStore

log = logging.getLogger(__name__)

FILTER_MEMO = 64  # distinct filters whose allowed rows are kept per loaded version
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
EMBED_BATCH = 256


def default_embedder(cfg: Config) -> SentenceTransformerEmbedder:
    """The configured embedder with its persistent cache at ``<index.dir>/.embcache.sqlite``."""
    cache = EmbeddingCache(Path(cfg.index.dir) / ".embcache.sqlite") if cfg.embedding.cache else None
    return SentenceTransformerEmbedder(cfg.embedding, cache)


def list_indexes(index_dir: str | os.PathLike[str]) -> list[str]:
    d = Path(index_dir)
    if not d.is_dir():
        return []
    # a save's crash leftovers (".NAME.tmp-PID", ".NAME.old") and other dot-folders are never indexes
    return sorted(p.name for p in d.iterdir()
                  if _NAME.match(p.name) and p.is_dir() and (p / MANIFEST_FILE).is_file())


def _ingest_tokenizer(cfg: Config) -> Tokenizer:
    """The chunker's tokenizer, without the count memo: ingest-time texts do not recur, and the memo would
    keep up to its size in chunk texts alive for as long as the index is loaded."""
    return Tokenizer(cfg.tokenizer.encoding, count_cache_entries=0)


def _check_name(name: str) -> None:
    if not _NAME.match(name):
        raise IndexError_(f"invalid index name {name!r}",
                          fix="use letters, digits, '_', '-' or '.', not starting with '.' or '-'")


class HybridIndex:
    """Chunks with dense vectors and BM25 terms, row-aligned. Build with :meth:`create`, open with :meth:`load`."""

    def __init__(self, folder: Path, manifest: Manifest, config: Config, store: ChunkStore, dense: DenseIndex,
                 sparse: SparseIndex, sources: dict[str, list[str]]) -> None:
        self.folder = folder
        self.manifest = manifest
        self.config = config
        self.store = store
        self.dense = dense
        self.sparse = sparse
        self.sources = sources
        self._ids: list[str] = store.ids
        self._dirty = not (folder / MANIFEST_FILE).is_file()
        self._filter_memo: dict[str, np.ndarray] = {}
        self.chunker = Chunker(config.chunking, _ingest_tokenizer(config))

    # -- construction ---------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def version(self) -> str:
        return self.manifest.content_version

    @staticmethod
    def path_for(name: str, cfg: Config) -> Path:
        _check_name(name)
        return Path(cfg.index.dir) / name

    @classmethod
    def create(cls, name: str, cfg: Config, *, model_id: str, dim: int) -> "HybridIndex":
        """A new, empty in-memory index (nothing is written until :meth:`save`)."""
        folder = cls.path_for(name, cfg)
        chunker = Chunker(cfg.chunking, _ingest_tokenizer(cfg))
        sparse = SparseIndex(cfg.retrieval.bm25)
        manifest = Manifest(name=name, embedding_model=model_id, embedding_dim=dim, chunker=chunker.settings(),
                            analyzer={**sparse.analyzer.settings(), "k1": cfg.retrieval.bm25.k1,
                                      "b": cfg.retrieval.bm25.b},
                            faiss_kind=cfg.retrieval.faiss.kind, content_version=content_version([]))
        return cls(folder, manifest, cfg, ChunkStore(), DenseIndex(dim, cfg.retrieval.faiss), sparse, {})

    @classmethod
    def exists(cls, name: str, cfg: Config) -> bool:
        folder = cls.path_for(name, cfg)
        recover_swap(folder)
        return (folder / MANIFEST_FILE).is_file()

    @classmethod
    def load(cls, name: str, cfg: Config, *, model_id: str | None = None, dim: int | None = None) -> "HybridIndex":
        """Open a saved index; with ``model_id`` (and ``dim``) check it was built with that embedding model.

        Raises IndexNotFoundError (listing existing indexes) or IndexMismatchError (naming both models).
        """
        folder = cls.path_for(name, cfg)
        recover_swap(folder)
        if not (folder / MANIFEST_FILE).is_file():
            existing = list_indexes(cfg.index.dir)
            raise IndexNotFoundError(
                f"no index named {name!r} in {Path(cfg.index.dir).resolve()}"
                f" (existing: {', '.join(existing) if existing else 'none'})",
                fix=f"create it with: ragbudget ingest PATH --index {name}")
        manifest = Manifest.load(folder)
        if model_id is not None:
            manifest.check_model(model_id, dim)
        try:
            store = ChunkStore.load(folder / "chunks.jsonl")
            dense = DenseIndex.load(folder, manifest.embedding_dim, cfg.retrieval.faiss)
            sparse = SparseIndex.load(folder, cfg.retrieval.bm25)
            sources = json.loads((folder / "sources.json").read_text(encoding="utf-8"))
        except (OSError, ValueError, KeyError, EOFError) as err:  # EOFError: an empty or cut vectors.npy
            raise IndexError_(f"index {name!r} at {folder} is damaged: {type(err).__name__}: {err or 'file is empty'}",
                              fix=f"re-ingest with --rebuild (ragbudget ingest PATH --index {name} --rebuild)") from None
        if not (len(store) == len(dense) == len(sparse)):
            raise IndexError_(f"index {name!r} is inconsistent: {len(store)} chunks, {len(dense)} vectors, "
                              f"{len(sparse)} BM25 rows", fix="re-ingest with --rebuild")
        if sparse.analyzer.settings() != {k: manifest.analyzer.get(k) for k in ("stemmer", "stopwords")}:
            # BM25 terms were analyzed with other settings: re-analyze from the stored chunk texts.
            sparse.rebuild(sparse.analyze_many([c.text for c in store]))
        return cls(folder, manifest, cfg, store, dense, sparse, sources)

    @classmethod
    def open_or_create(cls, name: str, cfg: Config, embedder: Embedder, *, rebuild: bool = False) -> "HybridIndex":
        if not rebuild and cls.exists(name, cfg):
            return cls.load(name, cfg, model_id=embedder.model_id)
        return cls.create(name, cfg, model_id=embedder.model_id, dim=embedder.dim)

    # -- access ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._ids)

    def chunk_at(self, row: int) -> Chunk:
        return self.store.get(self._ids[row])

    @property
    def analyzer(self) -> Analyzer:
        return self.sparse.analyzer

    def idf(self, terms: Sequence[str]) -> dict[str, float]:
        return self.sparse.idf(terms)

    def get_chunks(self, ids: Sequence[str]) -> list[Chunk]:
        return [self.store.get(i) for i in ids if i in self.store]

    def allowed_rows(self, filters: Filters) -> np.ndarray | None:
        """Rows matching ``filters`` (None = all rows), memoised per filter for this version."""
        if not filters:
            return None
        key = fingerprint(filters)
        rows = self._filter_memo.get(key)
        if rows is None:
            rows = np.fromiter((i for i, cid in enumerate(self._ids) if matches(self.store.get(cid), filters)),
                               dtype=np.int64)
            if len(self._filter_memo) >= FILTER_MEMO:
                self._filter_memo.pop(next(iter(self._filter_memo)))
            self._filter_memo[key] = rows
        return rows

    def search_dense(self, query_vector: np.ndarray, k: int, filters: Filters = ()) -> list[tuple[Chunk, float]]:
        rows = self.allowed_rows(filters)
        if rows is not None and not len(rows):
            return []
        return [(self.chunk_at(r), s) for r, s in self.dense.search(query_vector, k, rows=rows)]

    def search_sparse(self, query: str, k: int, filters: Filters = ()) -> list[tuple[Chunk, float]]:
        rows = self.allowed_rows(filters)
        if rows is not None and not len(rows):
            return []
        return [(self.chunk_at(r), s) for r, s in self.sparse.search(query, k, rows=rows)]

    def info(self) -> dict[str, object]:
        return {"name": self.name, "backend": "local", "chunks": len(self), "documents": self.manifest.n_documents,
                "content_version": self.version, "path": str(self.folder),
                "manifest": dataclasses.asdict(self.manifest)}

    def close(self) -> None:
        self._filter_memo.clear()

    def delete(self, *, doc_ids: Iterable[str] = (), sources: Iterable[str] = (), save: bool = True) -> int:
        """Remove documents by id or by source (a path as ingested, or a record file's ``path:id``
        prefix); then save. Returns the number of chunks removed (0: nothing saved)."""
        ids, srcs = set(doc_ids), set(sources)
        gone = {c.doc_id for c in self.store if c.doc_id in ids or c.source in srcs
                or any(c.source.startswith(s + ":") for s in srcs)}
        if not gone:
            return 0
        keep = [i for i, cid in enumerate(self._ids) if self.store.get(cid).doc_id not in gone]
        removed = len(self._ids) - len(keep)
        chunks = [self.store.get(self._ids[i]) for i in keep]
        self._replace(chunks, self.dense.vectors[keep], [self.sparse.tokens[i] for i in keep])
        for root, docs in list(self.sources.items()):
            self.sources[root] = [d for d in docs if d not in gone]
        self._dirty = True
        if save:
            self.save()
        return removed

    # -- ingest ---------------------------------------------------------------------------------
    def ingest(self, path: str | os.PathLike[str], embedder: Embedder, *, progress: ProgressFn | None = None,
               save: bool = True, policy: PathPolicy | None = None) -> IngestReport:
        """Load ``path`` (folder or file), upsert its documents, drop documents gone from it, then save.
        ``policy``: what the load may read (the service's document root; links refused)."""
        t0 = time.perf_counter()
        root = str(Path(path).expanduser().absolute() if policy is not None else Path(path).expanduser().resolve())
        docs, load = load_path(root, policy=policy, ids=self.config.index.record_ids)
        if progress:
            progress("load", 1, 1)
        # Files that could not be read this time keep what they had in the index (nothing is lost).
        protect = {w for w, _ in load.skipped + load.failed}
        protect |= {w.rsplit(":", 1)[0] for w in protect}
        report = self.add_documents(docs, embedder, root=root, progress=progress, protect_sources=protect,
                                    save=False)
        report.absorb(load)
        if not docs and not load.files_read:
            report.notes.append(f"no document could be read from {root}; the index was left as it was")
        if save and self._dirty:
            self.save(progress=progress)
        report.seconds = time.perf_counter() - t0
        return report

    def add_documents(self, docs: Sequence[Document], embedder: Embedder, *, root: str | None = None,
                      progress: ProgressFn | None = None, protect_sources: set[str] = frozenset(),
                      save: bool = True) -> IngestReport:
        """Upsert ``docs`` and commit them (``save=False``: in memory only; call :meth:`save` after).
        With ``root``, documents previously
        ingested from that root and absent from ``docs`` are removed, unless their source is in
        ``protect_sources`` (files that failed to load this time)."""
        if embedder.model_id != self.manifest.embedding_model:
            self.manifest.check_model(embedder.model_id)
        report = IngestReport(index=self.name)
        if self.manifest.chunker != self.chunker.settings() and len(self):
            report.notes.append(f"chunking settings changed ({self.manifest.chunker} → {self.chunker.settings()}): "
                                "re-ingested documents are re-chunked and re-embedded; use --rebuild to redo all")
        ids_seen: dict[str, Document] = {}
        for d in docs:
            if d.id in ids_seen:
                report.notes.append(f"duplicate document id {d.id!r} ({d.metadata.get('source')}); the last one wins")
            ids_seen[d.id] = d
        docs = list(ids_seen.values())
        report.documents = len(docs)
        # Chunk every incoming document.
        new_by_doc: dict[str, list[Chunk]] = {}
        for i, d in enumerate(docs):
            new_by_doc[d.id] = self.chunker.chunk(d)
            if not new_by_doc[d.id]:
                report.skipped.append((str(d.metadata.get("source", d.id)), "document has no text to index"))
            if progress and (i % 50 == 0 or i == len(docs) - 1):
                progress("chunk", i + 1, len(docs))
        removed_docs: set[str] = set()
        if root is not None:
            before = set(self.sources.get(root, []))
            gone = before - set(new_by_doc)
            protected = {c.doc_id for c in self.store if c.doc_id in gone and c.source in protect_sources}
            removed_docs = gone - protected
            self.sources[root] = sorted(set(new_by_doc) | protected)
        replaced = set(new_by_doc) | removed_docs
        old_rows = {cid: i for i, cid in enumerate(self._ids)}
        kept = [c for c in self.store if c.doc_id not in replaced]
        incoming = [c for cs in new_by_doc.values() for c in cs]
        old_of_replaced = {c.id for c in self.store if c.doc_id in replaced}
        incoming_ids = {c.id for c in incoming}
        report.chunks_unchanged = len(incoming_ids & old_of_replaced)
        report.chunks_added = len(incoming_ids - old_of_replaced)
        report.chunks_removed = len(old_of_replaced - incoming_ids)
        report.documents_removed = len(removed_docs & self.store.doc_ids())
        changed_records = any(c != self.store.get(c.id) for c in incoming if c.id in self.store)
        self._dirty = bool(report.chunks_added or report.chunks_removed or changed_records
                           or len(kept) + len(incoming) != len(self._ids))
        if not self._dirty:
            report.content_version = self.version
            return report
        # Vectors: reuse stored rows by chunk id; embed only the rest.
        todo = [c for c in incoming if c.id not in old_rows]
        fresh: dict[str, np.ndarray] = {}
        for start in range(0, len(todo), EMBED_BATCH):
            part = todo[start:start + EMBED_BATCH]
            vecs = embedder.embed([c.text for c in part])
            fresh.update(zip((c.id for c in part), vecs))
            if progress:
                progress("embed", start + len(part), len(todo))
        report.embedded = len(todo)
        chunks = kept + incoming
        dim = self.manifest.embedding_dim
        vectors = np.empty((len(chunks), dim), np.float32)
        for i, c in enumerate(chunks):
            vectors[i] = fresh[c.id] if c.id in fresh else self.dense.vectors[old_rows[c.id]]
        old_tokens = self.sparse.tokens
        fresh_tokens = dict(zip((c.id for c in todo), self.sparse.analyze_many([c.text for c in todo])))
        tokens = [fresh_tokens[c.id] if c.id in fresh_tokens else old_tokens[old_rows[c.id]] for c in chunks]
        if progress:
            progress("index", 0, 1)
        self._replace(chunks, vectors, tokens)
        report.notes += self.dense.notes
        self.manifest.chunker = self.chunker.settings()
        report.content_version = self.manifest.content_version
        if progress:
            progress("index", 1, 1)
        if save:
            self.save(progress=progress)
        return report

    def _replace(self, chunks: list[Chunk], vectors: np.ndarray, tokens: list[list[str]]) -> None:
        """Swap in a new row set (a new revision): dense, sparse, store, manifest counts and version."""
        self.dense.rebuild(vectors)
        self.sparse.rebuild(tokens)
        self.store = ChunkStore(chunks)
        self._ids = self.store.ids
        self._filter_memo = {}
        m = self.manifest
        m.revision += 1
        m.n_chunks, m.n_documents = len(chunks), len(self.store.doc_ids())
        m.content_version = content_version(self._ids, m.revision)
        m.faiss_kind, m.updated_at, m.notes = self.dense.kind, time.time(), list(self.dense.notes)
        m.analyzer = {**self.sparse.analyzer.settings(), "k1": self.sparse.config.k1, "b": self.sparse.config.b}

    # -- persistence ----------------------------------------------------------------------------
    def _write_files(self, folder: Path) -> None:
        self.store.save(folder / "chunks.jsonl")
        self.dense.save(folder)
        self.sparse.save(folder)
        (folder / "sources.json").write_text(json.dumps(self.sources), encoding="utf-8")
        self.manifest.save(folder)  # last: a folder without a manifest is never loaded

    def save(self, *, progress: ProgressFn | None = None) -> None:
        """Write the index atomically (temp folder beside it, then rename swap)."""
        target = self.folder
        tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
        old = target.parent / f".{target.name}.old"
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            recover_swap(target)
            clean_leftovers(target)  # the writer holds the lock: any other temp folder is a crash's leftover
            tmp.mkdir()
        except OSError as err:
            raise IngestError(f"cannot write index {self.name!r} under {target.parent}: "
                              f"{type(err).__name__}: {err.strerror or err}",
                              fix="point index.dir at a folder this process can create and write "
                                  "(check that it exists, is a folder and its permissions)") from None
        try:
            self._write_files(tmp)
            fsync_dir(tmp)
            if target.exists():
                shutil.rmtree(old, ignore_errors=True)
                os.replace(target, old)
            os.replace(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            recover_swap(target)
            raise
        shutil.rmtree(old, ignore_errors=True)
        self._dirty = False
        if progress:
            progress("save", 1, 1)


def ingest_path(path: str | os.PathLike[str], name: str, cfg: Config, embedder: Embedder, *,
                rebuild: bool = False, progress: ProgressFn | None = None) -> IngestReport:
    """Open (or create) index ``name`` and ingest ``path`` into it. ``rebuild`` starts from empty."""
    if not Path(path).expanduser().exists():
        raise IngestError(f"path not found: {path}", fix="pass an existing folder or file to ingest")
    with index_write_lock(HybridIndex.path_for(name, cfg), cfg.index.lock_timeout_s,
                          on_wait=wait_notice(progress)):
        index = HybridIndex.open_or_create(name, cfg, embedder, rebuild=rebuild)
        return index.ingest(path, embedder, progress=progress)


def wait_notice(progress: ProgressFn | None) -> Callable[[str], None] | None:
    """Report a wait for the writer lock through the progress callback (stage ``"wait"``)."""
    if progress is None:
        return None
    return lambda message: progress(f"wait: {message}", 0, 1)

"""HybridIndex: chunks with FAISS dense vectors and BM25 terms, row-aligned, under ``<index.dir>/<name>/``.

Storage is a list of immutable segments plus a manifest naming them (:mod:`.segments`): an ingest writes
only the chunks it adds, appends their vectors to the FAISS structure in place, marks replaced rows dead
and rebuilds only the BM25 matrix (bm25s, seconds at 100k chunks). A compaction rewrites the live rows into
one segment when dead rows pass a quarter of all rows. The manifest rename is the commit: a crash or Ctrl-C
before it leaves the previous version serving, and its leftovers are removed by the next write.

Re-ingesting diffs by chunk id: unchanged chunks keep their rows (no re-embedding, no rewrite), only new
chunks are embedded, and chunks of documents that disappeared from a re-ingested folder are removed.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from ...config import Config
from ...embed.encoder import Embedder
from ...errors import IndexError_, IndexNotFoundError, IngestError
from ...ingest import Chunker, load_path
from ...ingest.paths import PathPolicy
from ...types import Chunk, Document
from . import segments as seg_files
from .atomic import clean_leftovers, recover_swap
from ..base import ProgressFn, progress_step
from .dense import DenseIndex
from ..filters import Filters, fingerprint, matches
from .manifest import FORMAT_VERSION, MANIFEST_FILE, Manifest, content_version, next_content_version
from ..names import check_name, default_embedder, ingest_tokenizer, list_indexes
from .reader import SegmentCache, Version, read_version
from ..report import IngestReport
from ..upsert import StoredChunk, chunk_documents, plan_upsert
from .segments import Segment
from ..sparse import Analyzer, SparseIndex
from ..store import ChunkStore

__all__ = ["HybridIndex", "IngestReport", "ProgressFn", "default_embedder", "list_indexes"]

FILTER_MEMO = 64  # distinct filters whose allowed rows are kept per loaded version
EMBED_BATCH = 1024
COMPACT_DEAD_FRACTION = 0.25  # compact when dead rows pass this share of all rows
COMPACT_SEGMENTS = 32  # ... or when there are more segments than this


class HybridIndex:
    """Chunks with dense vectors and BM25 terms. Build with :meth:`create`, open with :meth:`load`.

    Rows are global over the segments (deleted rows keep their number until a compaction); ``store`` holds
    the live chunks in row order."""

    def __init__(self, folder: Path, manifest: Manifest, config: Config, version: Version) -> None:
        self.folder = folder
        self.manifest = manifest
        self.config = config
        self.segments: list[Segment] = version.segments
        self.dense: DenseIndex = version.dense
        self.sparse: SparseIndex = version.sparse
        self.sources: dict[str, list[str]] = version.sources
        self._rows: list[Chunk] = [c for s in self.segments for c in s.chunks]
        self._dead: set[int] = set(int(r) for r in version.dead)
        self._terms_flat: list[list[str]] | None = None
        self._index_rows()
        self._dirty = version.legacy or not (folder / MANIFEST_FILE).is_file()
        self.chunker = Chunker(config.chunking, ingest_tokenizer(config))

    def _index_rows(self) -> None:
        live = [r for r in range(len(self._rows)) if r not in self._dead]
        self._live = np.asarray(live, np.int64)
        self.store = ChunkStore(self._rows[r] for r in live)
        self._row_of = {self._rows[r].id: r for r in live}
        self._ids: list[str] = [self._rows[r].id for r in live]
        self._filter_memo: dict[str, np.ndarray] = {}

    # -- construction ---------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def version(self) -> str:
        return self.manifest.content_version

    @staticmethod
    def path_for(name: str, cfg: Config) -> Path:
        check_name(name)
        return Path(cfg.index.dir) / name

    @classmethod
    def create(cls, name: str, cfg: Config, *, model_id: str, dim: int) -> "HybridIndex":
        """A new, empty in-memory index (nothing is written until :meth:`save`)."""
        folder = cls.path_for(name, cfg)
        chunker = Chunker(cfg.chunking, ingest_tokenizer(cfg))
        sparse = SparseIndex(cfg.retrieval.bm25)
        manifest = Manifest(name=name, embedding_model=model_id, embedding_dim=dim, chunker=chunker.settings(),
                            analyzer={**sparse.analyzer.settings(), "k1": cfg.retrieval.bm25.k1,
                                      "b": cfg.retrieval.bm25.b},
                            faiss_kind=cfg.retrieval.faiss.kind, content_version=content_version([]))
        version = Version([], np.zeros(0, np.int64), DenseIndex(dim, cfg.retrieval.faiss), sparse, {})
        index = cls(folder, manifest, cfg, version)
        index._dirty = True
        return index

    @classmethod
    def exists(cls, name: str, cfg: Config) -> bool:
        folder = cls.path_for(name, cfg)
        recover_swap(folder)
        return (folder / MANIFEST_FILE).is_file()

    @classmethod
    def load(cls, name: str, cfg: Config, *, model_id: str | None = None, dim: int | None = None,
             cache: SegmentCache | None = None) -> "HybridIndex":
        """Open the committed version; with ``model_id`` (and ``dim``) check it was built with that model.
        ``cache``: segments already read (by another version of this index) are reused, not read again.

        Raises IndexNotFoundError (listing existing indexes) or IndexMismatchError (naming both models).
        """
        folder = cls.path_for(name, cfg)
        recover_swap(folder)  # a format-1 save interrupted between its two renames
        if not (folder / MANIFEST_FILE).is_file():
            existing = list_indexes(cfg.index.dir)
            raise IndexNotFoundError(
                f"no index named {name!r} under {cfg.index.dir} (existing: {', '.join(existing) if existing else 'none'})",
                fix=f"create it with: ragbudget ingest PATH --index {name}")
        for attempt in range(3):
            manifest = Manifest.load(folder)
            if model_id is not None:
                manifest.check_model(model_id, dim)
            try:
                version = read_version(folder, manifest, cfg, cache)
                break
            except FileNotFoundError:
                if attempt == 2 or Manifest.load(folder).content_version == manifest.content_version:
                    raise cls._damaged(name, folder, "a file it names is missing") from None
                continue  # a writer committed (and cleaned up) while this version was being read: retry
            except (OSError, ValueError, KeyError, EOFError) as err:  # EOFError: an empty or cut .npy
                raise cls._damaged(name, folder, f"{type(err).__name__}: {err or 'file is empty'}") from None
        index = cls(folder, manifest, cfg, version)
        if index.sparse.analyzer.settings() != {k: manifest.analyzer.get(k) for k in ("stemmer", "stopwords")}:
            # BM25 terms were analyzed with other settings: re-analyze from the stored chunk texts.
            index._rebuild_sparse(reanalyze=True)
        return index

    @staticmethod
    def _damaged(name: str, folder: Path, why: str) -> IndexError_:
        return IndexError_(f"index {name!r} at {folder} is damaged: {why}",
                           fix=f"re-ingest with --rebuild (ragbudget ingest PATH --index {name} --rebuild)")

    @classmethod
    def open_or_create(cls, name: str, cfg: Config, embedder: Embedder, *, rebuild: bool = False) -> "HybridIndex":
        if not rebuild and cls.exists(name, cfg):
            return cls.load(name, cfg, model_id=embedder.model_id)
        return cls.create(name, cfg, model_id=embedder.model_id, dim=embedder.dim)

    # -- access ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._ids)

    def chunk_at(self, row: int) -> Chunk:
        return self._rows[row]

    @property
    def analyzer(self) -> Analyzer:
        return self.sparse.analyzer

    def idf(self, terms: Sequence[str]) -> dict[str, float]:
        return self.sparse.idf(terms)

    def get_chunks(self, ids: Sequence[str]) -> list[Chunk]:
        return [self.store.get(i) for i in ids if i in self.store]

    def allowed_rows(self, filters: Filters) -> np.ndarray | None:
        """Live rows matching ``filters`` (None = all rows), memoised per filter for this version."""
        if not filters:
            return None
        key = fingerprint(filters)
        rows = self._filter_memo.get(key)
        if rows is None:
            rows = np.fromiter((r for r in self._live.tolist() if matches(self._rows[r], filters)), dtype=np.int64)
            if len(self._filter_memo) >= FILTER_MEMO:
                self._filter_memo.pop(next(iter(self._filter_memo)))
            self._filter_memo[key] = rows
        return rows

    def search_dense(self, query_vector: np.ndarray, k: int, filters: Filters = ()) -> list[tuple[Chunk, float]]:
        rows = self.allowed_rows(filters)
        if rows is not None and not len(rows):
            return []
        return [(self._rows[r], s) for r, s in self.dense.search(query_vector, k, rows=rows)]

    def search_sparse(self, query: str, k: int, filters: Filters = ()) -> list[tuple[Chunk, float]]:
        rows = self.allowed_rows(filters)
        if rows is not None and not len(rows):
            return []
        return [(self._rows[r], s) for r, s in self.sparse.search(query, k, rows=rows)]

    def info(self) -> dict[str, object]:
        return {"name": self.name, "backend": "local", "chunks": len(self), "documents": self.manifest.n_documents,
                "content_version": self.version, "path": str(self.folder), "segments": len(self.segments),
                "deleted_rows": len(self._dead), "manifest": dataclasses.asdict(self.manifest)}

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
        remove = {c.id for c in self.store if c.doc_id in gone}
        self._apply(remove, [], np.zeros((0, self.manifest.embedding_dim), np.float32), [])
        for root, docs in list(self.sources.items()):
            self.sources[root] = [d for d in docs if d not in gone]
        if save:
            self.save()
        return len(remove)

    def ingest(self, path: str | os.PathLike[str], embedder: Embedder, *, progress: ProgressFn | None = None,
               save: bool = True, policy: PathPolicy | None = None) -> IngestReport:
        """Load ``path`` (folder or file), upsert its documents, drop documents gone from it, then save.
        ``policy``: what the load may read (the service's document root; links refused)."""
        t0 = time.perf_counter()
        root = str(Path(path).expanduser().absolute() if policy is not None else Path(path).expanduser().resolve())
        docs, load = load_path(root, policy=policy, ids=self.config.index.record_ids,
                               max_bytes=self.config.service.limits.max_ingest_file_bytes)
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
                      progress: ProgressFn | None = None, protect_sources: set[str] | frozenset[str] = frozenset(),
                      save: bool = True) -> IngestReport:
        """Upsert ``docs`` and commit them (``save=False``: in memory only; call :meth:`save` after).
        With ``root``, documents previously ingested from that root and absent from ``docs`` are removed,
        unless their source is in ``protect_sources`` (files that failed to load this time)."""
        if embedder.model_id != self.manifest.embedding_model:
            self.manifest.check_model(embedder.model_id)
        self.added_chunks: list[Chunk] = []
        report = IngestReport(index=self.name)
        if self.manifest.chunker != self.chunker.settings() and len(self):
            report.notes.append(f"chunking settings changed ({self.manifest.chunker} → {self.chunker.settings()}): "
                                "re-ingested documents are re-chunked and re-embedded; use --rebuild to redo all")
        new_by_doc = chunk_documents(docs, self.chunker.chunk, report, progress)
        plan = plan_upsert(new_by_doc, (StoredChunk(c.id, c.doc_id, c.source, c) for c in self.store),
                           before=set(self.sources.get(root, [])) if root is not None else set(),
                           root=root is not None, protect_sources=protect_sources, record_of=lambda c: c,
                           report=report)
        if plan.sources is not None:
            self.sources[str(root)] = plan.sources
        remove, add = plan.remove, plan.add
        if plan.empty:
            report.content_version = self.version
            return report
        todo = [c for c in add if c.id not in self._row_of]
        fresh: dict[str, np.ndarray] = {}
        step = progress_step(len(todo), 32, EMBED_BATCH)  # the bar advances by embedded batches
        for start in range(0, len(todo), step):
            part = todo[start:start + step]
            fresh.update(zip((c.id for c in part), embedder.embed([c.text for c in part])))
            if progress:
                progress("embed", start + len(part), len(todo))
        report.embedded = len(todo)
        self.added_chunks = todo  # the registry embeds their sentences (query-time trimming)
        vectors = np.empty((len(add), self.manifest.embedding_dim), np.float32)
        terms: list[list[str]] = []
        for i, c in enumerate(add):
            old = self._row_of.get(c.id)
            vectors[i] = fresh[c.id] if old is None else self.dense.vectors[old]
            terms.append(self.sparse.analyzer(c.text) if old is None else self._terms_of(old))
        if progress:
            progress("index", 0, 1)
        self._apply(remove, add, vectors, terms)
        report.notes += self.dense.notes
        self.manifest.chunker = self.chunker.settings()
        report.content_version = self.manifest.content_version
        if progress:
            progress("index", 1, 1)
        if save:
            self.save(progress=progress)
        return report

    def _terms_of(self, row: int) -> list[str]:
        if self._terms_flat is None:
            self._terms_flat = [t for s in self.segments for t in s.terms()]
        return self._terms_flat[row]

    def _apply(self, remove: set[str], add: list[Chunk], vectors: np.ndarray, terms: list[list[str]]) -> None:
        """A new revision: rows of ``remove`` die, ``add`` is appended as a new segment."""
        self._dead |= {self._row_of[i] for i in remove}
        self._terms_flat = None
        if add:
            seg = Segment(f"seg-{seg_files.new_tag(self.manifest.revision + 1)}", list(add), vectors, None, terms)
            self.segments.append(seg)
            self._rows.extend(add)
            self.dense.add(vectors)
        if len(self._dead) > COMPACT_DEAD_FRACTION * max(len(self._rows), 1) or len(self.segments) > COMPACT_SEGMENTS:
            self._compact()
        self.dense.set_dead(np.fromiter(self._dead, np.int64))
        self._index_rows()
        self._rebuild_sparse()
        self._dirty = True
        m = self.manifest
        m.revision += 1
        m.n_chunks, m.n_documents = len(self._ids), len(self.store.doc_ids())
        m.content_version = next_content_version(m.content_version or content_version(self._ids), m.revision,
                                                 remove, ((c.id, c.doc_id, c.metadata) for c in add))
        m.faiss_kind, m.updated_at, m.notes = self.dense.kind, time.time(), list(self.dense.notes)
        m.analyzer = {**self.sparse.analyzer.settings(), "k1": self.sparse.config.k1, "b": self.sparse.config.b}

    def _compact(self) -> None:
        """Rewrite the live rows as one segment; FAISS is rebuilt over them."""
        live = [r for r in range(len(self._rows)) if r not in self._dead]
        chunks = [self._rows[r] for r in live]
        vectors = np.ascontiguousarray(self.dense.vectors[live], np.float32)
        terms = [self._terms_of(r) for r in live]
        self.segments = [Segment(f"seg-{seg_files.new_tag(self.manifest.revision + 1)}", chunks, vectors, None, terms)]
        self._rows, self._dead, self._terms_flat = chunks, set(), terms
        self.dense.rebuild(vectors)

    def _rebuild_sparse(self, reanalyze: bool = False) -> None:
        live = self._live.tolist()
        tokens = ([self.sparse.analyzer(self._rows[r].text) for r in live] if reanalyze
                  else [self._terms_of(r) for r in live])
        self.sparse.rebuild(tokens, self._live)

    # -- persistence ----------------------------------------------------------------------------
    def save(self, *, progress: ProgressFn | None = None) -> None:
        """Commit: write the new segments and derived files, then replace the manifest."""
        folder = self.folder
        try:
            folder.mkdir(parents=True, exist_ok=True)
            clean_leftovers(folder)  # a format-1 save's temp folders (the writer holds the lock)
        except OSError as err:
            raise IngestError(f"cannot write index {self.name!r} under {folder.parent}: "
                              f"{type(err).__name__}: {err.strerror or err}",
                              fix="point index.dir at a folder this process can create and write "
                                  "(check that it exists, is a folder and its permissions)") from None
        previous = seg_files.read_manifest_files(folder)
        tag = seg_files.new_tag(self.manifest.revision)
        files: dict[str, object] = {"segments": [s.name for s in self.segments], "dead": None,
                                    "bm25": f"bm25-{tag}", "dense": None, "sources": f"sources-{tag}.json"}
        written: list[str] = []
        try:
            for s in self.segments:
                if s.folder is None:
                    written += s.files()
                    s.write(folder)
            if self._dead:
                files["dead"] = f"dead-{tag}.npy"
                written.append(str(files["dead"]))
                seg_files.write_npy(folder / str(files["dead"]), np.fromiter(sorted(self._dead), np.int64))
            written.append(str(files["bm25"]))
            self.sparse.save(folder / str(files["bm25"]))
            if self.dense.save_structure(folder / f"dense-{tag}.faiss"):
                files["dense"] = f"dense-{tag}.faiss"
                written.append(str(files["dense"]))
            written.append(str(files["sources"]))
            seg_files.write_json(folder / str(files["sources"]), self.sources)
            seg_files.fsync_dir(folder)
            self.manifest.files, self.manifest.format_version = files, FORMAT_VERSION
            seg_files.commit(folder, self.manifest.to_dict())
        except BaseException as err:
            seg_files.remove(folder, [w for w in written if w not in previous])
            for s in self.segments:
                if s.name in {w.split(".")[0] for w in written}:
                    s.folder = None
            if isinstance(err, OSError):
                raise IngestError(f"cannot write index {self.name!r} at {folder}: {type(err).__name__}: "
                                  f"{err.strerror or err}; the previous version is still served",
                                  fix="free disk space or fix permissions, then ingest again") from None
            raise
        seg_files.collect_garbage(folder, seg_files.manifest_files(files) | previous)
        self._dirty = False
        if progress:
            progress("save", 1, 1)


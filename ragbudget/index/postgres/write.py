"""The writers of a PostgreSQL index: ingest, add_documents, delete — each one transaction, one new revision.

A write chunks and embeds outside the transaction (only chunks whose id is new are embedded; a chunk whose
id is unchanged keeps its stored vector), then in one transaction: locks the index row, closes replaced rows
(``valid_to = new revision``), COPYs new rows (chunks with vectors, postings), updates document frequencies
(versioned rows too), stores the revision's BM25 statistics and bumps ``revision``/``content_version``. A
crash, ``kill -9`` or lost connection before COMMIT leaves the previous revision exactly as it was.

Old rows are kept while a reader may still be serving their revision: rows closed at revision r are deleted
once r is at least ``KEEP_REVISIONS`` behind the latest and was committed more than ``RETAIN_S`` ago (run after
each write). A store object older than that may miss rows; serving processes follow ``committed_version``
before each query, so they never hold such an old version.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np
from psycopg import sql
from psycopg.types.json import Jsonb

from ...errors import IndexBusyError, IndexMismatchError, IngestError
from ...ingest import Chunker, load_path
from ...ingest.paths import PathPolicy
from ...kernels.tokens import Tokenizer
from ...types import Chunk, Document
from ..base import ProgressFn, progress_step
from .schema import create_index_tables, create_search_indexes, db_errors, drop_index_tables, scalar, table
from .store import PostgresReader, Snapshot
from ..report import IngestReport
from ..upsert import StoredChunk, chunk_documents, plan_upsert

if TYPE_CHECKING:
    from ...embed.encoder import Embedder

EMBED_BATCH = 1024
KEEP_REVISIONS = 2
RETAIN_S = 600.0
CHUNK_TYPES = ["int8", "text", "text", "text", "int4", "int4", "text", "jsonb", "int4", "vector", "int8"]
POSTING_TYPES = ["text", "int8", "int4", "int4", "float4", "int8"]


def content_version(uid: str, revision: int) -> str:
    return hashlib.sha256(f"{uid}:{revision}".encode()).hexdigest()[:16]


def _record(c: Chunk) -> tuple:
    """A chunk's stored record as the planner compares it with a row (doc, position, tokens, metadata)."""
    return (c.doc_id, c.position, c.n_tokens, _norm(c.metadata))


def _norm(md: Any) -> Any:
    return json.loads(json.dumps(dict(md), default=str))


@dataclasses.dataclass
class _Plan:
    close: list[int]
    inserts: list[Chunk]
    vectors: dict[str, np.ndarray]
    sources: dict[str, list[str]]
    docs_before: int
    docs_after: int
    base_revision: int


class PostgresStore(PostgresReader):
    """An opened index version plus its writers (see the module docstring for the transaction)."""

    def __init__(self, backend, name, manifest, snap: Snapshot, *, uid: str | None = None,
                 replace_all: bool = False, recreate: bool = False) -> None:
        super().__init__(backend, name, manifest, snap)
        cfg = backend.config
        self.chunker = Chunker(cfg.chunking, Tokenizer(cfg.tokenizer.encoding, count_cache_entries=0))
        self.uid = uid
        self._replace_all = replace_all  # opened with rebuild: the first write replaces every row
        self._recreate = recreate  # rebuild with another model/dim: the first write recreates the tables

    # -- public writers ---------------------------------------------------------------------------
    def ingest(self, path: str, embedder: "Embedder", *, progress: ProgressFn | None = None,
               policy: PathPolicy | None = None) -> IngestReport:
        t0 = time.perf_counter()
        if not Path(path).expanduser().exists():
            raise IngestError(f"path not found: {path}", fix="pass an existing folder or file to ingest")
        root = str(Path(path).expanduser().absolute() if policy is not None else Path(path).expanduser().resolve())
        docs, load = load_path(root, policy=policy, ids=self.backend.config.index.record_ids,
                               max_bytes=self.backend.config.service.limits.max_ingest_file_bytes)
        if progress:
            progress("load", 1, 1)
        protect = {w for w, _ in load.skipped + load.failed}
        protect |= {w.rsplit(":", 1)[0] for w in protect}
        report = self._upsert(docs, embedder, root=root, protect=protect, progress=progress)
        report.absorb(load)
        if not docs and not load.files_read:
            report.notes.append(f"no document could be read from {root}; the index was left as it was")
        report.seconds = time.perf_counter() - t0
        return report

    def add_documents(self, docs: Sequence[Document], embedder: "Embedder", *,
                      progress: ProgressFn | None = None) -> IngestReport:
        t0 = time.perf_counter()
        report = self._upsert(docs, embedder, root=None, protect=set(), progress=progress)
        report.seconds = time.perf_counter() - t0
        return report

    def delete(self, *, doc_ids: Iterable[str] = (), sources: Iterable[str] = ()) -> int:
        ids, srcs = list(set(doc_ids)), list(set(sources))
        if not ids and not srcs:
            return 0
        with self.backend.writing(self.name):
            state = self._latest()
            if state is None:
                return 0
            index_id, rev, src_map = state
            t = table(self.schema, "chunks", index_id)
            q = sql.SQL("""SELECT row_id, doc_id FROM {} WHERE valid_to IS NULL AND (doc_id = ANY(%s)
                OR source = ANY(%s) OR EXISTS (SELECT 1 FROM unnest(%s::text[]) s(p)
                                             WHERE left(source, length(p) + 1) = p || ':'))""").format(t)
            with db_errors(f"deleting from index {self.name!r}"), self.backend.pool.connection() as conn:
                rows = conn.execute(q, (ids, srcs, srcs)).fetchall()
            if not rows:
                return 0
            gone = {d for _, d in rows}
            new_sources = {r: [d for d in v if d not in gone] for r, v in src_map.items()}
            docs_before = self._snap_docs(index_id, rev)
            plan = _Plan([r for r, _ in rows], [], {}, new_sources, docs_before, docs_before - len(gone), rev)
            self._commit(plan, None)
            return len(rows)

    # -- planning ---------------------------------------------------------------------------------
    def _latest(self) -> tuple[int, int, dict[str, list[str]]] | None:
        with db_errors(f"reading index {self.name!r}"), self.backend.pool.connection() as conn:
            row = conn.execute(sql.SQL("SELECT id, revision, sources FROM {}.indexes WHERE name = %s").format(
                sql.Identifier(self.schema)), (self.name,)).fetchone()
        return None if row is None else (int(row[0]), int(row[1]), dict(row[2] or {}))

    def _snap_docs(self, index_id: int, rev: int) -> int:
        with self.backend.pool.connection() as conn:
            row = conn.execute(sql.SQL("SELECT n_documents FROM {}.indexes WHERE id = %s").format(
                sql.Identifier(self.schema)), (index_id,)).fetchone()
        return int(row[0]) if row else 0

    def _upsert(self, docs: Sequence[Document], embedder: "Embedder", *, root: str | None, protect: set[str],
                progress: ProgressFn | None) -> IngestReport:
        model, dim = self.manifest["embedding_model"], int(self.manifest["embedding_dim"])
        if embedder.model_id != model or int(embedder.dim) != dim:
            raise IndexMismatchError(
                f"index {self.name!r} was built with embedding model {model!r} (dim {dim}), but the configured "
                f"model is {embedder.model_id!r} (dim {embedder.dim})",
                fix=f"re-ingest with --rebuild (ragbudget ingest PATH --index {self.name} --rebuild), "
                    "or set embedding.model back to the index's model")
        report = IngestReport(index=self.name)
        new_by_doc = chunk_documents(docs, self.chunker.chunk, report, progress)
        self.added_chunks: list[Chunk] = []
        with self.backend.writing(self.name):
            plan, todo, reuse = self._plan(new_by_doc, root, protect, report)
            if plan is None:
                report.content_version = self.version
                return report
            step = progress_step(len(todo), 32, EMBED_BATCH)  # the bar advances by embedded batches
            for start in range(0, len(todo), step):
                part = todo[start:start + step]
                plan.vectors.update(zip((c.id for c in part), np.asarray(embedder.embed([c.text for c in part]))))
                if progress:
                    progress("embed", start + len(part), len(todo))
            report.embedded = len(todo)
            self.added_chunks = list(todo)  # the registry embeds their sentences (query-time trimming)
            plan.vectors.update(reuse)
            if progress:
                progress("index", 0, 1)
            self._commit(plan, progress)
            if progress:
                progress("index", 1, 1)
        report.content_version = self.version
        return report

    def _plan(self, new_by_doc: dict[str, list[Chunk]], root: str | None, protect: set[str],
              report: IngestReport) -> tuple[_Plan | None, list[Chunk], dict[str, np.ndarray]]:
        state = None if self._recreate else self._latest()
        index_id, rev, src_map = state if state is not None else (None, 0, {})
        if state is None or self._replace_all:
            src_map = {}
        rows: list[tuple] = []
        before: set[str] = set()
        if index_id is not None:
            t = table(self.schema, "chunks", index_id)
            args: tuple[Any, ...] = ()
            if self._replace_all:
                where = "TRUE"
            else:
                before = set(src_map.get(root, [])) if root is not None else set()
                where, args = "doc_id = ANY(%s)", (list(set(new_by_doc) | before),)
            q = sql.SQL(f"""SELECT row_id, chunk_id, doc_id, position, n_tokens, metadata, source FROM {{}}
                WHERE valid_to IS NULL AND {where}""").format(t)
            with db_errors(f"reading index {self.name!r}"), self.backend.pool.connection() as conn:
                rows = conn.execute(q, args).fetchall()
            if self._replace_all:  # a rebuild replaces every stored document
                before = {r[2] for r in rows}
        row_of = {r[1]: r[0] for r in rows}
        plan = plan_upsert(new_by_doc, (StoredChunk(r[1], r[2], r[6], (r[2], r[3], r[4], r[5])) for r in rows),
                           before=before, root=root is not None, record_of=_record,
                           protect_sources=set() if self._replace_all else protect,
                           report=report)
        if plan.sources is not None:
            src_map[str(root)] = plan.sources
        if plan.empty and not self._replace_all and not self._recreate:
            return None, [], {}
        replaced = set(new_by_doc) | plan.removed_docs
        affected = [r for r in rows if r[2] in replaced]
        docs_before = self._snap_docs(index_id, rev) if index_id is not None else 0
        new_docs = {c.doc_id for cs in new_by_doc.values() for c in cs}
        if self._replace_all:
            docs_after = len(new_docs)
        else:
            docs_after = docs_before - len({r[2] for r in affected}) + len(new_docs)
        reuse: dict[str, np.ndarray] = {}
        reuse_rows = {cid: row_of[cid] for cid in plan.reusable}
        if reuse_rows and index_id is not None:
            q = sql.SQL("SELECT row_id, embedding FROM {} WHERE row_id = ANY(%s)").format(
                table(self.schema, "chunks", index_id))
            with db_errors(f"reading index {self.name!r}"), self.backend.pool.connection() as conn:
                vec_of = {r: _np(v) for r, v in conn.execute(q, (list(reuse_rows.values()),))}
            reuse = {cid: vec_of[r] for cid, r in reuse_rows.items() if r in vec_of}
        close = [row_of[cid] for cid in plan.remove]
        todo = [c for c in plan.add if c.id not in reuse]
        return _Plan(close, plan.add, {}, src_map, docs_before, docs_after, rev), todo, reuse

    # -- the transaction --------------------------------------------------------------------------
    def _commit(self, plan: _Plan, progress: ProgressFn | None) -> None:
        s = sql.Identifier(self.schema)
        an = self.analyzer
        terms_of = [an(c.text) for c in plan.inserts]
        m = dict(self.manifest)
        pg = self.backend.config.index.postgres
        with db_errors(f"committing a write to index {self.name!r}"), self.backend.pool.connection() as conn:
            with conn.transaction():
                row = conn.execute(sql.SQL("SELECT id, revision, uid FROM {}.indexes WHERE name = %s FOR UPDATE")
                                   .format(s), (self.name,)).fetchone()
                fresh = False
                if row is not None and self._recreate:
                    drop_index_tables(conn, self.schema, int(row[0]))
                    conn.execute(sql.SQL("DELETE FROM {}.indexes WHERE id = %s").format(s), (row[0],))
                    conn.execute(sql.SQL("DELETE FROM {}.revisions WHERE index_id = %s").format(s), (row[0],))
                    row = None
                if row is None:
                    uid = hashlib.sha256(f"{self.name}:{time.time_ns()}".encode()).hexdigest()[:12]
                    now = time.time()
                    index_id = int(scalar(conn.execute(sql.SQL("""INSERT INTO {}.indexes (name, uid, embedding_model,
                        embedding_dim, chunker, analyzer, content_version, hnsw, created_at, updated_at)
                        VALUES (%s, %s, %s, %s, %s, %s, '', %s, %s, %s) RETURNING id""").format(s), (
                        self.name, uid, m["embedding_model"], int(m["embedding_dim"]), Jsonb(self.chunker.settings()),
                        Jsonb(m["analyzer"]), Jsonb({"m": pg.hnsw_m, "ef_construction": pg.hnsw_ef_construction}),
                        now, now))))
                    create_index_tables(conn, self.schema, index_id, int(m["embedding_dim"]))
                    rev, fresh, prev_n, prev_len = 0, True, 0, 0
                else:
                    index_id, rev, uid = int(row[0]), int(row[1]), str(row[2])
                    if rev != plan.base_revision:
                        raise IndexBusyError(f"index {self.name!r} changed while this write was prepared "
                                             f"(revision {plan.base_revision} → {rev}): another writer without "
                                             "the writer lock", fix="retry the ingest")
                    st = conn.execute(sql.SQL("SELECT n_chunks, total_len FROM {}.revisions WHERE index_id = %s "
                                              "AND revision = %s").format(s), (index_id, rev)).fetchone()
                    prev_n, prev_len = (int(st[0]), int(st[1])) if st else (0, 0)
                new = rev + 1
                chunks_t, post_t, terms_t = (table(self.schema, k, index_id) for k in ("chunks", "postings", "terms"))
                delta: Counter[str] = Counter()
                closed_len = 0
                closed_n = 0
                if plan.close:
                    lens = conn.execute(sql.SQL("UPDATE {} SET valid_to = %s WHERE row_id = ANY(%s) "
                                                "AND valid_to IS NULL RETURNING dl").format(chunks_t),
                                        (new, plan.close)).fetchall()
                    closed_n, closed_len = len(lens), sum(int(r[0]) for r in lens)
                    for (term,) in conn.execute(sql.SQL("""UPDATE {} SET valid_to = %s WHERE row_id = ANY(%s)
                            AND valid_to IS NULL RETURNING term""").format(post_t), (new, plan.close)).fetchall():
                        delta[term] -= 1
                if plan.inserts:
                    seq = table(self.schema, "rowseq", index_id)
                    last = int(scalar(conn.execute(sql.SQL("SELECT setval(%s::regclass, nextval(%s::regclass) + %s - 1)"),
                                            (seq.as_string(conn), seq.as_string(conn), len(plan.inserts)))))
                    first = last - len(plan.inserts) + 1
                    with conn.cursor().copy(sql.SQL("""COPY {} (row_id, chunk_id, doc_id, source, position,
                            n_tokens, text, metadata, dl, embedding, valid_from) FROM STDIN (FORMAT BINARY)""")
                                            .format(chunks_t)) as cp:
                        cp.set_types(CHUNK_TYPES)
                        for i, c in enumerate(plan.inserts):
                            cp.write_row((first + i, c.id, c.doc_id, c.source, c.position, c.n_tokens, c.text,
                                          Jsonb(_norm(c.metadata)), len(terms_of[i]),
                                          np.asarray(plan.vectors[c.id], dtype=np.float32), new))
                    # each posting's BM25 term score at the average length this write leaves; it only orders
                    # a term's postings (search scores with the statistics of the version it reads)
                    n_after = (0 if fresh else prev_n - closed_n) + len(plan.inserts)
                    len_after = (0 if fresh else prev_len - closed_len) + sum(len(t) for t in terms_of)
                    k1, b, avgdl = self.k1, self.b, max(len_after / max(n_after, 1), 1e-9)
                    with conn.cursor().copy(sql.SQL("COPY {} (term, row_id, tf, dl, impact, valid_from) FROM STDIN "
                                                    "(FORMAT BINARY)").format(post_t)) as cp:
                        cp.set_types(POSTING_TYPES)
                        for i, toks in enumerate(terms_of):
                            dl = len(toks)
                            norm = k1 * (1 - b + b * dl / avgdl)
                            for term, tf in Counter(toks).items():
                                cp.write_row((term, first + i, tf, dl, tf * (k1 + 1) / (tf + norm), new))
                                delta[term] += 1
                delta = Counter({t: d for t, d in delta.items() if d})
                if delta:
                    conn.execute(sql.SQL("""WITH d(term, delta) AS (SELECT * FROM unnest(%s::text[], %s::int[])),
                        old AS (UPDATE {t} x SET valid_to = %s FROM d WHERE x.term = d.term AND x.valid_to IS NULL
                                RETURNING x.term, x.df)
                        INSERT INTO {t} (term, df, valid_from)
                        SELECT d.term, coalesce(old.df, 0) + d.delta, %s FROM d LEFT JOIN old ON old.term = d.term
                        WHERE coalesce(old.df, 0) + d.delta > 0""").format(t=terms_t),
                                 (list(delta), list(delta.values()), new, new))
                if fresh:
                    create_search_indexes(conn, self.schema, index_id, pg.hnsw_m, pg.hnsw_ef_construction,
                                          pg.build_memory_mb)
                n_chunks = (len(plan.inserts) if fresh else prev_n - closed_n + len(plan.inserts))
                total_len = prev_len - closed_len + sum(len(t) for t in terms_of)
                avg_idf = float(scalar(conn.execute(sql.SQL("""SELECT coalesce(avg(ln((%s - df + 0.5) / (df + 0.5))), 0)
                    FROM {} WHERE valid_to IS NULL""").format(terms_t), (float(n_chunks),))))
                version = content_version(uid, new)
                now = time.time()
                conn.execute(sql.SQL("INSERT INTO {}.revisions VALUES (%s, %s, %s, %s, %s, %s)").format(s),
                             (index_id, new, n_chunks, total_len, avg_idf, now))
                conn.execute(sql.SQL("""UPDATE {}.indexes SET revision = %s, content_version = %s, n_chunks = %s,
                    n_documents = %s, sources = %s, chunker = %s, updated_at = %s WHERE id = %s""").format(s),
                             (new, version, n_chunks, max(plan.docs_after, 0), Jsonb(plan.sources),
                              Jsonb(self.chunker.settings()), now, index_id))
                conn.execute("SELECT pg_notify(%s, %s)", (f"{self.schema}_index", f"{self.name}\t{version}"))
        with self._snap_lock:
            self._snap = Snapshot(index_id, new, version, n_chunks, total_len, avg_idf, max(plan.docs_after, 0))
            self.uid, self._replace_all, self._recreate = uid, False, False
            self.manifest = {**self.manifest, "chunker": self.chunker.settings()}
        self.vacuum(index_id, new)

    def vacuum(self, index_id: int, latest: int) -> int:
        """Delete rows no reader should still need (see the module docstring); returns chunk rows removed."""
        s = sql.Identifier(self.schema)
        try:
            with self.backend.pool.connection() as conn, conn.transaction():
                row = conn.execute(sql.SQL("""SELECT max(revision) FROM {}.revisions WHERE index_id = %s
                    AND revision <= %s AND committed_at < %s""").format(s),
                                   (index_id, latest - KEEP_REVISIONS, time.time() - RETAIN_S)).fetchone()
                horizon = row[0] if row else None
                if horizon is None:
                    return 0
                n = 0
                for kind in ("chunks", "postings", "terms"):
                    cur = conn.execute(sql.SQL("DELETE FROM {} WHERE valid_to IS NOT NULL AND valid_to <= %s")
                                       .format(table(self.schema, kind, index_id)), (horizon,))
                    n = cur.rowcount if kind == "chunks" else n
                conn.execute(sql.SQL("DELETE FROM {}.revisions WHERE index_id = %s AND revision < %s").format(s),
                             (index_id, horizon))
                return n
        except Exception:  # noqa: BLE001 - housekeeping: the next write retries
            return 0



def _np(v: Any) -> np.ndarray:
    """A pgvector value (``Vector`` or array) as float32."""
    return np.asarray(v.to_numpy() if hasattr(v, "to_numpy") else v, dtype=np.float32)

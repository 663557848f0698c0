"""``index.backend: postgres``: PostgreSQL + pgvector, shared by every process that names the same database.

    backend = PostgresBackend(config)            # probes index.dsn, creates schema + extension, opens the pool
    store = backend.open("docs", embedder, create=True)
    backend.committed_version("docs")            # one unique-index SELECT: the per-query freshness check
    backend.close()                              # closes the pool (stores opened from it stop working)

Layout and versions: :mod:`ragbudget.index.postgres.schema`; reads: :mod:`ragbudget.index.postgres.store`; writes and
the vacuum policy: :mod:`ragbudget.index.postgres.write`. One writer per index across processes and machines: a
session advisory lock on a dedicated connection (released by the server if the holder dies); a second
writer waits up to the timeout, then gets :class:`IndexBusyError` naming the holder's pid and host.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import zlib
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from ...config import Config
from ...errors import IndexBusyError, IndexError_, IndexMismatchError, IndexNotFoundError
from .schema import connect_error, connect_kwargs, db_errors, scalar, open_pool, redact, vector_dim
from .store import Snapshot
from .write import PostgresStore
from ..sparse import Analyzer

if TYPE_CHECKING:
    from ...embed.encoder import Embedder

LOCK_CLASS = 0x5247  # "RG": first key of the (int, int) advisory lock; the second is crc32(schema:name)
POLL_S = 0.1
JOBS_KEEP = 1000

__all__ = ["PostgresBackend", "PostgresJobStore", "PostgresStore"]


class PostgresJobStore:
    """Ingest jobs as rows of ``<schema>.jobs`` (jsonb): every worker and process reads the same record."""

    def __init__(self, backend: "PostgresBackend") -> None:
        self.backend = backend
        self._t = sql.SQL("{}.jobs").format(sql.Identifier(backend.schema))

    def put(self, job_id: str, record: Mapping[str, Any]) -> None:
        now = time.time()
        body = json.loads(json.dumps({**record, "updated_at": now}, default=str))
        with db_errors("writing a job record"), self.backend.pool.connection() as conn:
            conn.execute(sql.SQL("""INSERT INTO {} (id, record, updated_at) VALUES (%s, %s, %s)
                ON CONFLICT (id) DO UPDATE SET record = EXCLUDED.record, updated_at = EXCLUDED.updated_at""")
                         .format(self._t), (job_id, Jsonb(body), now))

    def get(self, job_id: str) -> dict[str, Any] | None:
        with db_errors("reading a job record"), self.backend.pool.connection() as conn:
            row = conn.execute(sql.SQL("SELECT record FROM {} WHERE id = %s").format(self._t), (job_id,)).fetchone()
        return dict(row[0]) if row else None

    def recent(self, limit: int = 50) -> list[dict[str, Any]]:
        with db_errors("listing job records"), self.backend.pool.connection() as conn:
            rows = conn.execute(sql.SQL("SELECT record FROM {} ORDER BY updated_at DESC LIMIT %s").format(self._t),
                                (int(limit),)).fetchall()
            conn.execute(sql.SQL("""DELETE FROM {t} WHERE updated_at < (SELECT updated_at FROM {t}
                ORDER BY updated_at DESC OFFSET %s LIMIT 1)""").format(t=self._t), (JOBS_KEEP,))
        return [dict(r[0]) for r in rows]


class PostgresBackend:
    """Indexes in one PostgreSQL database (``index.dsn``), schema ``index.postgres.schema_name``."""

    kind = "postgres"

    def __init__(self, config: Config) -> None:
        self.config = config
        self.schema = config.index.postgres.schema_name
        self.dsn = (config.index.dsn or "").strip()
        self.dsn_redacted = redact(self.dsn)
        self.pool = open_pool(config)
        self._held: dict[str, tuple[int, int]] = {}  # name → (owning thread, depth): reentrant per thread
        self._held_lock = threading.Lock()
        self._idx = sql.SQL("{}.indexes").format(sql.Identifier(self.schema))

    # -- catalogue --------------------------------------------------------------------------------
    def list(self) -> list[str]:
        with db_errors("listing indexes"), self.pool.connection() as conn:
            return [r[0] for r in conn.execute(sql.SQL("SELECT name FROM {} ORDER BY name").format(self._idx))]

    def exists(self, name: str) -> bool:
        return self.committed_version(name) is not None

    def committed_version(self, name: str) -> str | None:
        with db_errors(f"checking the version of index {name!r}"), self.pool.connection() as conn:
            row = conn.execute(sql.SQL("SELECT content_version FROM {} WHERE name = %s").format(self._idx),
                               (name,)).fetchone()
        return str(row[0]) if row else None

    def open(self, name: str, embedder: "Embedder", *, create: bool = False,
             rebuild: bool = False) -> PostgresStore:
        _check_name(name)
        with db_errors(f"opening index {name!r}"), self.pool.connection() as conn:
            row = conn.execute(sql.SQL("""SELECT i.id, i.uid, i.embedding_model, i.embedding_dim, i.chunker,
                    i.analyzer, i.revision, i.content_version, i.n_documents, r.n_chunks, r.total_len, r.avg_idf,
                    i.created_at, i.updated_at, i.hnsw
                FROM {} i LEFT JOIN {}.revisions r ON r.index_id = i.id AND r.revision = i.revision
                WHERE i.name = %s""").format(self._idx, sql.Identifier(self.schema)), (name,)).fetchone()
            dim = vector_dim(conn, self.schema, int(row[0])) if row else None
        bm = self.config.retrieval.bm25
        analyzer = {**Analyzer(bm).settings(), "k1": bm.k1, "b": bm.b}
        fresh_manifest = {"name": name, "embedding_model": embedder.model_id, "embedding_dim": int(embedder.dim),
                          "analyzer": analyzer, "backend": "postgres"}
        if row is None:
            if not create:
                existing = self.list()
                raise IndexNotFoundError(
                    f"no index named {name!r} in PostgreSQL {self.dsn_redacted} schema {self.schema}"
                    f" (existing: {', '.join(existing) if existing else 'none'})",
                    fix=f"create it with: ragbudget ingest PATH --index {name}")
            return PostgresStore(self, name, fresh_manifest, Snapshot(None, 0, "", 0, 0, 0.0))
        manifest = {"name": name, "embedding_model": row[2], "embedding_dim": int(row[3]), "chunker": row[4],
                    "analyzer": row[5], "revision": int(row[6]), "created_at": row[12], "updated_at": row[13],
                    "hnsw": row[14], "backend": "postgres"}
        snap = Snapshot(int(row[0]), int(row[6]), str(row[7]), int(row[9] or 0), int(row[10] or 0),
                        float(row[11] or 0.0), int(row[8] or 0))
        same_model = row[2] == embedder.model_id and int(row[3]) == int(embedder.dim)
        if rebuild:
            if same_model and dim == int(embedder.dim):
                return PostgresStore(self, name, manifest, snap, uid=row[1], replace_all=True)
            return PostgresStore(self, name, fresh_manifest, snap, uid=row[1], recreate=True)
        if not same_model or (dim is not None and dim != int(embedder.dim)):
            have = dim if dim is not None else row[3]
            raise IndexMismatchError(
                f"index {name!r} in PostgreSQL was built with embedding model {row[2]!r} (vector({have}) "
                f"column), but the configured model is {embedder.model_id!r} (dim {embedder.dim})",
                fix=f"re-ingest with --rebuild (ragbudget ingest PATH --index {name} --rebuild), or set "
                    "embedding.model back to the index's model")
        return PostgresStore(self, name, manifest, snap, uid=row[1])

    # -- writers ----------------------------------------------------------------------------------
    def _lock_key(self, name: str) -> tuple[int, int]:
        return LOCK_CLASS, zlib.crc32(f"{self.schema}:{name}".encode()) & 0x7FFFFFFF

    def _holder(self, conn: psycopg.Connection, key: tuple[int, int]) -> str:
        try:
            row = conn.execute("""SELECT a.pid, a.application_name, a.client_addr::text FROM pg_locks l
                JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted
                AND l.classid = %s::oid AND l.objid = %s::oid AND l.objsubid = 2 LIMIT 1""", key).fetchone()
        except psycopg.Error:
            return ""
        if row is None:
            return ""
        app = row[1] or ""
        return f" ({app}, server pid {row[0]})" if app.startswith("ragbudget") else f" (server pid {row[0]})"

    @contextlib.contextmanager
    def write_lock(self, name: str, timeout_s: float,
                   on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
        me = threading.get_ident()
        with self._held_lock:
            held = self._held.get(name)
            if held is not None and held[0] == me:
                self._held[name] = (me, held[1] + 1)
                reentered = True
            else:
                reentered = False
        if reentered:
            try:
                yield
            finally:
                with self._held_lock:
                    t, depth = self._held[name]
                    self._held[name] = (t, depth - 1)
            return
        key = self._lock_key(name)
        try:
            conn = psycopg.connect(self.dsn, **connect_kwargs(self.config))
        except (psycopg.Error, ValueError) as err:
            raise connect_error(err, self.dsn) from None
        try:
            deadline = time.monotonic() + timeout_s
            told = False
            while True:
                with db_errors(f"taking the writer lock of index {name!r}"):
                    got = scalar(conn.execute("SELECT pg_try_advisory_lock(%s, %s)", key))
                if got:
                    break
                holder = self._holder(conn, key)
                if time.monotonic() >= deadline:
                    raise IndexBusyError(f"index {name!r} is being written by another process{holder} "
                                         f"(waited {timeout_s:g} s)",
                                         fix="wait for that ingest to finish, or raise index.lock_timeout_s")
                if on_wait is not None and not told:
                    on_wait(f"waiting for another writer of index {name!r}{holder}")
                    told = True
                time.sleep(POLL_S)
            with self._held_lock:
                self._held[name] = (me, 1)
            try:
                yield
            finally:
                with self._held_lock:
                    self._held.pop(name, None)
                with contextlib.suppress(psycopg.Error):
                    conn.execute("SELECT pg_advisory_unlock(%s, %s)", key)
        finally:
            conn.close()

    @contextlib.contextmanager
    def writing(self, name: str) -> Iterator[None]:
        """The writer lock for a store's own write (reentrant when this thread already holds it)."""
        with self.write_lock(name, self.config.index.lock_timeout_s):
            yield

    def jobs(self) -> PostgresJobStore:
        return PostgresJobStore(self)

    def close(self) -> None:
        self.pool.close()


def _check_name(name: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", name or ""):
        raise IndexError_(f"invalid index name {name!r}",
                          fix="use letters, digits, '_', '-' or '.', not starting with '.' or '-'")

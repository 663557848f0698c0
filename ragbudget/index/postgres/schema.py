"""PostgreSQL side of ``index.backend: postgres``: connecting, the pool, error mapping and the schema.

Tables (in ``index.postgres.schema_name``; created idempotently):

* ``indexes``   one row per index: manifest (embedding model + dim, chunker, analyzer), ``revision``,
                ``content_version`` (``committed_version`` is one unique-index lookup here), counts, sources.
* ``revisions`` per committed revision: chunk count, total analysed length, average idf (BM25 statistics
                of that version, so a reader at an old version scores with that version's numbers).
* ``jobs``      ingest job records (jsonb), readable from every process.
* per index N: ``chunks_N`` (text, jsonb metadata, ``vector(dim)`` under HNSW ``vector_ip_ops``),
  ``postings_N`` (term → row, tf, length, impact: the posting's BM25 term score when written), ``terms_N`` (term → document frequency). Every row carries
  ``valid_from``/``valid_to`` revisions: a reader at revision v sees rows with
  ``valid_from <= v AND (valid_to IS NULL OR valid_to > v)``.
"""

from __future__ import annotations

import contextlib
import os
import socket
from typing import Any, ContextManager, Iterator, Protocol

import psycopg
from psycopg import errors as pgerr
from psycopg import sql
from psycopg_pool import ConnectionPool, PoolTimeout

from ...config import Config
from ...errors import ConfigError, IndexError_, IndexUnavailableError

START_HINT = ("start the server (for the embedded one: ragbudget pg start) or fix index.dsn / "
              "RAGBUDGET_INDEX__DSN")
EXTENSION_FIX = ("install pgvector on the server (e.g. apt-get install postgresql-18-pgvector, or use the "
                 "embedded server: ragbudget pg start), then as a superuser run CREATE EXTENSION vector in "
                 "that database")


def redact(dsn: str) -> str:
    """The DSN without its password (errors and logs name the server, never the secret)."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparseable dsn>"
    info.pop("password", None)
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in info.items()})


def connect_kwargs(config: Config) -> dict[str, Any]:
    pg = config.index.postgres
    opts = []
    if pg.statement_timeout_ms:
        opts.append(f"-c statement_timeout={int(pg.statement_timeout_ms)}")
    opts.append(f"-c hnsw.ef_search={int(pg.hnsw_ef_search)}")
    opts.append("-c hnsw.iterative_scan=relaxed_order")
    return {"connect_timeout": max(1, int(round(pg.connect_timeout_s))), "autocommit": True,
            "application_name": f"ragbudget pid={os.getpid()} host={socket.gethostname()}"[:63],
            "options": " ".join(opts)}


def connect_error(err: Exception, dsn: str) -> Exception:
    """A connection failure as a ragbudget error with the fix."""
    msg = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    where = redact(dsn)
    low = msg.lower()
    if isinstance(err, (psycopg.ProgrammingError, ValueError)) or ("invalid" in low and (
            "option" in low or "uri" in low or "conninfo" in low or "connection string" in low)):
        return ConfigError(f"index.dsn is not a valid PostgreSQL connection string ({msg})",
                           fix="use postgresql://USER[:PASSWORD]@HOST:PORT/DATABASE (or the DSN printed by "
                               "`ragbudget pg start`)")
    if "does not exist" in low and "database" in low:
        return ConfigError(f"database in index.dsn ({where}) does not exist: {msg}",
                           fix="create it (createdb NAME), or point index.dsn at an existing database")
    if "authentication" in low or "password" in low or "role" in low:
        return ConfigError(f"PostgreSQL refused the login for {where}: {msg}",
                           fix="check the user and password in index.dsn")
    return IndexUnavailableError(f"cannot reach PostgreSQL at {where}: {msg}", fix=START_HINT)


@contextlib.contextmanager
def db_errors(what: str) -> Iterator[None]:
    """Map database failures during ``what`` to ragbudget errors (the transaction has rolled back)."""
    try:
        yield
    except PoolTimeout as err:
        raise IndexUnavailableError(f"{what}: no database connection available ({err})",
                                    fix=f"{START_HINT}; or raise index.postgres.pool_max") from None
    except pgerr.QueryCanceled as err:
        raise IndexUnavailableError(f"{what}: statement timed out ({str(err).strip()})",
                                    fix="raise index.postgres.statement_timeout_ms, or check the server load",
                                    retry_after_s=1.0) from None
    except pgerr.DiskFull as err:
        raise IndexUnavailableError(f"{what}: the database server's disk is full ({str(err).strip()}); "
                                    "nothing was committed", fix="free space on the database server's disk, "
                                    "or VACUUM FULL after deleting old documents") from None
    except (psycopg.OperationalError, psycopg.InterfaceError) as err:
        raise IndexUnavailableError(f"{what}: lost the database connection ({str(err).strip() or type(err).__name__})"
                                    "; nothing half-written is visible", fix=START_HINT) from None


def scalar(cur: Any) -> Any:
    """The first column of a query's one row (a statement that always returns a row: an aggregate, a
    RETURNING, an advisory lock)."""
    row = cur.fetchone()
    if row is None:
        raise IndexError_("the database returned no row where one was certain", fix="check the server's logs")
    return row[0]


class Database(Protocol):
    """What the reader and the writer need of :class:`~ragbudget.index.postgres.backend.PostgresBackend`: they
    are built by it, so they hold it through this protocol instead of importing it."""

    config: Config
    schema: str
    dsn_redacted: str
    pool: ConnectionPool

    def writing(self, name: str) -> ContextManager[None]: ...


def open_pool(config: Config) -> ConnectionPool:
    """Probe the DSN (precise errors), make sure the schema and the vector extension exist, open the pool."""
    from pgvector.psycopg import register_vector  # noqa: PLC0415

    dsn = (config.index.dsn or "").strip()
    kw = connect_kwargs(config)
    try:
        conn = psycopg.connect(dsn, **kw)
    except (psycopg.Error, ValueError) as err:
        raise connect_error(err, dsn) from None
    with conn:
        ensure_schema(conn, config.index.postgres.schema_name)
    pg = config.index.postgres
    pool = ConnectionPool(dsn, min_size=pg.pool_min, max_size=pg.pool_max, kwargs=kw, open=False,
                          configure=register_vector, check=ConnectionPool.check_connection, timeout=max(1.0, pg.connect_timeout_s),
                          # a reconnect chain gives up quickly and the next request tries again at once:
                          # with the default (300 s, backoff to minutes) a server that is back stays unused
                          reconnect_timeout=max(1.0, pg.connect_timeout_s / 2),
                          name=f"ragbudget-{pg.schema_name}")
    try:
        pool.open(wait=pg.pool_min > 0, timeout=max(1.0, pg.connect_timeout_s))
    except PoolTimeout as err:
        pool.close()
        raise IndexUnavailableError(f"cannot open connections to {redact(dsn)}: {err}", fix=START_HINT) from None
    return pool


def ensure_extension(conn: psycopg.Connection) -> None:
    if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone():
        return
    if not conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone():
        raise IndexError_("the PostgreSQL server has no pgvector extension ('vector' is not available)",
                          fix=EXTENSION_FIX)
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except psycopg.errors.InsufficientPrivilege:
        raise IndexError_("the vector extension is not enabled in this database and this user may not "
                          "enable it", fix=EXTENSION_FIX) from None
    except psycopg.errors.UniqueViolation:
        pass  # another process created it at the same moment


def ensure_schema(conn: psycopg.Connection, schema: str) -> None:
    ensure_extension(conn)
    s = sql.Identifier(schema)
    stmts = [
        sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(s),
        sql.SQL("""CREATE TABLE IF NOT EXISTS {}.indexes (
            id bigserial PRIMARY KEY, name text UNIQUE NOT NULL, uid text NOT NULL,
            embedding_model text NOT NULL, embedding_dim int NOT NULL, chunker jsonb NOT NULL,
            analyzer jsonb NOT NULL, revision bigint NOT NULL DEFAULT 0, content_version text NOT NULL,
            n_chunks bigint NOT NULL DEFAULT 0, n_documents bigint NOT NULL DEFAULT 0,
            sources jsonb NOT NULL DEFAULT '{{}}', hnsw jsonb NOT NULL DEFAULT '{{}}',
            created_at double precision NOT NULL, updated_at double precision NOT NULL)""").format(s),
        sql.SQL("""CREATE TABLE IF NOT EXISTS {}.revisions (
            index_id bigint NOT NULL, revision bigint NOT NULL, n_chunks bigint NOT NULL,
            total_len bigint NOT NULL, avg_idf double precision NOT NULL, committed_at double precision NOT NULL,
            PRIMARY KEY (index_id, revision))""").format(s),
        sql.SQL("""CREATE TABLE IF NOT EXISTS {}.jobs (id text PRIMARY KEY, record jsonb NOT NULL,
            updated_at double precision NOT NULL)""").format(s),
        sql.SQL("CREATE INDEX IF NOT EXISTS jobs_updated ON {}.jobs (updated_at DESC)").format(s),
    ]
    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(7261, hashtext(%s))", (schema,))  # racing creators
            for st in stmts:
                conn.execute(st)
    except psycopg.errors.InsufficientPrivilege as err:
        raise IndexError_(f"cannot create the schema {schema!r}: {str(err).strip()}",
                          fix=f"grant CREATE on the database to this user, or create schema {schema} for it") from None


def table(schema: str, kind: str, index_id: int) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(f"{kind}_{index_id}"))


def create_index_tables(conn: psycopg.Connection, schema: str, index_id: int, dim: int) -> None:
    """Tables of one index (inside the first write's transaction: nothing exists unless it commits)."""
    c, p, t = (table(schema, k, index_id) for k in ("chunks", "postings", "terms"))
    conn.execute(sql.SQL("""CREATE TABLE {} (
        row_id bigint PRIMARY KEY, chunk_id text NOT NULL, doc_id text NOT NULL, source text NOT NULL,
        position int NOT NULL, n_tokens int NOT NULL, text text NOT NULL, metadata jsonb NOT NULL,
        dl int NOT NULL, embedding vector({}) NOT NULL, valid_from bigint NOT NULL, valid_to bigint)""")
                 .format(c, sql.Literal(int(dim))))
    conn.execute(sql.SQL("CREATE SEQUENCE {}").format(table(schema, "rowseq", index_id)))
    conn.execute(sql.SQL("CREATE INDEX ON {} (chunk_id)").format(c))
    conn.execute(sql.SQL("CREATE INDEX ON {} (doc_id) WHERE valid_to IS NULL").format(c))
    conn.execute(sql.SQL("CREATE INDEX ON {} (source) WHERE valid_to IS NULL").format(c))
    conn.execute(sql.SQL("CREATE INDEX ON {} (valid_to) WHERE valid_to IS NOT NULL").format(c))
    conn.execute(sql.SQL("""CREATE TABLE {} (term text NOT NULL, row_id bigint NOT NULL, tf int NOT NULL,
        dl int NOT NULL, impact real NOT NULL, valid_from bigint NOT NULL, valid_to bigint)""").format(p))
    conn.execute(sql.SQL("""CREATE TABLE {} (term text NOT NULL, df int NOT NULL, valid_from bigint NOT NULL,
        valid_to bigint)""").format(t))


def create_search_indexes(conn: psycopg.Connection, schema: str, index_id: int, m: int, ef_construction: int,
                          build_memory_mb: int = 1024) -> None:
    """HNSW + posting indexes, built after the first bulk load (a bulk build is much faster than inserts)."""
    c, p, t = (table(schema, k, index_id) for k in ("chunks", "postings", "terms"))
    # pgvector builds the graph in memory while it fits in maintenance_work_mem (default 64 MB, ~40k 384-d
    # vectors) and far more slowly past it; this transaction only (index.postgres.build_memory_mb)
    conn.execute(f"SET LOCAL maintenance_work_mem = '{int(build_memory_mb)}MB'")
    conn.execute(sql.SQL("CREATE INDEX ON {} USING hnsw (embedding vector_ip_ops) WITH (m = {}, "
                         "ef_construction = {})").format(c, sql.Literal(int(m)), sql.Literal(int(ef_construction))))
    # impact-ordered postings: a term's highest-scoring postings first, read without touching the table
    conn.execute(sql.SQL("CREATE INDEX ON {} (term, impact DESC, row_id) INCLUDE (tf, dl, valid_from, valid_to)")
                 .format(p))
    conn.execute(sql.SQL("CREATE INDEX ON {} (row_id)").format(p))
    conn.execute(sql.SQL("CREATE INDEX ON {} (term) INCLUDE (df, valid_from, valid_to)").format(t))
    conn.execute(sql.SQL("CREATE INDEX ON {} (valid_to) WHERE valid_to IS NOT NULL").format(t))


def drop_index_tables(conn: psycopg.Connection, schema: str, index_id: int) -> None:
    for k in ("chunks", "postings", "terms", "rowseq"):
        kind = "SEQUENCE" if k == "rowseq" else "TABLE"
        conn.execute(sql.SQL(f"DROP {kind} IF EXISTS {{}}").format(table(schema, k, index_id)))


def vector_dim(conn: psycopg.Connection, schema: str, index_id: int) -> int | None:
    """The dimension of the existing ``chunks_N.embedding`` column (None: no table)."""
    row = conn.execute("""SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
        JOIN pg_class r ON r.oid = a.attrelid JOIN pg_namespace n ON n.oid = r.relnamespace
        WHERE n.nspname = %s AND r.relname = %s AND a.attname = 'embedding'""",
                       (schema, f"chunks_{index_id}")).fetchone()
    if row is None:
        return None
    text = str(row[0])
    return int(text[text.index("(") + 1:-1]) if "(" in text else None

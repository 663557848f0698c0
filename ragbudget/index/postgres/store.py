"""One opened version of a PostgreSQL index: the read side (dense, sparse, chunks, idf) of ``PostgresStore``.

A store object serves the revision it was opened at (or its own latest write): every query carries that
revision, so another process's commit never changes what an in-flight query sees. Thread-safe: each call
takes its own pooled connection; the served revision changes only under a lock, and each query reads it once.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from psycopg import sql

from ...errors import IndexNotFoundError
from ...types import Chunk
from ..filters import Filters
from .filters import filters_sql
from .schema import Database, db_errors, table
from ..sparse import Analyzer

VISIBLE = "{a}.valid_from <= %(v)s AND ({a}.valid_to IS NULL OR {a}.valid_to > %(v)s)"
COLS = "c.row_id, c.chunk_id, c.doc_id, c.position, c.n_tokens, c.text, c.metadata"
RESCORE_MIN = 200  # impact-ordered sparse search: candidates scored exactly, at least this many (10·k otherwise)


@dataclass(frozen=True)
class Snapshot:
    """What a store serves: the revision and that revision's BM25 statistics."""

    index_id: int | None  # None: created, nothing committed yet
    revision: int
    content_version: str
    n_chunks: int
    total_len: int
    avg_idf: float
    n_documents: int = 0

    @property
    def avgdl(self) -> float:
        return self.total_len / self.n_chunks if self.n_chunks else 0.0


def _chunk(row: Sequence[Any]) -> Chunk:
    return Chunk(id=row[1], doc_id=row[2], position=row[3], n_tokens=row[4], text=row[5], metadata=row[6])


def visible(alias: str) -> str:
    return VISIBLE.format(a=alias)


class PostgresReader:
    """Read side; :class:`ragbudget.index.postgres.backend.PostgresStore` adds the writers."""

    def __init__(self, backend: Database, name: str, manifest: dict[str, Any], snap: Snapshot) -> None:
        self.backend = backend
        self.schema = backend.schema
        self._name = name
        self.manifest = manifest
        self._snap = snap
        self._snap_lock = threading.Lock()
        self._analyzer = Analyzer(backend.config.retrieval.bm25)
        bm = backend.config.retrieval.bm25
        self.k1, self.b, self.epsilon = float(bm.k1), float(bm.b), 0.25  # rank-bm25 BM25Okapi defaults
        self.closed = False

    # -- identity ----------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def snapshot(self) -> Snapshot:
        return self._snap

    @property
    def version(self) -> str:
        return self._snap.content_version

    @property
    def revision(self) -> int:
        return self._snap.revision

    @property
    def analyzer(self) -> Analyzer:
        return self._analyzer

    def __len__(self) -> int:
        return self._snap.n_chunks

    def _t(self, kind: str, snap: Snapshot) -> sql.Composed:
        assert snap.index_id is not None
        return table(self.schema, kind, snap.index_id)

    # -- reads -------------------------------------------------------------------------------------
    def get_chunks(self, ids: Sequence[str]) -> list[Chunk]:
        snap = self._snap
        if snap.index_id is None or not ids:
            return []
        q = sql.SQL(f"SELECT {COLS} FROM {{}} c WHERE c.chunk_id = ANY(%(ids)s) AND {visible('c')}").format(
            self._t("chunks", snap))
        with db_errors(f"reading chunks of index {self.name!r}"), self.backend.pool.connection() as conn:
            rows = conn.execute(q, {"ids": list(ids), "v": snap.revision}).fetchall()
        by_id = {r[1]: _chunk(r) for r in rows}
        return [by_id[i] for i in ids if i in by_id]

    def search_dense(self, query_vector: np.ndarray, k: int, filters: Filters = ()) -> list[tuple[Chunk, float]]:
        snap = self._snap
        if snap.index_id is None or k <= 0 or not snap.n_chunks:
            return []
        where, fparams = filters_sql(filters)
        # relaxed_order iterative scan (set per connection) keeps scanning the HNSW graph until k rows pass
        # the version and metadata conditions; the materialised CTE restores the exact order.
        q = sql.SQL(f"""WITH hits AS MATERIALIZED (
                SELECT {COLS}, (c.embedding <#> %(q)s) AS d FROM {{}} c
                WHERE {visible('c')} AND {_frag(where)}
                ORDER BY c.embedding <#> %(q)s LIMIT %(k)s)
            SELECT * FROM hits ORDER BY d, row_id""").format(self._t("chunks", snap))
        vec = np.asarray(query_vector, dtype=np.float32).reshape(-1)
        params = {"q": vec, "v": snap.revision, "k": int(k)}
        q, params = _bind(q, params, fparams)
        with db_errors(f"dense search of index {self.name!r}"), self.backend.pool.connection() as conn:
            rows = conn.execute(q, params).fetchall()
        return [(_chunk(r), float(-r[7])) for r in rows]

    def _idf_sql(self) -> str:
        """rank-bm25's BM25Okapi idf at this version: log((N-df+.5)/(df+.5)), negatives → epsilon·mean idf."""
        return ("(CASE WHEN ln((%(n)s - {df} + 0.5) / ({df} + 0.5)) < 0 THEN %(eps)s "
                "ELSE ln((%(n)s - {df} + 0.5) / ({df} + 0.5)) END)")

    def search_sparse(self, query: str, k: int, filters: Filters = ()) -> list[tuple[Chunk, float]]:
        """BM25 (rank-bm25's Okapi, this version's statistics). Candidates are each query term's
        ``index.postgres.sparse_postings_per_term`` highest-impact postings; the best ``max(10·k, 200)`` of them
        by what those add up to are scored exactly over all their postings. The same ranking as reading every
        posting whenever no term has more postings than that; with filters, every posting is read."""
        snap = self._snap
        terms = self._analyzer(query)
        if snap.index_id is None or k <= 0 or not terms or not snap.n_chunks:
            return []
        counts: dict[str, int] = {}
        for t in terms:
            counts[t] = counts.get(t, 0) + 1
        where, fparams = filters_sql(filters)
        idf = self._idf_sql().format(df="t.df")
        per_term = self.backend.config.index.postgres.sparse_postings_per_term
        bm25 = "t.w * p.tf * (%(k1)s + 1) / (p.tf + %(k1)s * (1 - %(b)s + %(b)s * p.dl / %(avgdl)s))"
        terms_cte = f"""WITH qt(term, qf) AS (SELECT * FROM unnest(%(terms)s::text[], %(qf)s::int[])),
              t AS MATERIALIZED (SELECT qt.term, qt.qf * {idf} AS w FROM qt
                    JOIN {{terms}} t ON t.term = qt.term AND {visible('t')})"""
        if per_term > 0 and not filters:
            # candidates: each term's highest-impact postings, read from the index alone, ranked by what they
            # add up to; then the best of them scored exactly over all their postings (a term's whole
            # contribution even where the posting was past the cut)
            body = f"""{terms_cte},
              cand AS MATERIALIZED (SELECT p.row_id FROM t CROSS JOIN LATERAL (SELECT p.row_id, p.tf, p.dl
                        FROM {{postings}} p WHERE p.term = t.term AND {visible('p')}
                        ORDER BY p.impact DESC, p.row_id LIMIT %(per_term)s) p
                    GROUP BY p.row_id ORDER BY sum({bm25}) DESC, p.row_id LIMIT %(rescore)s),
              s AS (SELECT cand.row_id, x.score FROM cand CROSS JOIN LATERAL (SELECT sum({bm25}) AS score
                        FROM (SELECT p.term, p.tf, p.dl FROM {{postings}} p
                              WHERE p.row_id = cand.row_id AND {visible('p')} OFFSET 0) p  -- by row: its postings
                        JOIN t ON t.term = p.term) x
                    ORDER BY x.score DESC, cand.row_id LIMIT %(k)s)"""
        else:  # every posting (with filters: the best ones of a term may all be filtered out)
            join = "" if not filters else f"JOIN {{chunks}} c ON c.row_id = p.row_id AND {_frag(where)}"
            body = f"""{terms_cte},
              s AS (SELECT p.row_id, sum({bm25}) AS score
                    FROM t JOIN {{postings}} p ON p.term = t.term AND {visible('p')} {join}
                    GROUP BY p.row_id ORDER BY score DESC, p.row_id LIMIT %(k)s)"""
        q = sql.SQL(f"""{body}
            SELECT {COLS}, s.score FROM s JOIN {{chunks}} c ON c.row_id = s.row_id
            WHERE s.score > 0 ORDER BY s.score DESC, s.row_id""").format(
            terms=self._t("terms", snap), postings=self._t("postings", snap), chunks=self._t("chunks", snap))
        params = {"terms": list(counts), "qf": list(counts.values()), "v": snap.revision,
                  "n": float(snap.n_chunks), "eps": self.epsilon * snap.avg_idf, "k1": self.k1, "b": self.b,
                  "avgdl": max(snap.avgdl, 1e-9), "k": int(k), "per_term": int(per_term),
                  "rescore": max(10 * int(k), RESCORE_MIN)}
        q, params = _bind(q, params, fparams)
        with db_errors(f"sparse search of index {self.name!r}"), self.backend.pool.connection() as conn:
            rows = conn.execute(q, params).fetchall()
        return [(_chunk(r), float(r[7])) for r in rows]

    def idf(self, terms: Sequence[str]) -> dict[str, float]:
        snap = self._snap
        out = {t: 0.0 for t in terms}
        if snap.index_id is None or not terms:
            return out
        q = sql.SQL(f"SELECT t.term, t.df FROM {{}} t WHERE t.term = ANY(%(terms)s) AND {visible('t')}").format(
            self._t("terms", snap))
        with db_errors(f"reading term statistics of index {self.name!r}"), self.backend.pool.connection() as conn:
            rows = conn.execute(q, {"terms": list(set(terms)), "v": snap.revision}).fetchall()
        n, eps = float(snap.n_chunks), self.epsilon * snap.avg_idf
        for term, df in rows:
            raw = math.log((n - df + 0.5) / (df + 0.5))
            out[term] = max(eps if raw < 0 else raw, 0.0)
        return out

    def info(self) -> dict[str, Any]:
        snap = self._snap
        return {"name": self.name, "backend": "postgres", "chunks": snap.n_chunks, "documents": snap.n_documents,
                "content_version": snap.content_version, "revision": snap.revision,
                "schema": self.schema, "dsn": self.backend.dsn_redacted, "manifest": dict(self.manifest)}

    def close(self) -> None:
        self.closed = True  # the pool belongs to the backend

    def _require(self) -> Snapshot:
        snap = self._snap
        if snap.index_id is None:
            raise IndexNotFoundError(f"index {self.name!r} has no committed version yet",
                                     fix=f"ingest into it first: ragbudget ingest PATH --index {self.name}")
        return snap


def _frag(where: str) -> str:
    """A filter fragment made safe to embed in a ``sql.SQL`` template (braces doubled, ``%s`` escaped)."""
    return where.replace("{", "{{").replace("}", "}}").replace("%s", "%%s")


def _bind(q: sql.Composed, named: dict[str, Any], positional: list[Any]) -> tuple[sql.Composed, dict[str, Any]]:
    """Turn the filter fragment's positional ``%s`` (escaped as ``%%s`` in the template) into named ones."""
    text = q.as_string(None)
    for i, value in enumerate(positional):
        key = f"f{i}"
        text = text.replace("%%s", f"%({key})s", 1)
        named[key] = value
    return sql.SQL(text), named  # type: ignore[return-value]

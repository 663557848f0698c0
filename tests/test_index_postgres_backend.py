"""The postgres backend passes the index conformance suite, on a real embedded PostgreSQL 18 + pgvector."""

from __future__ import annotations

import pytest

from ragbudget.testing import IndexConformance
from pg_fixture import pg_config, pg_server  # noqa: F401  (pytest fixtures)

pytestmark = pytest.mark.slow  # real engines or servers: `-m "not slow"` skips them in a quick loop


class TestPostgresBackend(IndexConformance):
    @pytest.fixture
    def backend(self, pg_config):  # noqa: F811
        from ragbudget.index.postgres.backend import PostgresBackend

        b = PostgresBackend(pg_config)
        yield b
        b.close()



QUERIES = ["boundary layer transition on a flat plate", "heat transfer in hypersonic flow",
           "buckling of thin cylindrical shells under pressure", "slipstream wing lift"]


def _open(pg_config, embedder, per_term: int):  # noqa: F811
    from ragbudget.index.postgres.backend import PostgresBackend

    backend = PostgresBackend(pg_config.with_overrides({"index.postgres.sparse_postings_per_term": per_term}))
    return backend, backend.open("impact", embedder, create=True)


def _ranked(store, query: str, k: int = 10) -> list[tuple[str, float]]:
    return [(c.id, round(s, 4)) for c, s in store.search_sparse(query, k)]


def test_sparse_reads_each_terms_highest_impact_postings(pg_config, embedder, documents):  # noqa: F811
    """Impact-ordered sparse search: with room for every posting it ranks exactly as reading them all; with
    3 per term the candidates are each term's 3 highest-impact postings (ties by row id), scored exactly."""
    from psycopg import sql

    b_exact, exact = _open(pg_config, embedder, 0)
    exact.add_documents(documents, embedder)
    b_all, roomy = _open(pg_config, embedder, 10_000)
    b_few, few = _open(pg_config, embedder, 3)
    try:
        snap = exact._snap
        postings = exact._t("postings", snap)
        row_of = {}
        with b_exact.pool.connection() as conn:
            for cid, row in conn.execute(sql.SQL("SELECT chunk_id, row_id FROM {} WHERE valid_to IS NULL")
                                         .format(exact._t("chunks", snap))).fetchall():
                row_of[row] = cid
        for q in QUERIES:
            assert _ranked(roomy, q) == _ranked(exact, q)  # no term has 10,000 postings: exact
            terms = exact._analyzer(q)
            idf = exact.idf(terms)
            with b_exact.pool.connection() as conn:
                rows = conn.execute(sql.SQL("SELECT term, row_id, tf, dl, impact FROM {} WHERE term = ANY(%s) "
                                            "AND valid_to IS NULL").format(postings), (list(set(terms)),)).fetchall()
            def part(tf: int, dl: int) -> float:
                return tf * (exact.k1 + 1) / (tf + exact.k1 * (1 - exact.b + exact.b * dl / snap.avgdl))

            candidates: set[int] = set()
            for term in set(terms):  # each term's 3 highest-impact postings (ties by row id)
                best = sorted((r for r in rows if r[0] == term), key=lambda r: (-r[4], r[1]))[:3]
                candidates |= {r[1] for r in best}
            scores: dict[int, float] = {}  # exact: every posting of a candidate, also those past a term's cut
            for term, row, tf, dl, _impact in rows:
                if row in candidates:
                    scores[row] = scores.get(row, 0.0) + terms.count(term) * idf[term] * part(tf, dl)
            ranked = sorted((r for r, v in scores.items() if v > 0), key=lambda r: (-scores[r], r))  # as the SQL
            want = [(row_of[r], round(scores[r], 4)) for r in ranked]
            got = _ranked(few, q)
            assert [c for c, _ in got] == [c for c, _ in want][:10] and [s for _, s in got] == pytest.approx(
                [s for _, s in want][:10], abs=2e-4)
            assert len(got) <= 3 * len(set(terms))  # only the best 3 postings of each term were candidates
            assert set(c for c, _ in got) <= {row_of[r] for r in candidates}
    finally:
        for b in (b_exact, b_all, b_few):
            b.close()


def test_cli_info_lists_the_databases_indexes_not_local_folders(pg_config, embedder, tmp_path, capsys):  # noqa: F811
    """Issue 29: `ragbudget info` under the postgres backend shows the database's indexes, never the local
    index folders left under index.dir."""
    import json

    from ragbudget.cli import main as cli_main
    from ragbudget.config import dump_config
    from ragbudget.pipeline import RAG

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Lift\n\nLift grows with the angle of attack until the wing stalls.\n")
    local = pg_config.with_overrides({"index.backend": "local"})  # same index.dir, local backend
    with RAG(local, embedder=embedder) as rag:
        rag.ingest(docs, index="folder-only")
    with RAG(pg_config, embedder=embedder) as rag:
        rag.ingest(docs, index="in-database")
    path = tmp_path / "pg.yaml"
    dump_config(pg_config, path)
    assert cli_main(["info", "--json", "--config", str(path)]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["index_backend"] == "postgres" and d["index_dir"] is None
    assert d["indexes"] == ["in-database"]
    assert cli_main(["info", "--config", str(path)]) == 0
    text = capsys.readouterr().out
    assert "in-database" in text and "folder-only" not in text and str(tmp_path / "indexes") not in text

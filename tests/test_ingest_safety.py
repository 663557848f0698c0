"""Issue 25 (7): bounded, typed reads at ingest — regular files only, a size cap, per-file errors that
never stop the rest. Real files, a real FIFO, the real RAG on the local backend."""

from __future__ import annotations

import os
import threading
import tracemalloc
from pathlib import Path

import pytest

from ragbudget.config import Config
from ragbudget.ingest.loaders import LoadReport, load_path
from ragbudget.pipeline import RAG


def _good(folder: Path) -> None:
    (folder / "good.md").write_text("# Lift\n\nThe wing lift grows with the angle of attack.\n", encoding="utf-8")


def test_fifo_in_an_ingest_folder_is_skipped_without_hanging_the_writer(tmp_path, embedder):
    docs = tmp_path / "docs"
    docs.mkdir()
    _good(docs)
    fifo = docs / "pipe.txt"
    os.mkfifo(fifo)
    rag = RAG(Config().with_overrides({"index.dir": str(tmp_path / "idx")}), embedder=embedder)
    out: dict = {}
    t = threading.Thread(target=lambda: out.update(report=rag.ingest(docs, index="f")), daemon=True)
    t.start()
    t.join(60)
    hung = t.is_alive()
    if hung:  # unblock the reader so the session can go on, then fail
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        t.join(10)
    assert not hung, "ingest hung on a FIFO while holding the index's write lock"
    report = out["report"]
    assert any("pipe.txt" in w and "not a regular file" in why for w, why in report.skipped), report.skipped
    assert report.documents == 1
    rag.ingest([{"id": "after", "text": "the write lock was released"}], index="f")  # the lock is free


def test_one_deeply_nested_jsonl_line_does_not_fail_the_files_beside_it(tmp_path, embedder):
    docs = tmp_path / "docs"
    docs.mkdir()
    _good(docs)
    deep = "[" * 200000 + "]" * 200000
    (docs / "recs.jsonl").write_text(f'{{"id": "d", "text": "x", "m": {deep}}}\n{{"id": "ok", "text": "drag"}}\n',
                                     encoding="utf-8")
    rag = RAG(Config().with_overrides({"index.dir": str(tmp_path / "idx")}), embedder=embedder)
    report = rag.ingest(docs, index="deep")
    assert report.documents == 2, report
    assert any("nested too deeply" in why for _, why in report.skipped)


def test_an_oversized_file_is_skipped_before_it_is_read(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    _good(docs)
    with open(docs / "huge.txt", "wb") as f:  # sparse: 1 GiB on paper, nothing on disk
        f.truncate(1 << 30)
    tracemalloc.start()
    docs_, report = load_path(docs, LoadReport(), max_bytes=1 << 20)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert [d.metadata["title"] for d in docs_] == ["Lift"]
    assert any("huge.txt" in w and "over the cap" in why for w, why in report.skipped), report.skipped
    assert peak < 16 << 20, peak


def test_a_huge_binary_file_under_the_cap_costs_one_small_read(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    _good(docs)
    with open(docs / "blob.txt", "wb") as f:
        f.truncate(1 << 30)  # all NUL bytes
    tracemalloc.start()
    _, report = load_path(docs, LoadReport(), max_bytes=2 << 30)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert any("blob.txt" in w and "binary" in why for w, why in report.skipped), report.skipped
    assert peak < 16 << 20, peak


def test_the_default_config_caps_ingest_file_size():
    assert Config().service.limits.max_ingest_file_bytes <= 1 << 30


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_service_ingest_of_a_folder_with_a_fifo_finishes(tmp_path, embedder):
    from ragbudget.service.app import BackgroundServer, create_app  # noqa: PLC0415
    import httpx  # noqa: PLC0415
    import time  # noqa: PLC0415

    root = tmp_path / "root"
    (root / "d").mkdir(parents=True)
    _good(root / "d")
    os.mkfifo(root / "d" / "pipe.md")
    cfg = Config().with_overrides({"index.dir": str(tmp_path / "idx"), "service.document_root": str(root)})
    rag = RAG(cfg, embedder=embedder)
    with BackgroundServer(create_app(rag, cfg, environ={})) as srv:
        r = httpx.post(srv.url + "/v1/ingest", json={"path": "d", "index": "svc"}, timeout=30)
        assert r.status_code == 202, r.text
        deadline = time.monotonic() + 60
        st: dict = {}
        while time.monotonic() < deadline:
            st = httpx.get(srv.url + r.json()["status_url"], timeout=30).json()
            if st["state"] in ("done", "failed"):
                break
            time.sleep(0.1)
        if st.get("state") not in ("done", "failed"):
            fd = os.open(root / "d" / "pipe.md", os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        assert st["state"] == "done", st
        assert st["detail"]["documents"] == 1


def test_json_depth_is_checked_before_parsing():
    """The deep line is refused without recursing (a finaliser run by a garbage collection at the edge of the
    stack fails with an unraisable RecursionError); brackets inside strings do not count; 256 levels pass."""
    import json

    from ragbudget.kernels.safe_values import json_too_deep
    assert json_too_deep("[" * 200000 + "]" * 200000)
    assert json_too_deep('{"m": ' + "[" * 257 + "]" * 257 + "}")
    ok = '{"m": ' + "[" * 255 + "]" * 255 + "}"
    assert not json_too_deep(ok) and json.loads(ok)
    assert not json_too_deep('{"text": "' + "[{" * 5000 + '", "q": "\\\\\\" [[["}')  # in strings, escapes too

"""Issue 13: ingest reads only what it may — tenant roots, no symbolic links, no silent id collisions,
no crash leftovers listed as indexes, record titles accepted. Real index, embedder and HTTP server."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import httpx
import pytest

from ragbudget import RAG
from ragbudget.cli import main as cli_main
from ragbudget.config import Config, TenantConfig
from ragbudget.errors import IdCollisionError, PathRefusedError
from ragbudget.index import list_indexes
from ragbudget.ingest.paths import PathPolicy
from ragbudget.service.app import BackgroundServer, create_app

KEYS = {"a": "sk-tenant-a", "b": "sk-tenant-b"}


@pytest.fixture()
def roots(tmp_path: Path) -> Path:
    """docs/a (tenant A), docs/b (tenant B, holds a secret), links planted in A's root."""
    docs = tmp_path / "docs"
    (docs / "a" / "notes").mkdir(parents=True)
    (docs / "b").mkdir()
    (docs / "a" / "notes" / "ok.txt").write_text("Wing flutter appears at high speed.", encoding="utf-8")
    (docs / "b" / "secret.txt").write_text("Tenant B secret: the launch code is zebra-417.", encoding="utf-8")
    return docs


def _link(src: Path, target: Path) -> Path:
    src.symlink_to(target)
    return src


# ------------------------------------------------------------------ the policy itself
def test_policy_refuses_links_to_another_tenant_to_etc_and_through_a_linked_dir(roots: Path):
    a = roots / "a"
    _link(a / "b_secret.txt", roots / "b" / "secret.txt")
    _link(a / "hostname.txt", Path("/etc/hostname"))
    _link(a / "linked", roots / "b")
    pol = PathPolicy.at(a)
    for rel in ("b_secret.txt", "hostname.txt", "linked/secret.txt", "linked"):
        with pytest.raises(PathRefusedError) as e:
            pol.resolve(rel)
        assert e.value.rule == "symlink_refused", rel
    for rel in ("../b/secret.txt", "/etc/hostname", "notes/../../b"):
        with pytest.raises(PathRefusedError) as e:
            pol.resolve(rel)
        assert e.value.rule == "path_outside_root", rel
    with pytest.raises(PathRefusedError) as e:  # a folder holding links is refused as a whole
        pol.scan(pol.resolve("."))
    assert e.value.rule == "symlink_refused" and "hostname.txt" in str(e.value)
    follow = PathPolicy.at(a, follow_symlinks=True)  # following: only links that stay inside
    for rel in ("b_secret.txt", "linked/secret.txt"):
        with pytest.raises(PathRefusedError) as e:
            follow.resolve(rel)
        assert e.value.rule == "path_outside_root"
    _link(a / "inner.txt", a / "notes" / "ok.txt")
    assert follow.resolve("inner.txt") == a / "inner.txt"
    assert pol.resolve("notes/ok.txt") == a / "notes" / "ok.txt"


def test_loader_does_not_follow_a_link_swapped_in_after_the_check(roots: Path, tmp_path, embedder):
    a = roots / "a"
    rag = RAG(Config().with_overrides({"index.dir": str(tmp_path / "idx")}), index="t", embedder=embedder)
    pol = PathPolicy.at(a)
    target = pol.resolve("notes")
    pol.scan(target)  # passes now
    _link(a / "notes" / "late.txt", Path("/etc/hostname"))  # then a link appears (a race)
    with pytest.raises(PathRefusedError):  # the load re-checks: refused before anything is read
        rag.ingest(target, policy=pol)
    rag.close()


# ------------------------------------------------------------------ over HTTP, per tenant
@pytest.fixture()
def server(roots: Path, tmp_path: Path, embedder):
    cfg = Config().with_overrides({
        "index.dir": str(tmp_path / "idx"), "service.auth": True, "service.document_root": str(roots),
        "service.tenants": [
            TenantConfig(name="a", api_keys=[KEYS["a"]], indexes=["a"], document_root="a").model_dump(),
            TenantConfig(name="b", api_keys=[KEYS["b"]], indexes=["b"], document_root="b").model_dump()]})
    rag = RAG(cfg, embedder=embedder)
    with BackgroundServer(create_app(rag, cfg)) as srv:
        yield srv
    rag.close()


def _wait(c: httpx.Client, url: str) -> dict:
    for _ in range(600):
        st = c.get(url).json()
        if st["state"] in ("done", "failed"):
            return st
        import time
        time.sleep(0.1)
    raise AssertionError("job did not finish")


def test_tenant_cannot_ingest_another_tenants_file_or_etc(server, roots: Path):
    a = roots / "a"
    _link(a / "b_secret.txt", roots / "b" / "secret.txt")
    _link(a / "linked", roots / "b")
    (a / "trap").mkdir()
    _link(a / "trap" / "hostname.txt", Path("/etc/hostname"))
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEYS['a']}"}, timeout=60) as c:
        for path, rule in [("b_secret.txt", "symlink_refused"), ("linked/secret.txt", "symlink_refused"),
                           ("linked", "symlink_refused"), ("trap", "symlink_refused"), (".", "symlink_refused"),
                           ("../b/secret.txt", "path_outside_root"), ("/etc/hostname", "path_outside_root")]:
            r = c.post("/v1/ingest", json={"path": path, "index": "a"})
            assert r.status_code == 403, (path, r.text)
            err = r.json()["error"]
            assert err["type"] == rule and err["fix"], (path, err)
        r = c.post("/v1/ingest", json={"path": "notes", "index": "a"})  # its own folder: fine
        assert r.status_code == 202
        assert _wait(c, r.json()["status_url"])["state"] == "done"
        ans = c.post("/v1/query", json={"question": "launch code secret", "index": "a"}).json()
        assert "zebra-417" not in json.dumps(ans)
        # records may carry a title (was 422)
        r = c.post("/v1/ingest", json={"index": "a", "records": [
            {"id": "r1", "title": "Flutter note", "text": "Flutter is an aeroelastic instability."}]})
        assert r.status_code == 202, r.text
        assert _wait(c, r.json()["status_url"])["state"] == "done"
        ans = c.post("/v1/query", json={"question": "What is flutter, an aeroelastic instability?",
                                        "index": "a"}).json()
        assert any(cit["title"] == "Flutter note" for cit in ans["citations"]), ans["citations"]
        r = c.post("/v1/ingest", json={"index": "a", "records": [{"id": "x", "text": "one"},
                                                                  {"id": "x", "text": "two"}]})
        st = _wait(c, r.json()["status_url"])
        assert st["state"] == "failed" and st["error"]["type"] == "IdCollisionError" and "'x'" in st["error"]["message"]


# ------------------------------------------------------------------ JSONL ids
def _two_jsonl(folder: Path) -> Path:
    folder.mkdir()
    for name in ("one.jsonl", "two.jsonl"):
        rows = [{"_id": str(i), "title": f"{name} {i}", "text": f"Record {i} of {name} about wings."} for i in range(5)]
        (folder / name).write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return folder


def test_jsonl_ids_colliding_across_files_fail_listing_them(tmp_path, embedder):
    docs = _two_jsonl(tmp_path / "jsonl")
    rag = RAG(Config().with_overrides({"index.dir": str(tmp_path / "idx")}), index="j", embedder=embedder)
    with pytest.raises(IdCollisionError) as e:
        rag.ingest(docs)
    assert set(e.value.collisions) == {str(i) for i in range(5)}
    assert "one.jsonl" in str(e.value) and "two.jsonl" in str(e.value) and e.value.fix
    assert "j" not in rag.list_indexes()  # nothing was written, nothing replaced
    rag.close()
    rc = cli_main(["ingest", str(docs), "--index", "j", "--index-dir", str(tmp_path / "idx2"), "--quiet"])
    assert rc != 0


def test_jsonl_ids_namespaced_by_file_keep_every_record(tmp_path, embedder):
    docs = _two_jsonl(tmp_path / "jsonl")
    cfg = Config().with_overrides({"index.dir": str(tmp_path / "idx"), "index.record_ids": "namespace"})
    rag = RAG(cfg, index="j", embedder=embedder)
    report = rag.ingest(docs)
    assert report.documents == 10
    ids = {c.doc_id for c in rag.indexes.get("j").index.store}
    assert {"one.jsonl:0", "two.jsonl:0"} <= ids
    rag.close()


# ------------------------------------------------------------------ crash leftovers
def test_crash_leftovers_are_never_listed_and_the_next_writer_removes_them(tmp_path, embedder, roots):
    idx = tmp_path / "idx"
    cfg = Config().with_overrides({"index.dir": str(idx), "service.document_root": str(roots)})
    rag = RAG(cfg, index="x", embedder=embedder)
    rag.ingest(roots / "a" / "notes")
    shutil.copytree(idx / "x", idx / ".x.tmp-4242")
    shutil.copytree(idx / "x", idx / ".x.old")
    assert list_indexes(idx) == ["x"]
    with BackgroundServer(create_app(rag, cfg)) as srv:
        r = httpx.get(srv.url + "/v1/indexes", timeout=30)
        assert r.status_code == 200, r.text
        assert [i if isinstance(i, str) else i.get("name") for i in r.json()["indexes"]] == ["x"]
    (roots / "a" / "notes" / "more.txt").write_text("Shock waves form at Mach one.", encoding="utf-8")
    rag.ingest(roots / "a" / "notes")
    assert not (idx / ".x.tmp-4242").exists() and not (idx / ".x.old").exists()
    assert sorted(p.name for p in idx.iterdir() if p.is_dir()) == ["x"]
    rag.close()
    assert os.path.isdir(idx / "x")

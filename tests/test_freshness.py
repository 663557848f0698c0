"""Fresh answers everywhere (issue 17) on the local backend: real ``ragbudget serve`` processes on loopback,
a real CLI ingest in another process, one index folder.

- a write by any process (CLI ingest, another server's ingest job, a delete) is answered by every server
  process by its next query, and no cache serves an answer made from the older version;
- an ingest job started on one server is readable from every worker of another;
- kill -9 during an ingest leaves the previous version serving and the next ingest succeeds.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from redis_fixture import free_port

from ragbudget.config import load_config
from ragbudget.pipeline import RAG

REPO = Path(__file__).resolve().parents[1]
SAMPLE_DOCS = REPO / "ragbudget" / "sample_docs"
FACT = "The Zorblax turbine of the ragbudget test rig spins at 4242 revolutions per minute."
QUESTION = "How fast does the Zorblax turbine spin?"
FACT2 = "The Quillon gearbox of the ragbudget test rig weighs 777 kilograms."
QUESTION2 = "How much does the Quillon gearbox weigh?"


@pytest.fixture(scope="module")
def site(tmp_path_factory, embedder):
    """A config file, a document root holding the sample docs, and an index built from them."""
    work = tmp_path_factory.mktemp("fresh")
    docs = work / "docs"
    shutil.copytree(SAMPLE_DOCS, docs / "base")
    cfg_path = work / "ragbudget.yaml"
    cfg_path.write_text(yaml.safe_dump({"index": {"dir": str(work / "indexes")},
                                        "service": {"document_root": str(docs)}}), encoding="utf-8")
    rag = RAG(load_config(cfg_path, environ={}), embedder=embedder)
    rag.ingest(docs / "base")
    rag.close()
    return work, cfg_path, docs


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGBUDGET_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _serve(cfg_path: Path, port: int, workers: int, log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "ragbudget", "serve", "--config", str(cfg_path), "--port", str(port),
           "--workers", str(workers), "--log-level", "warning"]
    return subprocess.Popen(cmd, stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=_env(),
                            start_new_session=True)


def _wait_ready(url: str, proc: subprocess.Popen, log: Path, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited early: {log.read_text(errors='replace')[-2000:]}")
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"server not ready in {timeout_s}s: {log.read_text(errors='replace')[-2000:]}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


@pytest.fixture(scope="module")
def servers(site, tmp_path_factory):
    """Server A (one process) and server B (two uvicorn workers), same config, same index folder."""
    work, cfg_path, _ = site
    logs = tmp_path_factory.mktemp("logs")
    pa, pb = free_port(), free_port()
    a = _serve(cfg_path, pa, 1, logs / "a.log")
    b = _serve(cfg_path, pb, 2, logs / "b.log")
    try:
        _wait_ready(f"http://127.0.0.1:{pa}", a, logs / "a.log")
        _wait_ready(f"http://127.0.0.1:{pb}", b, logs / "b.log")
        yield f"http://127.0.0.1:{pa}", f"http://127.0.0.1:{pb}"
    finally:
        _stop(a)
        _stop(b)


def _ask(url: str, question: str) -> dict:
    r = httpx.post(f"{url}/v1/query", json={"question": question}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_every_process_answers_every_write_by_its_next_query(site, servers):
    work, cfg_path, docs = site
    a, b = servers
    # before: nobody knows the fact, and every process has that answer cached (exact layer)
    for url in (a, b, b, b):
        assert "4242" not in _ask(url, QUESTION)["answer"]
    assert _ask(a, QUESTION)["cache_layer"] == "exact"

    # 1. a CLI ingest in a third process
    (docs / "new").mkdir()
    (docs / "new" / "turbine.md").write_text(f"# Test rig\n\n{FACT}\n", encoding="utf-8")
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "ragbudget", "ingest", str(docs / "new"), "--config", str(cfg_path),
                           "--quiet"], env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    first = _ask(a, QUESTION)
    assert "4242" in first["answer"] and first["cache_layer"] is None  # the pre-ingest answer was not served
    for url in (a, b, b, b, b):  # B's two workers: each request may land on either (later ones: cached anew)
        got = _ask(url, QUESTION)
        assert "4242" in got["answer"], (url, got["answer"], got["cache_layer"])
    print(f"CLI ingest → answered everywhere in {time.monotonic() - t0:.1f}s (ingest included)")

    # 2. an ingest job on server A, polled from B's workers: never a 404, and B answers the new fact
    r = httpx.post(f"{a}/v1/ingest", json={"records": [{"id": "gearbox", "text": FACT2}]}, timeout=30)
    assert r.status_code == 202, r.text
    job = r.json()["id"]
    states = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        s = httpx.get(f"{b}/v1/ingest/{job}", timeout=10)
        assert s.status_code == 200, s.text  # readable from every worker, not only the one running it
        states.append(s.json()["state"])
        if states[-1] in ("done", "failed"):
            break
        time.sleep(0.2)
    assert states[-1] == "done", states
    for _ in range(4):
        assert httpx.get(f"{b}/v1/ingest/{job}", timeout=10).json()["state"] == "done"
        assert "777" in _ask(b, QUESTION2)["answer"]

    # 3. a delete through server B: A stops citing the document by its next query
    r = httpx.post(f"{b}/v1/documents/delete", json={"sources": [str(docs / "new" / "turbine.md")]}, timeout=60)
    assert r.status_code == 200 and r.json()["chunks_removed"] >= 1, r.text
    for url in (a, b, b):
        got = _ask(url, QUESTION)
        assert "4242" not in got["answer"] and all("turbine.md" not in c["source"] for c in got["citations"])


def test_bad_filters_and_deletes_are_4xx_with_a_fix(servers):
    a, _ = servers
    r = httpx.post(f"{a}/v1/query", json={"question": QUESTION, "filters": {"year": {"between": [1, 2]}}}, timeout=30)
    assert r.status_code == 400 and "between" in r.json()["error"]["message"] and r.json()["error"]["fix"]
    r = httpx.post(f"{a}/v1/documents/delete", json={}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["fix"]
    r = httpx.post(f"{a}/v1/query", json={"question": "What does the semantic cache do?",
                                          "filters": {"source": {"nin": ["nothing"]}}}, timeout=30)
    assert r.status_code == 200 and r.json()["citations"]


def test_kill_9_mid_ingest_leaves_the_previous_version_serving(site, embedder, shared_data):
    work, cfg_path, docs = site
    cfg = load_config(cfg_path, environ={})
    rag = RAG(cfg, embedder=embedder)
    before = rag.index_info()["content_version"]
    assert rag.query("What does the semantic cache do?").citations
    big = shared_data / "eval" / "cranfield" / "corpus.jsonl"
    # a writer in another process that reports its stages line by line; killed while it embeds
    script = ("import sys\nfrom ragbudget import RAG\nfrom ragbudget.config import load_config\n"
              "rag = RAG(load_config(sys.argv[1]))\n"
              "rag.ingest(sys.argv[2], progress=lambda st, d, t: print(st, d, t, flush=True))\n")
    proc = subprocess.Popen([sys.executable, "-c", script, str(cfg_path), str(big)], env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        stages = []
        for line in proc.stdout:  # type: ignore[union-attr]
            stages.append(line.split()[0])
            if stages[-1] == "embed":
                break
        assert "embed" in stages and "save" not in stages, stages
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    # this process goes on serving the previous version, and a fresh process opens exactly that version
    assert rag.query("What does the semantic cache do?").citations
    other = RAG(cfg, embedder=embedder)
    assert other.index_info()["content_version"] == before
    # the next ingest takes the lock and succeeds; both processes see it
    (docs / "after").mkdir(exist_ok=True)
    (docs / "after" / "note.md").write_text("# After\n\nThe Vextor valve opens at 12 bar.\n", encoding="utf-8")
    report = other.ingest(docs / "after")
    assert report.chunks_added >= 1
    assert "12 bar" in rag.query("At what pressure does the Vextor valve open?").answer
    assert not [p.name for p in Path(cfg.index.dir).iterdir() if ".tmp-" in p.name]
    rag.close()
    other.close()


def test_filters_reach_the_index_from_the_library(site, embedder):
    _, cfg_path, docs = site
    rag = RAG(load_config(cfg_path, environ={}), embedder=embedder)
    routing = str(docs / "base" / "routing.md")
    hits = rag.search("semantic cache hits", k=5, filters={"source": routing})
    assert hits and {h.chunk.source for h in hits} == {routing}
    a = rag.query("What does the semantic cache do?", filters={"source": routing})
    b = rag.query("What does the semantic cache do?")
    assert all(c.source == routing for c in a.citations)
    assert b.cache_layer is None  # other filters, other answer: the filtered one is not served
    assert json.dumps(a.to_dict())  # serialisable
    rag.close()


def test_cli_search_filters_show_metadata_and_say_when_nothing_matches(site, capsys):
    from ragbudget.cli import main as cli_main

    _, cfg_path, docs = site
    routing = str(docs / "base" / "routing.md")
    assert cli_main(["search", "semantic cache hits", "--config", str(cfg_path), "--json", "-k", "3",
                     "--filter", f"source={routing}"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["results"] and {r["metadata"]["source"] for r in out["results"]} == {routing}
    assert cli_main(["search", "semantic cache hits", "--config", str(cfg_path),
                     "--filter", "source=/no/such/file.md"]) == 0
    text = capsys.readouterr().out
    assert "no chunk matches the filters" in text and "metadata" in text

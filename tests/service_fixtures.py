"""Shared by the service, schema and batch tests: a real RAG over 50 Cranfield abstracts, and a config
with two tenants. Import the fixtures into a test module::

    from service_fixtures import docs_root, service_config, cranfield_rag  # noqa: F401
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from ragbudget.testing import ScriptedGenerator
from ragbudget.config import Config, TenantConfig
from ragbudget.embed.encoder import SentenceTransformerEmbedder
from ragbudget.pipeline import RAG

N_DOCS = 50
KEYS = {"acme": "sk-acme-test", "globex": "sk-globex-test", "tiny": "sk-tiny-test"}


@pytest.fixture(scope="session")
def docs_root(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A document root holding ``cranfield50.jsonl`` (first 50 Cranfield abstracts) and ``more/``."""
    src = shared_data / "eval" / "cranfield" / "corpus.jsonl"
    if not src.is_file():
        pytest.skip(f"{src} not found")
    root = tmp_path_factory.mktemp("docs")
    lines = src.read_text(encoding="utf-8").splitlines()[:N_DOCS]
    (root / "cranfield50.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "more").mkdir()
    extra = [json.loads(x) for x in src.read_text(encoding="utf-8").splitlines()[N_DOCS:N_DOCS + 10]]
    (root / "more" / "extra.jsonl").write_text("\n".join(json.dumps(r) for r in extra) + "\n", encoding="utf-8")
    return root


@pytest.fixture(scope="session")
def service_config(docs_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Config:
    work = tmp_path_factory.mktemp("svc")
    cfg = Config()
    return cfg.with_overrides({
        "index.dir": str(work / "indexes"),
        "service.auth": True,
        "service.document_root": str(docs_root),
        "service.batch_dir": str(work / "batches"),
        "service.tenants": [
            TenantConfig(name="acme", api_keys=[KEYS["acme"]], indexes=["default", "acme-extra"]).model_dump(),
            TenantConfig(name="globex", api_keys=[KEYS["globex"]], indexes=["globex"]).model_dump(),
            TenantConfig(name="tiny", api_keys=[KEYS["tiny"]], indexes=["default"], requests_per_s=0.0005,
                         burst=2).model_dump(),
        ],
        "service.limits.max_question_tokens": 64,
        "service.limits.max_history_turns": 4,
        "service.limits.max_output_tokens": 256,
        "service.limits.max_body_bytes": 20000,
    })


@pytest.fixture(scope="session")
def cranfield_rag(service_config: Config, docs_root: Path, embedder: SentenceTransformerEmbedder) -> RAG:
    """The real RAG (extractive backend, the session's MiniLM) with the 50 abstracts in ``default``."""
    rag = RAG(service_config, embedder=embedder)
    rag.warm_up()
    rag.ingest(docs_root / "cranfield50.jsonl", index="default")
    return rag


def wait_job(c: httpx.Client, url: str, timeout_s: float = 60) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        st = c.get(url).json()
        if st["state"] in ("done", "failed"):
            return st
        time.sleep(0.1)
    raise AssertionError(f"job {url} did not finish")


def SlowGenerator() -> ScriptedGenerator:  # noqa: N802  (reads as the class it used to be)
    """A scripted generator (the true seam): one word every 20 ms, counting what it produced."""
    return ScriptedGenerator(model="slow", word_delay_s=0.02)

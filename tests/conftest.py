"""Shared fixtures: paths to the shared data sets and one embedder per test session."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragbudget.config import EmbeddingConfig
from ragbudget.embed import SentenceTransformerEmbedder

# Session-wide fixtures shared by several test modules, registered once so each is built once per run.
pytest_plugins = ["redis_fixture", "service_fixtures", "fixtures_llm"]

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data sets not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def embedder() -> SentenceTransformerEmbedder:
    """The bundled MiniLM, loaded once per session (no cache: tests that need one make their own)."""
    emb = SentenceTransformerEmbedder(EmbeddingConfig(cache=False))
    emb.warm_up()
    return emb

"""The local backend passes the index conformance suite."""

from __future__ import annotations

import pytest

from ragbudget.config import Config
from ragbudget.index.local.backend import LocalBackend

from ragbudget.testing import IndexConformance


class TestLocalBackend(IndexConformance):
    @pytest.fixture
    def backend(self, tmp_path):
        b = LocalBackend(Config().with_overrides({"index.dir": str(tmp_path / "indexes")}))
        yield b
        b.close()

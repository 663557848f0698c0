"""The package as users get it: a wheel built from the repository, installed outside the source tree, runs
its commands from any directory (no path relative to the source tree inside the package, package data
shipped). Dependencies come from this environment; only ragbudget itself comes from the wheel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # real engines or servers: `-m "not slow"` skips them in a quick loop

REPO = Path(__file__).resolve().parents[1]
EVAL = REPO.parent / "shared" / "data" / "eval"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("wheel")
    out, site = root / "dist", root / "site"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
                    str(REPO)], check=True, capture_output=True, timeout=300)
    wheel = next(out.glob("ragbudget-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "ragbudget/cache/data/wordnet_lexicon.json.gz" in names  # package data the cache verifier loads
    assert any(n.startswith("ragbudget/sample_docs/") for n in names)  # quickstart's corpus
    assert not any(n.startswith(("tests/", "benchmarks/")) for n in names)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    env = {**os.environ, "PYTHONPATH": str(site), "HF_HUB_OFFLINE": "1", "COLUMNS": "100"}
    return root, env


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    done = subprocess.run([sys.executable, "-m", "ragbudget", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_wheel_is_what_runs(installed):
    root, env = installed
    where = subprocess.run([sys.executable, "-c", "import ragbudget; print(ragbudget.__file__)"], cwd=root, env=env,
                           capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(root / "site")), where  # not the source tree


def test_commands_work_from_any_directory(installed, tmp_path):
    _, env = installed
    out = _run(["quickstart", "--index-dir", str(tmp_path / "ix")], tmp_path, env)
    assert "ragbudget serve" in out and "quickstart" in out  # the next commands, for the index it built
    info = _run(["info", "--json"], tmp_path, {**env, "RAGBUDGET_INDEX__DIR": str(tmp_path / "ix")})
    assert "quickstart" in info
    ask = _run(["query", "How is unused budget lent between sections?", "--index", "quickstart",
                "--index-dir", str(tmp_path / "ix")], tmp_path, env)
    assert "budget" in ask.lower()
    gguf = tmp_path / "tiny.gguf"
    _run(["make-gguf", str(gguf), "--layers", "1", "--dim", "64"], tmp_path, env)
    assert gguf.stat().st_size > 0


@pytest.mark.skipif(not (EVAL / "mrpc_train.tsv").is_file(), reason="../shared/data is absent")
def test_an_evaluator_runs_outside_the_source_tree(installed, tmp_path):
    _, env = installed
    pairs = tmp_path / "pairs.tsv"  # the first 40 pairs: an evaluator over a user's own file
    pairs.write_text("".join((EVAL / "mrpc_train.tsv").read_text(encoding="utf-8").splitlines(True)[:41]),
                     encoding="utf-8")
    out = _run(["eval", "cache", str(pairs), "--json"], tmp_path, env)
    result = json.loads(out.strip().splitlines()[-1])
    assert result["pairs"] == 40 and result["positives"] + result["negatives"] == 40

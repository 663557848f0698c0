"""Execute each tuning notebook top to bottom on a fresh kernel in small mode and check its outputs.

The kernel is this interpreter (a kernel spec written to a temp folder), so the notebooks see the
project's venv. ``RAGBUDGET_NB_SMALL=1`` selects the quick subset; ``RAGBUDGET_NB_OUT_CONFIG`` sends the
written config to a temp path.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

from ragbudget import load_config
from ragbudget.eval.cache_eval import evaluate_pairs, load_pairs

pytestmark = pytest.mark.slow  # real engines or servers: `-m "not slow"` skips them in a quick loop

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
KERNEL = "ragbudget-test"


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("kernels")
    spec = d / KERNEL
    spec.mkdir()
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "ragbudget test", "language": "python"}), encoding="utf-8")
    return d


def run_notebook(name: str, kernel_dir: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                 timeout: int = 300) -> nbformat.NotebookNode:
    monkeypatch.setenv("RAGBUDGET_NB_SMALL", "1")
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    km = KernelManager(kernel_name=KERNEL, kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernel_dir)]))
    client = NotebookClient(nb, km=km, timeout=timeout, allow_errors=False,
                            resources={"metadata": {"path": str(NOTEBOOKS)}})
    try:
        client.execute()
    finally:  # the client does not own a kernel manager it was given: stop the kernel here
        if km.has_kernel:
            km.shutdown_kernel(now=True)
    return nb


def outputs(nb: nbformat.NotebookNode) -> list[Any]:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def images(nb: nbformat.NotebookNode) -> int:
    return sum(1 for o in outputs(nb) if "image/png" in o.get("data", {}))


def result(nb: nbformat.NotebookNode) -> dict[str, Any]:
    """The ``RESULT {json}`` line a notebook prints last."""
    for o in outputs(nb):
        for line in str(o.get("text", "")).splitlines():
            if line.startswith("RESULT "):
                return json.loads(line[len("RESULT "):])
    raise AssertionError("the notebook printed no RESULT line")


def test_cache_tuning_notebook(kernel_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               shared_data: Path, embedder):
    out = tmp_path / "tuned.yaml"
    nb = run_notebook("02_cache_tuning.ipynb", kernel_dir, {"RAGBUDGET_NB_OUT_CONFIG": str(out)}, monkeypatch)
    assert images(nb) >= 1
    res = result(nb)
    choice = res["choice"]
    assert choice["false_hit_rate"] <= res["target"]
    cfg = load_config(out, environ={})
    assert cfg.cache.semantic.threshold == pytest.approx(choice["threshold"])
    assert cfg.cache.semantic.guards == choice["guards"]
    # independent re-check on the same small set, through the config that was written
    pairs = load_pairs(shared_data / "eval" / "mrpc_train.tsv")[:res["pairs"]]
    again = evaluate_pairs(pairs, embedder, cfg.cache.semantic)[0]
    assert again["false_hit_rate"] <= res["target"]
    assert again["hit_rate"] == pytest.approx(choice["hit_rate"])


def test_budget_tuning_notebook(kernel_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_data: Path):
    out = tmp_path / "configs" / "tuned.yaml"
    nb = run_notebook("01_budget_tuning.ipynb", kernel_dir, {"RAGBUDGET_NB_OUT_CONFIG": str(out)}, monkeypatch)
    assert images(nb) >= 1
    res = result(nb)
    choice = res["choice"]
    assert choice["answer_in_context"] >= res["best"] - res["tolerance"]
    assert choice["context_tokens_mean"] <= choice["budget"]
    cfg = load_config(out, environ={})
    assert cfg.budget.retrieved.cap == choice["budget"]
    assert cfg.retrieval.top_k == cfg.rerank.top_n == choice["top_k"]
    assert (cfg.rerank.kind != "none") == choice["rerank"]
    assert cfg.trim.sentence_selection == choice["trim"]
    assert all(b != "retrieved" for _, b in cfg.budget.lend)


def test_latency_notebook(kernel_dir: Path, monkeypatch: pytest.MonkeyPatch, shared_data: Path):
    nb = run_notebook("03_latency.ipynb", kernel_dir, {}, monkeypatch)
    res = result(nb)
    routing = res["routing"]
    assert abs(sum(routing["share"].values()) - 1.0) < 1e-9
    assert {"handler", "small", "large"} <= set(routing["share"])
    assert 0 < routing["cost"] < routing["always_large_cost"]
    if res["engine"]:
        assert images(nb) >= 2
        stats = {s["layout"]: s for s in res["layout"]}
        assert set(stats) == {"static-first", "variable-first"} and all(s["n"] == 3 for s in stats.values())
        cached = res["cached_tokens"]  # the static prefix is reused only with the cache-friendly layout
        assert cached["static-first"] > 300 and cached["variable-first"] < cached["static-first"] / 2
    else:
        assert images(nb) >= 1

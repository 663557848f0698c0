"""Import direction over ragbudget/ (README "Architecture"): a module imports only from its own layer or
the layers below it. Read with ``ast`` (no import runs), lazy imports inside functions included.

    0 foundation   types, errors, config
    1 kernels      pure functions: tokens, text, budget, fusion, stats, breaker, kv_memory, degrade, async_bridge
    2 stores       index/, cache/, embed, embed_microbatch, ingest/, buckets
    3 stages       retrieve, rerank, trim, prompt, context, history, condense, route, handlers, llm/, ...
    4 pipeline     the RAG facade
    5 tools        eval/, adapters/ — may import anything below service and cli
    6 surfaces     service/, cli/, the package's __init__ and __main__
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "ragbudget"

LAYERS: dict[str, int] = {
    # 0 foundation
    "types": 0, "errors": 0, "config": 0,
    # 1 pure kernels
    "tokens": 1, "budget": 1, "fusion": 1, "stats": 1, "text": 1, "breaker": 1, "kv_memory": 1, "degrade": 1, "async_bridge": 1,
    "safe_values": 1,
    # 2 stores and caches
    "index": 2, "cache": 2, "embed": 2, "embed_microbatch": 2, "ingest": 2, "buckets": 2,
    # 3 stages of a request, and what they report to
    "retrieve": 3, "rerank": 3, "trim": 3, "prompt": 3, "context": 3, "history": 3, "condense": 3,
    "route": 3, "handlers": 3, "request": 3, "answer_cache": 3, "cached_retrieval": 3, "generation": 3, "llm": 3, "accounting": 3, "admission": 3, "batch_queries": 3, "index_registry": 3,
    "interop": 3, "metrics": 3, "telemetry": 3, "openai_surface": 3,
    # 4 the facade
    "pipeline": 4,
    # 5 tools built on the facade
    "eval": 5, "adapters": 5,
    # 6 surfaces
    "service": 6, "cli": 6, "__init__": 6, "__main__": 6,
}

# Imports that point up a layer, each with its reason. Remove an entry when the import goes.
EXCEPTIONS: dict[tuple[str, str], str] = {
    # RAG.as_llamaindex_retriever / as_llamaindex_query_engine: convenience methods that import the adapter
    # lazily (only when called), so llama-index stays optional. Lifts if they move to the adapter module.
    ("pipeline", "adapters"): "lazy convenience constructors for the LlamaIndex adapter",
}


def _module(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def _top(module: str) -> str:
    """``ragbudget.index.hybrid`` → ``index``; the package itself → ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path, module: str | None = None) -> list[tuple[str, int]]:
    """(absolute ragbudget module, line) for every import of the package in the file."""
    module = module or _module(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                if node.module:
                    out.append((".".join([*base, node.module]), node.lineno))
                else:  # from . import x
                    out += [(".".join([*base, a.name]), node.lineno) for a in node.names]
            elif node.module and node.module.split(".")[0] == "ragbudget":
                out.append((node.module, node.lineno))
        elif isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "ragbudget"]
    return out


FILES = sorted(p for p in PKG.rglob("*.py") if "sample_docs" not in p.parts)


def test_every_module_has_a_layer():
    missing = sorted({_top(_module(p)) for p in FILES} - set(LAYERS))
    assert not missing, f"place these modules in LAYERS (and the README map): {missing}"


def _violations(src: str, imports: list[tuple[str, int]]) -> list[str]:
    wrong = []
    for target, line in imports:
        dst = _top(target)
        if dst == "__init__" or dst not in LAYERS:
            wrong.append(f"line {line}: {target} (not a placed module)")
        elif LAYERS[dst] > LAYERS[src] and (src, dst) not in EXCEPTIONS:
            wrong.append(f"line {line}: {src} (layer {LAYERS[src]}) imports {target} (layer {LAYERS[dst]})")
    return wrong


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PKG)))
def test_imports_point_down(path):
    wrong = _violations(_top(_module(path)), _imports(path))
    assert not wrong, "\n".join(wrong)


def test_exceptions_are_still_needed():
    """An exception whose import is gone must be removed, so the list stays short and true."""
    seen = {(_top(_module(p)), _top(t)) for p in FILES for t, _ in _imports(p)}
    stale = [pair for pair in EXCEPTIONS if pair not in seen]
    assert not stale, f"remove from EXCEPTIONS: {stale}"


def test_the_checker_sees_a_wrong_import(tmp_path):
    """The check itself: a kernel importing the pipeline, lazily or not, and a stage importing the service."""
    bad = tmp_path / "tokens.py"
    bad.write_text("from .types import Usage\n\ndef f():\n    from .pipeline import RAG\n    import ragbudget.cli\n")
    wrong = _violations("tokens", _imports(bad, "ragbudget.tokens"))
    assert len(wrong) == 2 and "imports ragbudget.pipeline" in wrong[0] and "ragbudget.cli" in wrong[1]
    stage = tmp_path / "retrieve.py"
    stage.write_text("from .service.app import create_app\nfrom .index import HybridIndex\n")
    assert [w.split(": ", 1)[1] for w in _violations("retrieve", _imports(stage, "ragbudget.retrieve"))] == [
        "retrieve (layer 3) imports ragbudget.service.app (layer 6)"]

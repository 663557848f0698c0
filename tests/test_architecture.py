"""The house (README "Architecture"): imports point one way, no import circles, no oversized module.

A module imports only from its own layer or the layers below it, read with ``ast`` (no import runs), lazy
imports and ``TYPE_CHECKING`` imports included. The folders follow the path of a query:

    0 foundation   types, errors, config
    1 kernels/     pure functions: words, sentences, tokens, statistics, safe values, the async bridge, breaker
    2 stores       ingest/, embed/, index/ (local/, postgres/), cache/
    3 mechanisms   retrieval/ (search, fusion, rerank, registry), llm/, observe/
    4 budget/      the one allocation rule, the one fit of retrieved context, history; route/
    5 stages/      one request: request → admission → answer cache → condense → retrieval → context → generation
    6 adapters/    LlamaIndex and LangChain over the facade (through a protocol, never importing it)
    7 pipeline     the RAG facade
    8 eval/        evaluators built on the facade; testing (the shipped fakes and conformance suites)
    9 surfaces     service/, cli/, the package's __init__ and __main__
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "ragbudget"
MAX_LINES = 400

LAYERS: dict[str, int] = {
    "types": 0, "errors": 0, "config": 0,
    "kernels": 1,
    "ingest": 2, "embed": 2, "index": 2, "cache": 2,
    "retrieval": 3, "llm": 3, "observe": 3,
    "budget": 4, "route": 4,
    "stages": 5,
    "adapters": 6,
    "pipeline": 7,
    "eval": 8, "testing": 8,
    "service": 9, "cli": 9, "__init__": 9, "__main__": 9,
}

# Imports that point up a layer, each with its reason. Remove an entry when the import goes.
EXCEPTIONS: dict[tuple[str, str], str] = {}


def _module(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def _top(module: str) -> str:
    """``ragbudget.index.local.hybrid`` → ``index``; the package itself → ``__init__``."""
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
    bad.write_text("from ..types import Usage\n\ndef f():\n    from ..pipeline import RAG\n    import ragbudget.cli\n")
    wrong = _violations("kernels", _imports(bad, "ragbudget.kernels.tokens"))
    assert len(wrong) == 2 and "imports ragbudget.pipeline" in wrong[0] and "ragbudget.cli" in wrong[1]
    stage = tmp_path / "search.py"
    stage.write_text("from ..service.app import create_app\nfrom ..index import HybridIndex\n")
    assert [w.split(": ", 1)[1] for w in _violations("retrieval", _imports(stage, "ragbudget.retrieval.search"))] == [
        "retrieval (layer 3) imports ragbudget.service.app (layer 9)"]


MODULES = {_module(p): p for p in FILES}


def _resolve(target: str) -> str | None:
    """The module file an import lands on: the module itself, else the package it names (``from .index import
    HybridIndex`` runs ``index/__init__``)."""
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def _graph() -> dict[str, set[str]]:
    return {m: {t for t in (_resolve(x) for x, _ in _imports(p)) if t and t != m} for m, p in MODULES.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        x = stack.pop()
                        on.discard(x)
                        comp.append(x)
                        if x == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
            elif w not in index:
                index[w] = low[w] = len(index)
                stack.append(w)
                on.add(w)
                work.append((w, iter(sorted(graph.get(w, ())))))
            elif w in on:
                low[v] = min(low[v], index[w])
    return out


def test_no_import_circles():
    """No module reaches itself through imports (lazy and ``TYPE_CHECKING`` imports count: they are the same
    knot for a reader, and a refactor away from a real cycle)."""
    circles = _circles(_graph())
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


def test_the_circle_check_sees_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _circles(graph) == [["a", "b", "c"]]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PKG)))
def test_module_size(path):
    """Split a module past ~400 lines: small rooms are what make the house readable."""
    n = len(path.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_LINES, f"{path.relative_to(PKG)} has {n} lines (limit {MAX_LINES}): split it"

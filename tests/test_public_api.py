import argparse
import importlib
import inspect
import json
import sys
from pathlib import Path

import ragbudget


def test_all_names_exist_and_are_exported():
    assert len(ragbudget.__all__) == len(set(ragbudget.__all__))
    for name in ragbudget.__all__:
        assert getattr(ragbudget, name) is not None, name
    assert "RAG" in ragbudget.__all__


def test_errors_form_one_tree():
    for name in ragbudget.__all__:
        obj = getattr(ragbudget, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, ragbudget.RagBudgetError), name


def test_import_is_light():
    """Importing the package must not load torch or a model (that happens in warm_up)."""
    import subprocess
    import sys
    code = "import sys, ragbudget; print('torch' in sys.modules, 'sentence_transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"], out
    importlib.reload(ragbudget)


GOLDEN = Path(__file__).parent / "data" / "public_surface.json"


def surface() -> dict:
    """The public surface: exported names, their public signatures, every CLI command and option."""
    out = {"names": sorted(ragbudget.__all__), "signatures": {}, "cli": {}}
    for name in sorted(ragbudget.__all__):
        obj = getattr(ragbudget, name)
        if inspect.isclass(obj):
            for m, f in sorted(vars(obj).items()):
                if m.startswith("_") and m != "__init__":
                    continue
                if callable(f) or isinstance(f, (staticmethod, classmethod, property)):
                    fn = f.__func__ if isinstance(f, (staticmethod, classmethod)) else f
                    try:
                        out["signatures"][f"{name}.{m}"] = str(inspect.signature(fn)) if not isinstance(f, property) else "property"
                    except (TypeError, ValueError):
                        pass
        elif callable(obj):
            try:
                out["signatures"][name] = str(inspect.signature(obj))
            except (TypeError, ValueError):
                pass
    from ragbudget import cli
    parser = cli.build_parser()
    def walk(p, path):
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for cmd, sub in a.choices.items():
                    walk(sub, path + [cmd])
            else:
                out["cli"].setdefault(" ".join(path) or "ragbudget", []).append(sorted(a.option_strings) or [a.dest])
    walk(parser, [])
    return out


def test_public_api_and_cli_unchanged():
    """Nothing a user calls went away or changed signature when the package was regrouped (names may be
    added). After a deliberate change, regenerate: ``python tests/test_public_api.py > tests/data/public_surface.json``."""
    before, now = json.loads(GOLDEN.read_text(encoding="utf-8")), surface()
    assert not set(before["names"]) - set(now["names"]), "exported names removed"
    changed = {k: (v, now["signatures"].get(k)) for k, v in before["signatures"].items()
               if now["signatures"].get(k) != v}
    assert not changed, f"public signatures changed: {changed}"
    for cmd, opts in before["cli"].items():
        assert cmd in now["cli"], f"CLI command gone: {cmd}"
        missing = [o for o in opts if o not in now["cli"][cmd]]
        assert not missing, f"CLI options gone from {cmd!r}: {missing}"


if __name__ == "__main__":
    json.dump(surface(), sys.stdout, indent=1, sort_keys=True)

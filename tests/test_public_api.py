import importlib

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

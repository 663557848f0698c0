from pathlib import Path

import pytest

from ragbudget.config import Config, load_config
from ragbudget.errors import BudgetConfigError, ConfigError

REPO = Path(__file__).resolve().parents[1]


def test_default_yaml_spells_out_the_builtin_defaults():
    assert load_config(REPO / "configs" / "default.yaml", environ={}) == Config()
    assert load_config(None, environ={}) == Config()


def test_env_override_nested_and_typed():
    cfg = load_config(None, environ={"RAGBUDGET_RETRIEVAL__TOP_K": "7",
                                     "RAGBUDGET_CACHE__SEMANTIC__ENABLED": "false",
                                     "UNRELATED": "x"})
    assert cfg.retrieval.top_k == 7
    assert cfg.cache.semantic.enabled is False


def test_bad_env_value_names_the_key():
    with pytest.raises(ConfigError) as e:
        load_config(None, environ={"RAGBUDGET_RETRIEVAL__TOP_K": "lots"})
    assert "retrieval.top_k" in str(e.value)


def test_unknown_key_in_yaml_is_an_error(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("retrieval:\n  topk: 3\n")
    with pytest.raises(ConfigError) as e:
        load_config(p, environ={})
    assert "retrieval.topk" in str(e.value)


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml", environ={})
    bad = tmp_path / "bad.yaml"
    bad.write_text("retrieval: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad, environ={})


def test_impossible_budget_fails_at_load_time(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("budget:\n  context_window: 1000\n  retrieved:\n    cap: 900\n")
    with pytest.raises(BudgetConfigError, match="context_window"):
        load_config(p, environ={})


def test_with_overrides_validates():
    cfg = Config().with_overrides({"retrieval.top_k": 3})
    assert cfg.retrieval.top_k == 3
    with pytest.raises(ConfigError):
        Config().with_overrides({"retrieval.top_k": -1})
    with pytest.raises(ConfigError, match="unknown config key"):
        Config().with_overrides({"nosuch.key": 1})

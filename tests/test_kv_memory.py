"""KV-cache estimator: published per-token sizes, capacity maths, config checks."""

from __future__ import annotations

import json

import pytest
import yaml

from ragbudget.cli import main

from ragbudget.config import Config, KVSpecConfig, TierConfig
from ragbudget.errors import ConfigError
from ragbudget.budget.kv_memory import GIB, check_config, check_tier, kv_bytes_per_token, plan, summary_rows, tier_plan


def test_known_models_bytes_per_token() -> None:
    # Llama-2-7B (MHA, 32×32×128, fp16): 0.5 MiB/token; Llama-3-8B (GQA, 8 KV heads): 128 KiB/token.
    assert kv_bytes_per_token(32, 32, 128, 2) == 512 * 1024
    assert kv_bytes_per_token(32, 8, 128, 2) == 128 * 1024
    # fp8 KV halves it
    assert kv_bytes_per_token(32, 8, 128, 1) == 64 * 1024


def test_plan_concurrency_times_context() -> None:
    p = plan(128 * 1024, 16 * GIB, 8192)
    assert p.tokens == 131072
    assert p.max_concurrent == 16
    assert p.max_context(4) == 32768
    assert plan(128 * 1024, 16 * GIB, 8193).max_concurrent == 15  # one token more no longer fits 16
    with pytest.raises(ConfigError):
        p.max_context(0)


def test_bad_spec_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="kv_heads"):
        kv_bytes_per_token(32, 0, 128)
    with pytest.raises(ConfigError):
        plan(1024, 0, 10)


def _tier(memory_gb: float | None, concurrency: int = 1, n_ctx: int | None = None) -> TierConfig:
    return TierConfig(name="large", backend="openai", model="llama3-8b", context_window=8192, n_ctx=n_ctx,
                      kv=KVSpecConfig(layers=32, kv_heads=8, head_dim=128, memory_gb=memory_gb,
                                      concurrency=concurrency))


def test_check_tier_rejects_a_budget_that_cannot_hold_the_context() -> None:
    assert check_tier(_tier(16, concurrency=16)).max_concurrent == 16
    with pytest.raises(ConfigError, match="kv.concurrency=17") as err:
        check_tier(_tier(16, concurrency=17))
    assert "fix:" in str(err.value)
    # n_ctx (llama.cpp) is what is allocated, not the window
    assert tier_plan(_tier(1, n_ctx=2048)).max_concurrent == 4
    assert tier_plan(_tier(None)) is None


def test_check_config_and_info_rows() -> None:
    cfg = Config().model_copy(update={})
    cfg = cfg.with_overrides({"llm.tiers": [
        {"name": "extractive", "backend": "extractive"},
        {"name": "large", "backend": "openai", "model": "m", "context_window": 8192,
         "kv": {"layers": 32, "kv_heads": 8, "head_dim": 128, "memory_gb": 8, "concurrency": 2}}]})
    assert [(n, p.max_concurrent) for n, p in check_config(cfg)] == [("large", 8)]
    rows = summary_rows(cfg.llm.tiers)
    assert rows == [{"tier": "large", "model": "m", "kib_per_token": 128.0, "context": 8192,
                     "gib_per_request": 1.0, "memory_gib": 8.0, "tokens": 65536, "max_concurrent": 8,
                     "fits": True}]


def test_kv_spec_fields_validated_by_config() -> None:
    with pytest.raises(ConfigError, match="kv"):
        Config().with_overrides({"llm.tiers": [{"name": "x", "kv": {"layers": 0, "kv_heads": 8, "head_dim": 128}}]})


def test_info_command_shows_kv_and_fails_on_overcommit(tmp_path, capsys) -> None:
    tier = {"name": "large", "backend": "openai", "model": "llama3-8b", "context_window": 8192,
            "kv": {"layers": 32, "kv_heads": 8, "head_dim": 128, "memory_gb": 16, "concurrency": 16}}
    ok = tmp_path / "ok.yaml"
    ok.write_text(yaml.safe_dump({"index": {"dir": str(tmp_path)}, "llm": {"tiers": [tier]}}))
    assert main(["info", "--json", "--config", str(ok)]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["kv"][0]["max_concurrent"] == 16 and d["kv_problem"] is None
    tier["kv"]["concurrency"] = 17
    ok.write_text(yaml.safe_dump({"index": {"dir": str(tmp_path)}, "llm": {"tiers": [tier]}}))
    assert main(["info", "--json", "--config", str(ok)]) == 1
    assert "kv.concurrency=17" in json.loads(capsys.readouterr().out)["kv_problem"]

"""Typed configuration: ``configs/*.yaml`` → pydantic models, with ``RAGBUDGET_*`` env overrides.

There is no global settings object: load a :class:`Config` and pass it (or its sections) explicitly.

Environment overrides use ``__`` between levels, e.g. ``RAGBUDGET_RETRIEVAL__TOP_K=5`` or
``RAGBUDGET_BUDGET__CONTEXT_WINDOW=4096``. Values are parsed as YAML scalars (``true``, ``5``, ``0.3``).
A bad value raises :class:`~ragbudget.errors.ConfigError` naming the key.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

import yaml
from pydantic import ValidationError, model_validator

from ..errors import BudgetConfigError, ConfigError
from .base import _Section
from .budget import QUESTION_LABEL_TOKENS, BudgetConfig, PromptConfig, TrimConfig
from .llm import LLMConfig
from .retrieval import (ChunkingConfig, EmbeddingConfig, IndexConfig, RerankConfig, RetrievalConfig,
                        TokenizerConfig)
from .serving import CacheConfig, ServiceConfig, TelemetryConfig

ENV_PREFIX = "RAGBUDGET_"


class Config(_Section):
    tokenizer: TokenizerConfig = TokenizerConfig()
    embedding: EmbeddingConfig = EmbeddingConfig()
    chunking: ChunkingConfig = ChunkingConfig()
    index: IndexConfig = IndexConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    rerank: RerankConfig = RerankConfig()
    budget: BudgetConfig = BudgetConfig()
    trim: TrimConfig = TrimConfig()
    prompt: PromptConfig = PromptConfig()
    llm: LLMConfig = LLMConfig()
    cache: CacheConfig = CacheConfig()
    service: ServiceConfig = ServiceConfig()
    telemetry: TelemetryConfig = TelemetryConfig()

    @model_validator(mode="after")
    def _condense_tier_exists(self) -> "Config":
        cap = self.service.limits.max_tool_output_bytes
        for q, text in self.llm.router.faq.items():
            if len(text.encode("utf-8")) > cap:
                raise ValueError(f"llm.router.faq[{q!r}] is {len(text.encode('utf-8'))} bytes, over "
                                 f"service.limits.max_tool_output_bytes={cap}: shorten it or raise the limit")
        r = self.retrieval
        if r.condense == "llm":
            names = [t.name for t in self.llm.tiers if t.backend != "extractive"]
            if r.condense_tier not in names:
                raise ValueError(f"retrieval.condense: llm needs retrieval.condense_tier naming a model tier "
                                 f"(one of {names}), got {r.condense_tier!r}")
        fits = self.budget.section_tokens("question") - QUESTION_LABEL_TOKENS
        mq = self.service.limits.max_question_tokens
        if fits < 1:
            raise BudgetConfigError(f"budget.question holds {fits + QUESTION_LABEL_TOKENS} tokens, not enough for "
                                    f"its {QUESTION_LABEL_TOKENS}-token label and a question",
                                    fix="raise budget.question.cap")
        if mq is not None and mq > fits:
            raise BudgetConfigError(
                f"service.limits.max_question_tokens ({mq}) is over the {fits} tokens budget.question lets into "
                "the prompt: questions between the two would be cut", fix="lower it, leave it null, or raise "
                "budget.question.cap")
        return self

    def with_overrides(self, overrides: Mapping[str, Any]) -> "Config":
        """A new Config with dotted-key overrides applied, e.g. ``{"retrieval.top_k": 5}``."""
        data = self.model_dump()
        for key, value in overrides.items():
            _set_dotted(data, key.split("."), value, key)
        return _validate(data, source="overrides")


def question_limit(cfg: Config) -> tuple[int, str]:
    """The one limit on a question's tokens and the setting that sets it (library and API alike)."""
    fits = cfg.budget.section_tokens("question") - QUESTION_LABEL_TOKENS
    mq = cfg.service.limits.max_question_tokens
    if mq is not None and mq <= fits:
        return mq, "service.limits.max_question_tokens"
    return fits, f"budget.question ({fits + QUESTION_LABEL_TOKENS} tokens less the {QUESTION_LABEL_TOKENS}-token label)"


def _set_dotted(data: dict[str, Any], parts: list[str], value: Any, key: str) -> None:
    cur = data
    for p in parts[:-1]:
        if not isinstance(cur.get(p), dict):
            raise ConfigError(f"unknown config key {key!r}", fix="see configs/default.yaml for the keys")
        cur = cur[p]
    cur[parts[-1]] = value


def _format_validation_error(err: ValidationError, source: str) -> str:
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "(root)"
        got = e.get("input")
        got_s = "" if isinstance(got, dict) else f" (got {got!r})"
        lines.append(f"{key}: {e['msg']}{got_s}")
    return f"invalid configuration in {source}:\n  " + "\n  ".join(lines)


def _validate(data: Mapping[str, Any], source: str) -> Config:
    try:
        return Config.model_validate(data)
    except BudgetConfigError:
        raise
    except ValidationError as err:
        # pydantic wraps errors raised in validators; surface ours with the key
        raise ConfigError(_format_validation_error(err, source),
                          fix="correct the key(s) above; defaults are in configs/default.yaml") from None


#: RAGBUDGET_* variables that are not config overrides (read elsewhere); a tier's ``api_key_env`` and
#: ``service.api_keys_env`` are allowed too. Any other RAGBUDGET_* name is an error naming it.
NON_CONFIG_ENV = frozenset({"RAGBUDGET_API_KEYS", "RAGBUDGET_SERVE_CONFIG"})
NON_CONFIG_ENV_PREFIXES = ("RAGBUDGET_NB_",)  # the notebooks' own switches


def env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    """Nested dict from ``RAGBUDGET_A__B=value`` variables (YAML-parsed scalars)."""
    out: dict[str, Any] = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX) or "__" not in name[len(ENV_PREFIX):]:
            continue
        parts = [p.lower() for p in name[len(ENV_PREFIX):].split("__")]
        if any(not p for p in parts):
            raise ConfigError(f"environment variable {name}: empty key between '__'",
                              fix="use RAGBUDGET_SECTION__KEY, e.g. RAGBUDGET_RETRIEVAL__TOP_K=5")
        try:
            value = yaml.safe_load(raw) if raw.strip() else raw
        except yaml.YAMLError:
            value = raw
        cur = out
        for p in parts[:-1]:
            nxt = cur.setdefault(p, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"environment variable {name}: {p!r} is set both as a value and as a section",
                                  fix="unset one of the two variables")
            cur = nxt
        cur[parts[-1]] = value
    return out


def _check_env_names(environ: Mapping[str, str], cfg: "Config") -> None:
    """RAGBUDGET_* names that are neither overrides (``SECTION__KEY``) nor known variables: ConfigError.
    (Overrides naming unknown keys fail validation, which names the key.)"""
    allowed = set(NON_CONFIG_ENV) | {cfg.service.api_keys_env} | {t.api_key_env for t in cfg.llm.tiers if t.api_key_env}
    bad = sorted(n for n in environ if n.startswith(ENV_PREFIX) and "__" not in n[len(ENV_PREFIX):]
                 and n not in allowed and not n.startswith(NON_CONFIG_ENV_PREFIXES))
    if bad:
        raise ConfigError(f"unknown RAGBUDGET_* environment variable(s): {', '.join(bad)} (not a config override)",
                          fix="overrides use '__' between levels, e.g. RAGBUDGET_RETRIEVAL__TOP_K=5; unset the "
                              "variable if it is not meant for ragbudget")


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def load_config(path: str | os.PathLike[str] | None = None,
                environ: Mapping[str, str] | None = None) -> Config:
    """Load a YAML config (``None``: the built-in defaults, which ``configs/default.yaml`` spells out),
    then apply env overrides. ``environ`` defaults to ``os.environ``; pass ``{}`` to ignore it.

    An override replaces one value of the *complete* configuration (file or defaults): the other fields of
    its section keep their values. Unknown RAGBUDGET_* names and unknown keys are errors naming them.
    """
    environ = os.environ if environ is None else environ
    env = env_overrides(environ)
    if path is None:
        base, source = Config(), "defaults"
    else:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file not found: {p}", fix="pass --config with an existing YAML file")
        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as err:
            raise ConfigError(f"{p} is not valid YAML: {err}",
                              fix="fix the YAML syntax at the line and column named above") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{p}: top level must be a mapping of sections",
                              fix="start the file with section names, e.g. 'budget:' (see configs/default.yaml)")
        if env:  # merge before validating: a file may rely on an override (backend: postgres + RAGBUDGET_INDEX__DSN)
            cfg = _validate(_deep_merge(data, env), source=f"{p} + RAGBUDGET_* environment")
        else:
            cfg = _validate(data, source=str(p))
        _check_env_names(environ, cfg)
        return cfg
    cfg = base
    if env:
        # deep-merge into the complete config, so one field's override keeps its section's other values
        cfg = _validate(_deep_merge(base.model_dump(), env), source=source + " + RAGBUDGET_* environment")
    _check_env_names(environ, cfg)
    return cfg


def dump_config(cfg: Config, path: str | os.PathLike[str]) -> None:
    """Write a config as YAML (used by the tuning notebook)."""
    Path(path).write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), encoding="utf-8")

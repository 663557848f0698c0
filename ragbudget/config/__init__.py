"""Typed configuration: ``configs/*.yaml`` → pydantic models, with ``RAGBUDGET_*`` env overrides.

There is no global settings object: load a :class:`Config` and pass it (or its sections) explicitly.
The sections live by concern — :mod:`.retrieval` (tokenizer, embedding, chunking, index, retrieval,
rerank), :mod:`.budget` (budgets, trim, prompt and modes), :mod:`.llm` (tiers, router), :mod:`.serving`
(caches, tenants, limits, admission, capture, service, telemetry) — and :mod:`.root` holds the root
:class:`Config` and how it is loaded; every name is re-exported here.
"""

from .budget import QUESTION_LABEL_TOKENS, BudgetConfig, ModeConfig, PromptConfig, SectionBudget, TrimConfig
from .llm import KVSpecConfig, LLMConfig, RouterConfig, TierConfig
from .retrieval import (BM25Config, ChunkingConfig, EmbeddingConfig, FaissConfig, IndexConfig, MicroBatchConfig,
                        PostgresIndexConfig, RerankConfig, RetrievalConfig, TokenizerConfig)
from .root import (ENV_PREFIX, NON_CONFIG_ENV, NON_CONFIG_ENV_PREFIXES, Config, dump_config, env_overrides,
                   load_config, question_limit)
from .serving import (AdmissionConfig, CacheConfig, CaptureConfig, LimitsConfig, SemanticCacheConfig,
                      ServiceConfig, TelemetryConfig, TenantConfig)

__all__ = [
    "Config", "load_config", "dump_config", "env_overrides", "question_limit",
    "ENV_PREFIX", "NON_CONFIG_ENV", "NON_CONFIG_ENV_PREFIXES", "QUESTION_LABEL_TOKENS",
    "TokenizerConfig", "MicroBatchConfig", "EmbeddingConfig", "ChunkingConfig", "FaissConfig", "BM25Config",
    "RetrievalConfig", "PostgresIndexConfig", "IndexConfig", "RerankConfig",
    "SectionBudget", "BudgetConfig", "TrimConfig", "ModeConfig", "PromptConfig",
    "KVSpecConfig", "TierConfig", "RouterConfig", "LLMConfig",
    "SemanticCacheConfig", "CacheConfig", "TenantConfig", "LimitsConfig", "AdmissionConfig", "CaptureConfig",
    "ServiceConfig", "TelemetryConfig",
]

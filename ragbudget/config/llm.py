"""Config sections of generation: model tiers (backend, window, prices, KV shape) and the router."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .base import _Section


class KVSpecConfig(_Section):
    """A model's KV-cache shape (from its config.json / GGUF header), for the KV memory estimator."""

    layers: int = Field(ge=1, le=1000)
    kv_heads: int = Field(ge=1, le=1024)  # num_key_value_heads (GQA), not the query heads
    head_dim: int = Field(ge=1, le=4096)
    kv_dtype_bytes: float = Field(2.0, gt=0, le=8)  # 2 = fp16/bf16, 1 = fp8/q8_0, 0.5 = q4
    memory_gb: float | None = Field(None, gt=0)  # memory set aside for the KV cache (GiB); None = not checked
    concurrency: int = Field(1, ge=1)  # requests that must fit at the tier's full context together


class TierConfig(_Section):
    name: str
    backend: Literal["extractive", "openai", "llamacpp", "scripted"] = "extractive"
    model: str = "extractive"
    base_url: str | None = None
    api_key_env: str | None = None
    context_window: int = Field(8192, ge=128)
    max_output_tokens: int = Field(1024, ge=1)
    price_in_per_1k: float = Field(0.0, ge=0)
    price_out_per_1k: float = Field(0.0, ge=0)
    timeout_s: float = Field(30.0, gt=0)
    first_token_timeout_s: float = Field(20.0, gt=0)
    retries: int = Field(1, ge=0, le=10)
    n_ctx: int | None = None  # llamacpp: context size to allocate
    n_threads: int | None = None
    kv: KVSpecConfig | None = None  # KV-cache shape; `ragbudget info` shows max concurrency × context
    # How this tier's engine counts prompt tokens, for its window check: auto (llama.cpp's own tokenizer
    # and chat template; tiktoken for OpenAI model names), tiktoken:<encoding>, gguf:<path> (the GGUF a
    # server serves: its tokenizer and chat template), a tokenizer.json path,
    # server (the server's /tokenize), or estimate (builder tokens × the ratio the engine's usage reports)
    tokenizer: str = "auto"


class RouterConfig(_Section):
    enabled: bool = True
    small_tasks: list[str] = ["extraction", "classification", "faq"]
    difficulty_threshold: float = Field(0.6, ge=0, le=1)
    escalate_on_failed_check: bool = True
    min_grounding: float = Field(0.2, ge=0, le=1)
    deterministic_handlers: bool = True
    breaker_failures: int = Field(3, ge=1)
    breaker_reset_s: float = Field(30.0, gt=0)
    # exact-match FAQ answered without a model (question → answer; case/punctuation-insensitive)
    faq: dict[str, str] = {}
    # words that make a question harder (difficulty estimate) and phrases that mark a refusal
    hard_words: list[str] = ["why", "how", "compare", "explain", "difference", "analyze", "analyse",
                             "evaluate", "pros", "cons", "tradeoff", "trade-off", "justify", "versus", "vs"]
    refusal_phrases: list[str] = ["i cannot", "i can't", "i'm sorry", "i am sorry", "as an ai",
                                  "unable to answer", "do not contain", "don't know", "do not know"]
    low_confidence: float = Field(0.3, ge=0, le=1)  # top retrieval score below this = harder question
    escalate_on_no_answer: bool = True  # an "I don't know" from the small tier counts as a failed check


class LLMConfig(_Section):
    tiers: list[TierConfig] = [TierConfig(name="extractive", backend="extractive", model="extractive")]
    router: RouterConfig = RouterConfig()

    @model_validator(mode="after")
    def _unique_names(self) -> "LLMConfig":
        names = [t.name for t in self.tiers]
        if not names:
            raise ValueError("llm.tiers must list at least one tier")
        if len(set(names)) != len(names):
            raise ValueError(f"llm.tiers names must be unique, got {names}")
        return self

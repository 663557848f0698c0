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


# KV-cache element types llama.cpp accepts (name → ggml type id); quantized V needs flash attention
KV_CACHE_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20,
                  "bf16": 30}
KVCacheType = Literal["f32", "f16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "iq4_nl", "bf16"]


class LlamaCppOptions(_Section):
    """Engine options of a ``llamacpp`` tier, passed to ``llama_cpp.Llama`` (unknown keys are errors)."""

    n_batch: int = Field(512, ge=1, le=65536)  # prompt tokens submitted per decode call
    n_ubatch: int = Field(512, ge=1, le=65536)  # physical batch: tokens per compute graph
    n_threads_batch: int | None = Field(None, ge=1, le=1024)  # threads for prompt evaluation (None: n_threads)
    seed: int = Field(0, ge=0, le=2**32 - 1)  # sampling seed when a request sets none
    flash_attn: bool = False
    use_mmap: bool = True
    use_mlock: bool = False
    n_gpu_layers: int = Field(0, ge=-1)  # -1: all layers (needs a GPU build of llama.cpp)
    offload_kqv: bool = True
    type_k: KVCacheType | None = None  # KV-cache element types (None: f16)
    type_v: KVCacheType | None = None
    chat: bool = True  # apply the model's chat template (False: prompt.text as a raw completion)
    lock_timeout_s: float = Field(60.0, gt=0)  # how long a request waits for the engine (one at a time)

    @model_validator(mode="after")
    def _consistent(self) -> "LlamaCppOptions":
        if self.n_ubatch > self.n_batch:
            raise ValueError(f"llamacpp.n_ubatch ({self.n_ubatch}) must not exceed llamacpp.n_batch "
                             f"({self.n_batch})")
        if self.type_v not in (None, "f16", "f32", "bf16") and not self.flash_attn:
            raise ValueError(f"llamacpp.type_v={self.type_v} (a quantized V cache) needs llamacpp.flash_attn: true")
        return self

    def engine_kwargs(self) -> dict[str, object]:
        """Keyword arguments for ``llama_cpp.Llama`` (cache types as ggml type ids)."""
        kw: dict[str, object] = self.model_dump(exclude={"chat", "lock_timeout_s", "seed", "type_k", "type_v"})
        if kw["n_threads_batch"] is None:
            del kw["n_threads_batch"]
        for name in ("type_k", "type_v"):
            v = getattr(self, name)
            if v is not None:
                kw[name] = KV_CACHE_TYPES[v]
        return kw


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
    n_ctx: int | None = Field(None, ge=16)  # llamacpp: context size to allocate (None: context_window)
    n_threads: int | None = Field(None, ge=1, le=1024)  # llamacpp: decode threads (None: llama.cpp's choice)
    llamacpp: LlamaCppOptions = LlamaCppOptions()  # llamacpp: engine options (batching, KV types, seed …)
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

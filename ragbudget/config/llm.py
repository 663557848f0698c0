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
    # flash attention (needed for a quantized V cache)
    flash_attn: bool = False
    # memory-map the GGUF instead of reading it into memory
    use_mmap: bool = True
    # lock the model in RAM (never swapped out)
    use_mlock: bool = False
    n_gpu_layers: int = Field(0, ge=-1)  # -1: all layers (needs a GPU build of llama.cpp)
    # keep the KV cache on the GPU with offloaded layers (a GPU build)
    offload_kqv: bool = True
    type_k: KVCacheType | None = None  # KV-cache element types (None: f16)
    # V-cache element type (f16 … q4_0; a quantized one needs flash_attn: true); null: llama.cpp's default
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
    # the tier's name (routes, metrics, ledger)
    name: str
    # extractive (quotes sentences, no model), openai (any OpenAI-compatible server), llamacpp (a GGUF in process),
    # scripted (tests)
    backend: Literal["extractive", "openai", "llamacpp", "scripted"] = "extractive"
    # model name sent to the server (openai) or the GGUF path (llamacpp)
    model: str = "extractive"
    # OpenAI-compatible server URL (backend openai), e.g. http://127.0.0.1:8001/v1
    base_url: str | None = None
    # environment variable holding the server's API key (never the key itself)
    api_key_env: str | None = None
    # tokens the model's window holds: the router never sends a longer prompt
    context_window: int = Field(8192, ge=128)
    # most tokens the tier may generate per answer
    max_output_tokens: int = Field(1024, ge=1)
    # price per 1000 prompt tokens (cost estimates, routing)
    price_in_per_1k: float = Field(0.0, ge=0)
    # price per 1000 completion tokens (cost estimates, routing)
    price_out_per_1k: float = Field(0.0, ge=0)
    # seconds a whole generation may take before the router falls back
    timeout_s: float = Field(30.0, gt=0)
    # seconds to the first token before the router falls back
    first_token_timeout_s: float = Field(20.0, gt=0)
    # retries of a failed call before falling back to another tier
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
    # route each question to a tier by task and difficulty (false: always the first tier)
    enabled: bool = True
    # tasks always sent to the small tier
    small_tasks: list[str] = ["extraction", "classification", "faq"]
    # questions estimated harder than this go to the large tier
    difficulty_threshold: float = Field(0.6, ge=0, le=1)
    # re-ask the next tier when a small answer is empty, a refusal or ungrounded
    escalate_on_failed_check: bool = True
    # share of an answer's content words that must appear in the context for it to count as grounded
    min_grounding: float = Field(0.2, ge=0, le=1)
    # answer arithmetic, unit conversions, dates and configured FAQs in code, without a model
    deterministic_handlers: bool = True
    # consecutive failures of a backend that open its circuit breaker
    breaker_failures: int = Field(3, ge=1)
    # seconds an open breaker waits before trying the backend again
    breaker_reset_s: float = Field(30.0, gt=0)
    # exact-match FAQ answered without a model (question → answer; case/punctuation-insensitive)
    faq: dict[str, str] = {}
    # words that make a question harder (difficulty estimate) and phrases that mark a refusal
    hard_words: list[str] = ["why", "how", "compare", "explain", "difference", "analyze", "analyse",
                             "evaluate", "pros", "cons", "tradeoff", "trade-off", "justify", "versus", "vs"]
    # phrases (lower case) that mark an answer as a refusal (escalated when escalation is on)
    refusal_phrases: list[str] = ["i cannot", "i can't", "i'm sorry", "i am sorry", "as an ai",
                                  "unable to answer", "do not contain", "don't know", "do not know"]
    low_confidence: float = Field(0.3, ge=0, le=1)  # top retrieval score below this = harder question
    escalate_on_no_answer: bool = True  # an "I don't know" from the small tier counts as a failed check


class LLMConfig(_Section):
    # model tiers, cheapest first; the router picks one per question (see the keys below)
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

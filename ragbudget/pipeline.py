"""The ``RAG`` facade: one query through every stage, in plain order.

::

    handlers → response cache (exact, semantic) → retrieval cache → hybrid retrieve → rerank → budget
    → trim → prompt → route → generate (stream) → store in caches → metrics + ledger on the Answer

``stream`` is the primitive: it yields :class:`ProgressEvent`, :class:`TokenEvent` and one
:class:`FinalEvent`. ``query`` consumes it; the async twins run it in a worker thread and cancel the
generation when the consumer goes away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import threading
import time
from pathlib import Path
from typing import Any, AsyncIterator, Iterable, Iterator, Mapping, Sequence

from .accounting import as_cache_hit, check_question, cite, not_cacheable
from .cache import CacheLayers
from .cache.keys import ResponseScope, conversation_fingerprint, digest
from .condense import condense, condense_with_llm
from .config import Config, TierConfig, load_config
from .context import BuiltContext, ContextBuilder
from .embed import EmbeddingCache, SentenceTransformerEmbedder
from .errors import AdmissionError, CacheError, QueryError
from .history import coerce_history
from .index import IngestReport, ProgressFn
from .index.filters import Filters, parse_filters
from .index.filters import fingerprint as filter_fingerprint
from .index_registry import IndexRegistry, LoadedIndex
from .ingest.paths import PathPolicy
from .llm import make_generator, make_prompt
from .llm.base import Generator, GenerationStream
from .kv_memory import check_config as check_kv
from .metrics import Metrics
from .embed_microbatch import MicroBatcher
from .prompt import PrefixMonitor, fingerprint, prefix_parts, static_prefix
from .rerank import make_reranker
from .route import RouteDecision, Routed, Router
from .telemetry import Tracer, make_tracer
from .tokens import Tokenizer
from .types import (Answer, Document, FinalEvent, Ledger, Message, ProgressEvent, Sampling, Scored, StreamEvent,
                    Timings, TokenEvent)

log = logging.getLogger("ragbudget")

#: Degradation ladder levels the pipeline applies (admission control picks the level).
DEGRADE_SMALLER_CONTEXT, DEGRADE_NO_RERANK, DEGRADE_SMALL_MODEL, DEGRADE_CACHE_OR_EXTRACTIVE = 1, 2, 3, 4
DEGRADE_REJECT = 5  # admission answers 429 at this level; the pipeline refuses it too
_WORD = re.compile(r"\S+\s*")


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
        self._lock = threading.RLock()
        self._prefix_fps: dict[str, str] = {}
        self._prefix_monitor = PrefixMonitor()
        self._extractive = make_generator(TierConfig(name="extractive", backend="extractive", model="extractive"),
                                          tokenizer=self.tokenizer)
        self._tiers_fp = digest([t.model_dump() for t in self.config.llm.tiers])

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
        """Load the embedding model (and reranker) now rather than on the first query."""
        self.embedder.warm_up()
        _ = self.builder, self.router, self.cache

    def close(self) -> None:
        self.tracer.shutdown()  # exports what is queued (bounded by telemetry.export_timeout_s)
        if self._indexes is not None:
            self._indexes.close()
        if self._cache is not None:
            self._cache.close()
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

    def _retrieve(self, question: str, loaded: LoadedIndex, k: int, timings: Timings, ledger: Ledger,
                  filters: Filters = ()) -> list[Scored]:
        settings = {"mode": self.config.retrieval.mode, "k": k, "rrf_k": self.config.retrieval.rrf_k,
                    "w": [self.config.retrieval.dense_weight, self.config.retrieval.sparse_weight]}
        if filters:
            settings["filters"] = filter_fingerprint(filters)
        rc = self.cache.retrieval
        t0 = time.perf_counter()
        if rc is not None:
            hit = rc.get(loaded.index.version, settings, question)
            timings.stages["cache_retrieval"] = _ms(t0)
            if hit is not None:
                got = loaded.index.get_chunks([cid for cid, _ in hit])
                if len(got) == len(hit):
                    ledger.flags.append("retrieval_cache_hit")
                    return [Scored(chunk=c, score=s, fused_score=s) for c, (_, s) in zip(got, hit)]
        notes: list[str] = []
        out = loaded.retriever.retrieve(question, k, timings=timings.stages, notes=notes, filters=filters)
        ledger.section("retrieved").notes.extend(notes)
        if rc is not None:
            rc.set(loaded.index.version, settings, question, [(s.chunk.id, s.score) for s in out])
        return out

    def _condense(self, question: str, history: Sequence[Message], ledger: Ledger) -> str:
        """The retrieval query for a follow-up (see :mod:`ragbudget.condense`); the question otherwise."""
        how = self.config.retrieval.condense
        if how == "off" or not history:
            return question
        if how == "llm" and self.config.retrieval.condense_tier:
            gen = self.router.generators[self.config.retrieval.condense_tier]
            c = condense_with_llm(question, history,
                                  lambda text: gen.generate(make_prompt([("user", text)]), max_tokens=64).text)
        else:
            c = condense(question, history)
        if c.changed:
            ledger.section("question").notes.append(f"retrieval query condensed from the history ({c.method}): "
                                                    f"{c.query!r}")
        return c.query

    # ------------------------------------------------------------------ the query path
    def _scope(self, loaded: LoadedIndex | None, tenant: str, mode: str, max_tokens: int,
               history: Sequence[Message], filters: Filters = (), sampling: Sampling = Sampling()) -> ResponseScope:
        return ResponseScope(tenant=tenant, index_version=loaded.index.version if loaded else "",
                             temperature=sampling.temperature, top_p=sampling.top_p, stop=sampling.stop,
                             seed=sampling.seed,
                             filters=filter_fingerprint(filters) if filters else "",
                             prompt_version=f"{self.config.prompt.version}:{self._prefix_fp(mode)}",
                             model_tier=self._tiers_fp, max_tokens=max_tokens, mode=mode,
                             conversation=conversation_fingerprint(history))

    def _prefix_fp(self, mode: str) -> str:
        with self._lock:
            fp = self._prefix_fps.get(mode)
            if fp is None:
                fp = self._prefix_fps[mode] = fingerprint(static_prefix(self.config.prompt, mode))
            return fp

    def _mode(self, mode: str | None) -> str:
        mode = mode or self.config.prompt.default_mode
        if mode not in self.config.prompt.modes:
            raise QueryError(f"unknown response mode {mode!r}", fix=f"use one of {self.modes()}")
        return mode

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

    def _stream(self, question: str, stages: dict[str, float], *, history: Any, mode: str | None, index: str | None,
                tenant: str, degrade_level: int, max_tokens: int | None, task: str | None, escalate: bool,
                cancel: threading.Event | None, filters: Mapping[str, Any] | None,
                sampling: Sampling | None) -> Iterator[StreamEvent]:
        """The query path; ``stages`` receives each stage's duration (the tracer's dict when tracing)."""
        t_start = time.perf_counter()
        if not isinstance(question, str) or not question.strip():
            raise QueryError("the question is empty", fix="ask a question with at least one word")
        if degrade_level >= DEGRADE_REJECT:
            raise AdmissionError(f"degrade level {degrade_level}: overloaded, request rejected",
                                 fix="retry after Retry-After")
        check_question(question, self.config, self.tokenizer)  # one limit, refused (413), never cut
        flt = parse_filters(filters)  # a bad filter is a QueryError (400) before any work
        mode = self._mode(mode)
        hist = coerce_history(history or [])
        mode_cfg = self.config.prompt.modes[mode]
        out_tokens = min(max_tokens or mode_cfg.max_tokens, mode_cfg.max_tokens if max_tokens is None else max_tokens)
        timings, ledger = Timings(stages=stages), Ledger(degrade_level=degrade_level)

        # 1. deterministic handlers: code is right, no model, no retrieval
        handled = self.router.handle(question, tool_cache=self.cache.tool,
                                     max_output_bytes=self.config.service.limits.max_tool_output_bytes)
        if handled is not None:
            ans = self._answer(question, handled, [], ledger, timings, t_start, built=None)
            yield from self._replay(ans)
            return

        loaded = self._loaded(index)
        sampling = sampling or Sampling()
        scope = self._scope(loaded, tenant, mode, out_tokens, hist, flt, sampling)

        # 2. response cache: exact, then semantic
        yield ProgressEvent("cache", "looking up cached answers")
        t0 = time.perf_counter()
        hit = None
        rc = self.cache.response
        if rc is not None:
            try:
                hit = rc.exact.lookup(scope, question)
                if hit is None and rc.semantic is not None:  # embed only when the exact layer missed
                    hit = rc.semantic.lookup(scope, question, self.embedder.embed_query(question))
            except CacheError as err:
                log.warning("response cache lookup failed: %s", err)
        timings.stages["cache_response"] = _ms(t0)
        if hit is not None:  # no model ran: zero usage and cost; what the stored answer took is ledger.saved
            cached = as_cache_hit(Answer.from_dict(hit.record), layer=hit.layer, question=question,
                                  lookup_ms=timings.stages["cache_response"], total_ms=_ms(t_start))
            self._observe(cached, tenant)
            yield from self._replay(cached)
            return
        if degrade_level >= DEGRADE_CACHE_OR_EXTRACTIVE:
            ledger.flags.append("degraded:extractive_only")

        # 3. retrieve (cached per index version)
        yield ProgressEvent("retrieving", f"searching index {loaded.index.name!r}")
        k = self.config.retrieval.top_k
        if degrade_level >= DEGRADE_SMALLER_CONTEXT:
            k = max(1, k // 2)
        search_q = self._condense(question, hist, ledger)
        retrieved = self._retrieve(search_q, loaded, max(k, self.config.rerank.top_n if degrade_level < 2 else k),
                                   timings, ledger, flt)

        # 4. rerank, budget, trim, history, prompt
        yield ProgressEvent("reranking", f"{len(retrieved)} candidates")
        t0 = time.perf_counter()
        pre_build = Ledger.from_dict(ledger.to_dict())  # a refit starts from what the request knew here
        built = self.builder.build(question, retrieved, hist, mode=mode, max_tokens=out_tokens,
                                   rerank=degrade_level < DEGRADE_NO_RERANK,
                                   retrieved_scale=0.5 if degrade_level >= DEGRADE_SMALLER_CONTEXT else 1.0,
                                   ledger=ledger, timings=timings.stages, terms=loaded.index.analyzer.terms,
                                   term_weights=loaded.index.idf)
        timings.stages["context"] = _ms(t0)
        changed = self._prefix_monitor.observe(mode, built.prompt.static_prefix, prefix_parts(self.config.prompt, mode))
        if changed is not None:  # every engine's prefix cache misses on this request
            ledger.flags.append(f"prefix_changed:{changed}")
            log.warning("static prompt prefix of mode %r changed in %s (fingerprint %s): prefix caches miss",
                        mode, changed, built.prompt.prefix_fingerprint[:12])

        # 5. route and generate, streaming
        yield ProgressEvent("generating", "")

        refits: dict[str, tuple[BuiltContext, Ledger, int]] = {}

        def refit(window: int):  # the router re-fits the context to a smaller window on fallback
            led = Ledger.from_dict(pre_build.to_dict())
            b = self.builder.build(question, retrieved, hist, mode=mode, max_tokens=out_tokens, window=window,
                                   terms=loaded.index.analyzer.terms, term_weights=loaded.index.idf,
                                   rerank=degrade_level < DEGRADE_NO_RERANK,
                                   retrieved_scale=0.5 if degrade_level >= DEGRADE_SMALLER_CONTEXT else 1.0,
                                   ledger=led)
            refits[b.prompt.text] = (b, led, window)  # the answer must describe the context that was sent
            return b.prompt

        t0 = time.perf_counter()
        if degrade_level >= DEGRADE_CACHE_OR_EXTRACTIVE:
            # Last rung before rejecting: no model at all, an extractive answer from the budgeted context.
            gs = self._extractive.stream(built.prompt, max_tokens=built.allocation.output, context=built.context,
                                         **sampling.engine_kwargs())
            rs: Any = _DegradedStream(gs)
        else:  # level 3: the smallest tier, and no escalation past it
            small = degrade_level >= DEGRADE_SMALL_MODEL
            rs = self.router.stream(built.prompt, question=question, max_tokens=built.allocation.output,
                                    context=built.context, task=task, refit=refit, escalate=escalate and not small,
                                    small=small, **sampling.engine_kwargs())
        timings.stages["route"] = _ms(t0)  # the tier plan (window checks, refits); generation starts here
        t0 = time.perf_counter()
        finished = False
        try:
            for ev in rs:
                yield ev
                if cancel is not None and cancel.is_set():
                    return
            finished = True
        finally:
            timings.stages["generate"] = _ms(t0)
            if not finished:  # consumer left or cancelled: stop the backend now, not at garbage collection
                _close(rs)
        routed = rs.routed
        assert routed is not None
        sent = routed.prompt.text if routed.prompt is not None else built.prompt.text
        if sent != built.prompt.text and sent in refits:  # refitted: ledger and context of what was sent
            built, refit_ledger, window = refits[sent]
            ledger.sections, ledger.prompt = refit_ledger.sections, refit_ledger.prompt
            ledger.flags += [f for f in refit_ledger.flags if f not in ledger.flags] + [f"refitted:window={window}"]
        ans = self._answer(question, routed, built.context, ledger, timings, t_start, built=built)
        self._store(scope, question, ans)
        self._observe(ans, tenant)
        yield FinalEvent(ans)

    def _answer(self, question: str, routed: Routed, context: list[Scored], ledger: Ledger, timings: Timings,
                t_start: float, built: BuiltContext | None) -> Answer:
        gen = routed.generation
        ledger.route = routed.decision.to_dict()
        if gen.partial:
            ledger.flags.append("partial")
        out = ledger.section("output", built.allocation.output if built else 0)
        out.used = gen.usage.completion_tokens
        if built is not None:  # what the engine reports it reused of the prompt, next to what was sent
            ledger.prompt.update({"engine_prompt_tokens": gen.usage.prompt_tokens,
                                  "engine_cached_tokens": gen.usage.cached_tokens,
                                  "engine_tokens_counted": routed.decision.prompt_tokens_counted})
        timings.ttft_ms = gen.timings.ttft_ms
        timings.itl_ms = list(gen.timings.itl_ms)
        timings.total_ms = _ms(t_start)
        cited, cite_flags = cite(gen.text, context) if context else ([], [])
        ledger.flags += cite_flags
        return Answer(question=question, answer=gen.text, citations=[s.chunk.citation() for s in cited],
                      context=list(context), ledger=ledger, usage=gen.usage, timings=timings,
                      route=routed.decision.tier, partial=gen.partial, extractive=gen.backend == "extractive",
                      finish_reason=gen.finish_reason)

    def _replay(self, ans: Answer) -> Iterator[StreamEvent]:
        """Stream a finished answer (handler or cache hit) with the same events as a fresh one."""
        for i, m in enumerate(_WORD.finditer(ans.answer)):
            yield TokenEvent(m.group(0), i)
        yield FinalEvent(ans)

    def _store(self, scope: ResponseScope, question: str, ans: Answer) -> None:
        if self.cache.response is None:
            return
        why = not_cacheable(ans, self.config)
        if why is not None:  # degraded, fallback or substitute answers are never served later as normal hits
            ans.ledger.flags.append(f"not_cached:{why}")
            return
        try:
            emb = self.embedder.embed_query(question) if self.config.cache.semantic.enabled else None
            self.cache.response.store(scope, question, ans.to_dict(), embedding=emb)
        except CacheError as err:
            log.warning("could not cache the answer: %s", err)

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

    async def astream_chunks(self, question: str, **kw: Any) -> AsyncIterator[list[StreamEvent]]:
        """Like :meth:`astream`, but each step yields every event that is ready, in order (at least one).

        A server writes each list as one chunk: tokens that arrive together (an extractive answer, a cache
        hit, a fast engine) cost one send instead of one each — the event loop of a loaded server spends
        as much time holding the GIL as the pipeline does, most of it per send (BENCHMARKS.md)."""
        loop = asyncio.get_running_loop()
        q: asyncio.Queue[Any] = asyncio.Queue()
        cancel = threading.Event()
        end = object()

        def put(item: Any) -> bool:
            try:
                loop.call_soon_threadsafe(q.put_nowait, item)
                return True
            except RuntimeError:  # the consumer's event loop is gone: stop generating
                cancel.set()
                return False

        def work() -> None:
            try:
                for ev in self.stream(question, cancel=cancel, **kw):
                    if not put(ev) or cancel.is_set():
                        break
            except BaseException as err:  # noqa: BLE001 - re-raised in the consumer
                put(err)
            put(end)

        # tracing: the caller's span (the service's request) is the parent of the query's spans
        worker = threading.Thread(target=self.tracer.bind(work), name="ragbudget-stream", daemon=True)
        worker.start()
        try:
            while True:
                items = [await q.get()]
                while not q.empty():
                    items.append(q.get_nowait())
                ready = []
                for item in items:
                    if item is end or isinstance(item, BaseException):
                        if ready:
                            yield ready
                        if item is end:
                            return
                        raise item
                    ready.append(item)
                yield ready
        finally:
            cancel.set()


class _DegradedStream:
    """A plain generator stream presented like a routed one (degrade level 4: extractive only)."""

    def __init__(self, stream: GenerationStream) -> None:
        self.stream = stream
        self.routed: Routed | None = None

    def __iter__(self) -> Iterator[TokenEvent]:
        yield from self.stream
        gen = self.stream.generation
        assert gen is not None
        self.routed = Routed(gen, RouteDecision(tier="extractive", reason="degrade level 4: extractive answer only",
                                                backend="extractive", model="extractive", usage_estimated=True))

    def close(self) -> None:
        self.stream.close()


def _close(stream: Any) -> None:
    """Stop a token stream early; generators release their backend in ``finally``."""
    close = getattr(stream, "close", None) or getattr(getattr(stream, "_it", None), "close", None)
    if close is not None:
        close()


__all__ = ["RAG"]

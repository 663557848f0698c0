"""One request's context assembly: allocate → rerank → trim → history → prompt, with the ledger filled.

``ContextBuilder(config, tokenizer, reranker).build(question, retrieved, history, mode, window=None)``
returns a :class:`BuiltContext`. The router re-fits to a smaller model by calling ``build`` again with
``window=`` (and ``output_limit=`` for that tier's max output).

:class:`ContextStage` is the pipeline's step: it builds one request's context from its
:class:`~ragbudget.stages.request.QueryRequest` (degrade plan included) and hands the router a ``refit`` that
re-builds it for a smaller window; :meth:`Fitted.sent` gives back the context of the prompt actually sent.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from ..budget.allocate import SECTIONS, allocate, lend, section_limit
from ..config import Config
from ..errors import BudgetConfigError, BudgetError, QueryError
from ..budget.history import Summarize, coerce_history, fit_history, last_answer
from ..retrieval.registry import LoadedIndex
from .prompt import PrefixMonitor, build_prompt, doc_header, prefix_parts, static_prefix
from ..retrieval.rerank import Reranker
from .request import QueryRequest
from ..kernels.tokens import Tokenizer
from ..budget.fit import plan_context
from ..budget.trim import TermsFn, WeightsFn
from ..types import Allocation, Ledger, Prompt, Scored, Timings

log = logging.getLogger("ragbudget")


@dataclass
class BuiltContext:
    """The assembled prompt, the chunks that reached it (trimmed), the allocation and the ledger."""

    prompt: Prompt
    context: list[Scored]
    allocation: Allocation
    ledger: Ledger
    question: str  # as it went into the prompt (possibly truncated)


class ContextBuilder:
    """Builds budgeted prompts for one configuration. Stateless per request; safe to share."""

    def __init__(self, config: Config, tokenizer: Tokenizer, reranker: Reranker | None = None,
                 summarize: Summarize | None = None) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.reranker = reranker
        self.summarize = summarize
        self.warnings = validate_config(config, tokenizer)
        # fixed per mode; measured once
        self._docs_overhead = tokenizer.count("<documents>\n\n</documents>") + 2

    def build(self, question: str, retrieved: Sequence[Scored], history: Sequence[Any] | None = None,
              mode: str | None = None, window: int | None = None, *, output_limit: int | None = None,
              timestamp: str | None = None, ledger: Ledger | None = None, max_tokens: int | None = None,
              rerank: bool = True, retrieved_scale: float = 1.0,
              timings: dict[str, float] | None = None, terms: TermsFn | None = None,
              term_weights: WeightsFn | None = None) -> BuiltContext:
        """Assemble the prompt for one request.

        ``window``: the target model's context window (default ``budget.context_window``);
        ``max_tokens``: requested output tokens (default the mode's), clamped to the output section and
        ``output_limit``; ``rerank=False`` skips reranking and sentence scoring (degraded mode);
        ``retrieved_scale`` shrinks the retrieved budget (e.g. 0.5 under load); ``timings`` receives ms for
        ``budget`` (allocation and history), ``rerank``, ``trim``, ``prompt``; ``terms`` / ``term_weights``: the index's analyzer and idf for
        the lexical part of sentence scores (default: the BM25 analyzer, idf over the candidates).
        """
        cfg = self.config
        timings = timings if timings is not None else {}
        t_budget = time.perf_counter()
        scorer = self.reranker if rerank else None
        if not isinstance(question, str) or not question.strip():
            raise QueryError("the question is empty", fix="pass a question with at least one word")
        mode = mode or cfg.prompt.default_mode
        prefix = static_prefix(cfg.prompt, mode)
        ledger = ledger if ledger is not None else Ledger()
        # measure demands of the fixed-size sections, allocate (a small window is not spent on what they
        # would leave unused), then lend unused budget as the policy says
        sys_used = self.tokenizer.count(prefix)
        q_tokens = self.tokenizer.count(question) + 4  # "Question: " label
        hist_full = fit_history(history, 10 ** 9, self.tokenizer, cfg.trim)  # validates and measures
        base = allocate(cfg.budget, window=window, output_tokens=max_tokens or cfg.prompt.modes[mode].max_tokens,
                        output_limit=output_limit,
                        needs={"history": hist_full.used, "system": sys_used, "question": q_tokens})
        if sys_used > base.system:
            raise BudgetError(f"the static prompt prefix needs {sys_used} tokens, over the system budget "
                              f"of {base.system}", fix="shorten prompt.system/policies/few_shot or raise "
                                                       "budget.system.cap")
        if not 0 <= retrieved_scale <= 1:
            raise BudgetError(f"retrieved_scale must be in [0, 1], got {retrieved_scale}",
                              fix="pass a share between 0 and 1 (0.5 halves the retrieved budget)")
        base = replace(base, retrieved=int(base.retrieved * retrieved_scale))
        alloc = lend(base, {"system": sys_used, "question": min(q_tokens, base.question),
                            "history": hist_full.used, "output": base.output}, cfg.budget.lend)
        for name in SECTIONS:
            ledger.section(name, getattr(alloc, name))
        s = ledger.section("system", alloc.system)
        s.budget, s.used, s.items_in, s.stop = alloc.system, sys_used, 1, "exhausted"
        # question: never dropped, truncated when over its budget
        qs = ledger.section("question", alloc.question)
        qs.budget = alloc.question
        if q_tokens > alloc.question:
            if cfg.budget.strict:
                raise BudgetError(f"the question has {q_tokens} tokens, over its budget of {alloc.question}",
                                  fix="shorten the question or raise budget.question.cap")
            question = self.tokenizer.truncate(question, max(alloc.question - 4, 1))
            ledger.flags.append("question_truncated")
            qs.notes.append(f"question truncated from {q_tokens} to {alloc.question} tokens")
            q_tokens = self.tokenizer.count(question) + 4
        qs.used, qs.items_in = q_tokens, 1
        qs.stop = "budget" if "question_truncated" in ledger.flags else "exhausted"
        # history
        hist = fit_history(history, alloc.history, self.tokenizer, cfg.trim, query=question,
                           summarize=self.summarize)
        hs = ledger.section("history", alloc.history)
        hs.budget, hs.used, hs.items_in = alloc.history, hist.used, len(hist.messages)
        hs.stop = "budget" if hist.dropped or hist.compressed else "exhausted"
        hs.dropped.extend(hist.dropped)
        hs.compressed.extend(hist.compressed)
        hs.notes.extend(hist.notes)
        # retrieved: the history's leftover goes to retrieved only when policy says so (already lent)
        rs = ledger.section("retrieved", alloc.retrieved)
        rs.budget = alloc.retrieved
        items = self._clean(retrieved, rs.notes, rs.dropped)
        timings["budget"] = (time.perf_counter() - t_budget) * 1000
        fit = plan_context(question, items, self.tokenizer, scorer, cfg, terms=terms, term_weights=term_weights,
                           previous_answer=last_answer(hist_full.messages))
        ranked = fit.ranked
        timings["rerank"] = fit.rerank_ms
        rs.dropped.extend(ranked.dropped)
        overhead = max(self.tokenizer.count(doc_header(len(ranked.kept) or 1, s)) for s in ranked.kept) + 2 \
            if ranked.kept else 0
        room = max(alloc.retrieved - self._docs_overhead, 0)
        t0 = time.perf_counter()
        trimmed = fit.pack(room, overhead_per_chunk=overhead)
        rs.stop = trimmed.stop
        if trimmed.stop_note:
            rs.notes.append(trimmed.stop_note)
        timings["trim"] = fit.plan_ms + (time.perf_counter() - t0) * 1000
        rs.dropped.extend(trimmed.dropped)
        rs.compressed.extend(trimmed.compressed)
        if not trimmed.kept:
            rs.notes.append("no documents reached the prompt" + (" (retrieval was empty)" if not items else ""))
        t0 = time.perf_counter()
        prompt = build_prompt(cfg.prompt, self.tokenizer, question=question, context=trimmed.kept,
                              history=hist.messages, mode=mode, timestamp=timestamp, layout=cfg.prompt.layout)
        timings["prompt"] = (time.perf_counter() - t0) * 1000
        rs.used = trimmed.used + (self._docs_overhead if trimmed.kept else 0)
        rs.items_in = len(trimmed.kept)
        os_ = ledger.section("output", alloc.output)
        os_.budget, os_.notes = alloc.output, [f"mode {mode!r}: max_tokens {alloc.output}"]
        os_.stop = "cap"
        ledger.prompt.update({"fingerprint": prompt.prefix_fingerprint,
                              "static_prefix_tokens": prompt.static_prefix_tokens,
                              "total_tokens": prompt.total_tokens, "version": cfg.prompt.version,
                              "mode": mode, "window": alloc.window})
        if prompt.total_tokens + alloc.output > alloc.window:
            ledger.flags.append("over_window")
        return BuiltContext(prompt=prompt, context=trimmed.kept, allocation=alloc, ledger=ledger,
                            question=question)

    @staticmethod
    def _clean(retrieved: Sequence[Scored] | None, notes: list[str], dropped: list[dict[str, Any]]) -> list[Scored]:
        """Drop non-text chunks (with a ledger entry) and exact duplicates by chunk id."""
        out, seen = [], set()
        for s in retrieved or []:
            if not isinstance(s, Scored):
                raise QueryError(f"retrieved items must be Scored, got {type(s).__name__}",
                                 fix="pass the retriever's results (ragbudget.types.Scored) to build()")
            if not isinstance(s.chunk.text, str):
                dropped.append({"chunk_id": s.chunk.id, "reason": "non-text content"})
                continue
            if not s.chunk.text.strip():
                dropped.append({"chunk_id": s.chunk.id, "reason": "empty text"})
                continue
            if s.chunk.id in seen:
                continue
            seen.add(s.chunk.id)
            out.append(s)
        return out


def validate_config(config: Config, tokenizer: Tokenizer) -> list[str]:
    """Checks that need the tokenizer, run once when a builder is made (startup, not per request).

    Raises :class:`BudgetConfigError` when a mode's static prompt prefix exceeds the system budget;
    returns warnings (e.g. a mode's max_tokens above the output cap, which will be clamped).
    """
    b = config.budget
    sys_limit = section_limit(b.system, b.context_window)
    out_limit = section_limit(b.output, b.context_window)
    warnings = []
    for mode, mc in config.prompt.modes.items():
        n = tokenizer.count(static_prefix(config.prompt, mode))
        if n > sys_limit:
            raise BudgetConfigError(f"prompt for mode {mode!r} needs {n} tokens, over budget.system "
                                    f"({sys_limit})", fix="shorten prompt.system/policies/few_shot/fixed_docs "
                                                          "or raise budget.system.cap")
        if mc.max_tokens > out_limit:
            warnings.append(f"prompt.modes.{mode}.max_tokens={mc.max_tokens} is above budget.output "
                            f"({out_limit}); it will be clamped")
    return warnings


__all__ = ["BuiltContext", "ContextBuilder", "coerce_history", "validate_config"]


@dataclass
class Fitted:
    """One request's built context, and how to re-fit it to a smaller window (the router's ``refit``)."""

    built: BuiltContext
    _rebuild: Callable[[int, Ledger], BuiltContext]
    _before: Ledger  # the ledger as the request knew it before the build: each refit starts from it
    _refits: dict[str, tuple[BuiltContext, Ledger, int]] = field(default_factory=dict)

    def refit(self, window: int) -> Prompt:
        led = Ledger.from_dict(self._before.to_dict())
        b = self._rebuild(window, led)
        self._refits[b.prompt.text] = (b, led, window)  # the answer must describe the context that was sent
        return b.prompt

    def sent(self, prompt: Prompt | None, ledger: Ledger) -> BuiltContext:
        """The context of the prompt that was sent; when it was a refit, ``ledger`` takes that build's sections."""
        if prompt is None or prompt.text == self.built.prompt.text or prompt.text not in self._refits:
            return self.built
        built, led, window = self._refits[prompt.text]
        ledger.sections, ledger.prompt = led.sections, led.prompt
        ledger.flags += [f for f in led.flags if f not in ledger.flags] + [f"refitted:window={window}"]
        return built


class ContextStage:
    """rerank → budget → trim → history → prompt for one request, and the static-prefix watch."""

    def __init__(self, config: Config, builder: Callable[[], ContextBuilder]) -> None:
        self.config = config
        self._builder = builder
        self._prefixes = PrefixMonitor()

    def build(self, req: QueryRequest, loaded: LoadedIndex, retrieved: Sequence[Scored], ledger: Ledger,
              timings: Timings) -> Fitted:
        builder = self._builder()
        kw: dict[str, Any] = dict(mode=req.mode, max_tokens=req.out_tokens, rerank=req.degrade.rerank,
                                  retrieved_scale=req.degrade.retrieved_scale, terms=loaded.index.analyzer.terms,
                                  term_weights=loaded.index.idf)
        t0 = time.perf_counter()
        before = Ledger.from_dict(ledger.to_dict())
        built = builder.build(req.question, retrieved, req.history, ledger=ledger, timings=timings.stages, **kw)
        timings.stages["context"] = (time.perf_counter() - t0) * 1000.0
        changed = self._prefixes.observe(req.mode, built.prompt.static_prefix, prefix_parts(self.config.prompt, req.mode))
        if changed is not None:  # every engine's prefix cache misses on this request
            ledger.flags.append(f"prefix_changed:{changed}")
            log.warning("static prompt prefix of mode %r changed in %s (fingerprint %s): prefix caches miss",
                        req.mode, changed, built.prompt.prefix_fingerprint[:12])

        def rebuild(window: int, led: Ledger) -> BuiltContext:
            return builder.build(req.question, retrieved, req.history, window=window, ledger=led, **kw)

        return Fitted(built, rebuild, before)

"""Dataclasses passed between stages.

Values that flow through the pipeline are frozen; the :class:`Ledger` is the one record that stages
append to while a request is in flight (it is owned by that request only).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Mapping

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True)
class Document:
    """A source document before chunking. ``id`` is stable (source path or record id)."""

    id: str
    text: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Chunk:
    """A piece of a document. ``id`` is a content hash: the same text in the same place keeps its id."""

    id: str
    doc_id: str
    text: str
    position: int = 0
    n_tokens: int = 0
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def source(self) -> str:
        return str(self.metadata.get("source", self.doc_id))

    @property
    def title(self) -> str:
        return str(self.metadata.get("title", ""))

    def citation(self) -> "Citation":
        return Citation(chunk_id=self.id, doc_id=self.doc_id, source=self.source, title=self.title,
                        position=self.position)


@dataclass(frozen=True)
class Citation:
    chunk_id: str
    doc_id: str
    source: str
    title: str = ""
    position: int = 0


@dataclass(frozen=True)
class Scored:
    """A chunk with the scores it collected on the way (None where a stage did not score it)."""

    chunk: Chunk
    score: float
    dense_score: float | None = None
    sparse_score: float | None = None
    fused_score: float | None = None
    rerank_score: float | None = None
    dense_rank: int | None = None
    sparse_rank: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "chunk_id": self.chunk.id, "doc_id": self.chunk.doc_id, "source": self.chunk.source,
            "title": self.chunk.title, "position": self.chunk.position, "text": self.chunk.text,
            "score": self.score, "dense_score": self.dense_score, "sparse_score": self.sparse_score,
            "fused_score": self.fused_score, "rerank_score": self.rerank_score,
        }


@dataclass(frozen=True)
class Message:
    role: Role
    content: str

    def to_openai(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True)
class Allocation:
    """Token budget per section for one request; the sum never exceeds ``window``."""

    window: int
    system: int
    history: int
    retrieved: int
    question: int
    output: int

    @property
    def input_total(self) -> int:
        return self.system + self.history + self.retrieved + self.question

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass
class SectionLedger:
    """What one budget section got, used, and lost."""

    budget: int
    used: int = 0
    items_in: int = 0
    dropped: list[dict[str, Any]] = field(default_factory=list)
    compressed: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # why the section holds what it holds, e.g. "evidence" (retrieved: the evidence ran out before the
    # budget), "budget" (the budget was full), "exhausted" (everything available fit), "cap" (output)
    stop: str = ""


@dataclass
class Ledger:
    """Per-request account: budgets and usage per section, route, cache layer, timings.

    Readable in a notebook (``_repr_html_``) and serialisable (``to_dict`` / ``to_json``).
    """

    sections: dict[str, SectionLedger] = field(default_factory=dict)
    route: dict[str, Any] = field(default_factory=dict)
    cache_layer: str | None = None
    degrade_level: int = 0
    flags: list[str] = field(default_factory=list)
    prompt: dict[str, Any] = field(default_factory=dict)
    # a cache hit: the model usage and cost the stored answer took, not spent again (usage is then zero)
    saved: dict[str, Any] = field(default_factory=dict)

    def section(self, name: str, budget: int = 0) -> SectionLedger:
        if name not in self.sections:
            self.sections[name] = SectionLedger(budget=budget)
        return self.sections[name]

    def to_dict(self) -> dict[str, Any]:
        return {
            "sections": {k: asdict(v) for k, v in self.sections.items()},
            "route": dict(self.route),
            "cache_layer": self.cache_layer,
            "degrade_level": self.degrade_level,
            "flags": list(self.flags),
            "prompt": dict(self.prompt),
            "saved": dict(self.saved),
        }

    def to_json(self, **kw: Any) -> str:
        return json.dumps(self.to_dict(), default=str, **kw)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Ledger":
        return cls(
            sections={k: SectionLedger(**v) for k, v in d.get("sections", {}).items()},
            route=dict(d.get("route", {})), cache_layer=d.get("cache_layer"),
            degrade_level=int(d.get("degrade_level", 0)), flags=list(d.get("flags", [])),
            prompt=dict(d.get("prompt", {})), saved=dict(d.get("saved", {})),
        )

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{n}</td><td>{s.budget}</td><td>{s.used}</td><td>{s.items_in}</td>"
            f"<td>{len(s.dropped)}</td><td>{len(s.compressed)}</td><td>{s.stop}</td></tr>"
            for n, s in self.sections.items())
        return ("<table><tr><th>section</th><th>budget</th><th>used</th><th>items</th><th>dropped</th>"
                f"<th>compressed</th><th>stopped</th></tr>{rows}</table><p>route: {self.route} · cache: {self.cache_layer}"
                f" · degrade level: {self.degrade_level}</p>")


@dataclass(frozen=True)
class Prompt:
    """An assembled prompt: chat messages plus a plain rendering and prefix facts."""

    messages: tuple[Message, ...]
    text: str
    static_prefix: str
    static_prefix_tokens: int
    prefix_fingerprint: str
    total_tokens: int

    def openai_messages(self) -> list[dict[str, str]]:
        return [m.to_openai() for m in self.messages]


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class Timings:
    """Milliseconds per stage, plus time to first token and inter-token latencies. ``load_ms``: models the
    query had to load first (a :class:`~ragbudget.pipeline.RAG` not warmed up), before its clock started: not in
    ``total_ms`` nor in any stage."""

    stages: dict[str, float] = field(default_factory=dict)
    ttft_ms: float | None = None
    itl_ms: list[float] = field(default_factory=list)
    total_ms: float = 0.0
    load_ms: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"stages": dict(self.stages), "ttft_ms": self.ttft_ms, "itl_ms": list(self.itl_ms),
                "total_ms": self.total_ms, "load_ms": self.load_ms}


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters a request passes to the generation engine (None: the engine's default).

    The extractive backend accepts and ignores them (it samples nothing); ``stop`` it honours. Every field
    is part of the response-cache key, so an answer made with one setting is never served for another."""

    temperature: float = 0.0
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None

    def engine_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for a generator: temperature and stop always, top_p and seed when set (so a
        generator written before they existed still works for requests that do not use them)."""
        kw: dict[str, Any] = {"temperature": self.temperature, "stop": list(self.stop) or None}
        if self.top_p is not None:
            kw["top_p"] = self.top_p
        if self.seed is not None:
            kw["seed"] = self.seed
        return kw


@dataclass(frozen=True)
class Generation:
    text: str
    usage: Usage
    timings: Timings
    model: str = ""
    backend: str = ""
    finish_reason: str = "stop"
    partial: bool = False
    usage_estimated: bool = False  # the engine reported no usage: these counts are ragbudget's


@dataclass(frozen=True)
class TokenEvent:
    """One streamed piece of an answer."""

    text: str
    index: int


@dataclass
class Answer:
    """What a query returns: the answer with its citations, ledger, usage, timings and route."""

    question: str
    answer: str
    citations: list[Citation] = field(default_factory=list)
    context: list[Scored] = field(default_factory=list)
    ledger: Ledger = field(default_factory=Ledger)
    usage: Usage = field(default_factory=Usage)
    timings: Timings = field(default_factory=Timings)
    route: str = ""
    cache_layer: str | None = None
    partial: bool = False
    extractive: bool = False
    finish_reason: str = "stop"  # the generation's: "length" when the output hit its cap

    def to_dict(self) -> dict[str, Any]:
        return {
            "question": self.question, "answer": self.answer,
            "citations": [asdict(c) for c in self.citations],
            "context": [s.to_dict() for s in self.context],
            "ledger": self.ledger.to_dict(),
            "usage": {**asdict(self.usage), "total_tokens": self.usage.total_tokens},
            "timings": self.timings.to_dict(), "route": self.route, "cache_layer": self.cache_layer,
            "partial": self.partial, "extractive": self.extractive, "finish_reason": self.finish_reason,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, cache_layer: str | None = None) -> "Answer":
        """Inverse of :meth:`to_dict` — the one Answer codec (the response caches serve answers with it).

        ``cache_layer`` (e.g. ``"exact"``) marks where a served record came from, on the answer and its
        ledger. The context keeps what ``Scored.to_dict`` records (ids, text, source, title, position,
        scores); ranks, token counts and other chunk metadata are not part of the record."""
        def scored(x: Mapping[str, Any]) -> Scored:
            meta = {"source": x.get("source", x["doc_id"]), "title": x.get("title", "")}
            chunk = Chunk(id=x["chunk_id"], doc_id=x["doc_id"], text=x.get("text", ""),
                          position=int(x.get("position", 0)), metadata=meta)
            return Scored(chunk=chunk, score=float(x.get("score", 0.0)), dense_score=x.get("dense_score"),
                          sparse_score=x.get("sparse_score"), fused_score=x.get("fused_score"),
                          rerank_score=x.get("rerank_score"))
        t = d.get("timings") or {}
        u = d.get("usage") or {}
        ledger = Ledger.from_dict(d.get("ledger") or {})
        layer = cache_layer if cache_layer is not None else d.get("cache_layer")
        if cache_layer is not None:
            ledger.cache_layer = cache_layer
        return cls(
            question=d.get("question", ""), answer=d.get("answer", ""),
            citations=[Citation(**c) for c in d.get("citations", [])],
            context=[scored(x) for x in d.get("context", [])],
            ledger=ledger,
            usage=Usage(prompt_tokens=int(u.get("prompt_tokens", 0)), cached_tokens=int(u.get("cached_tokens", 0)),
                        completion_tokens=int(u.get("completion_tokens", 0))),
            timings=Timings(stages=dict(t.get("stages", {})), ttft_ms=t.get("ttft_ms"), load_ms=t.get("load_ms"),
                            itl_ms=list(t.get("itl_ms", [])), total_ms=float(t.get("total_ms", 0.0))),
            route=d.get("route", ""), cache_layer=layer, partial=bool(d.get("partial", False)),
            extractive=bool(d.get("extractive", False)), finish_reason=str(d.get("finish_reason", "stop")),
        )


@dataclass(frozen=True)
class ProgressEvent:
    """A pipeline stage started (for "thinking…" indicators)."""

    stage: str
    detail: str = ""


@dataclass(frozen=True)
class FinalEvent:
    """The last event of a stream: the complete answer with ledger and metrics."""

    answer: Answer


StreamEvent = ProgressEvent | TokenEvent | FinalEvent

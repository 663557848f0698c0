"""Tuning helpers behind the notebooks: sweeps that return plain rows (lists of dicts), the Pareto front,
choosing a budget or a semantic-cache threshold, and writing a tuned config that ``ragbudget serve`` loads.

Context sweep (:func:`sweep_context`): for every question of an answers folder (DESIGN.md "answers") the
hybrid retrieval runs once; then, per setting (top-k × reranker on/off × sentence trimming on/off) and per
retrieved-context budget, the real :class:`~ragbudget.stages.context.ContextBuilder` assembles the prompt exactly
as a request with that configuration would. A row reports answer-in-context, the retrieved-section tokens
the ledger counts, and the measured context latency (retrieval + the first build of that setting, which
pays for reranking and sentence scoring; later budgets of the same setting reuse its embeddings). The
embedder's own caches work as in a service: vectors it already holds (e.g. from ingest) are reused.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import yaml

from ..config import Config, load_config
from ..stages.context import ContextBuilder
from ..embed.encoder import Embedder
from ..errors import ConfigError
from ..index import HybridIndex
from ..retrieval.rerank import Reranker, make_reranker
from ..retrieval.search import HybridRetriever
from ..kernels.stats import percentile
from ..kernels.tokens import Tokenizer
from ..types import Scored
from .answers import SEP, build_index, contains_answer, load_questions
from .cache_eval import Pair, evaluate_pairs

Row = dict[str, Any]


@dataclass(frozen=True)
class Setting:
    """One point of the non-budget grid."""

    top_k: int
    rerank: bool
    trim: bool

    @property
    def label(self) -> str:
        return f"k={self.top_k} rerank={'on' if self.rerank else 'off'} trim={'on' if self.trim else 'off'}"


def settings_grid(top_ks: Iterable[int], rerank: Iterable[bool] = (True, False),
                  trim: Iterable[bool] = (True, False)) -> list[Setting]:
    """Every combination of top-k, reranker on/off and sentence trimming on/off."""
    ks = sorted({int(k) for k in top_ks})
    if not ks or ks[0] < 1:
        raise ConfigError(f"top_ks must be positive integers, got {ks}")
    return [Setting(k, r, t) for k in ks for r in dict.fromkeys(rerank) for t in dict.fromkeys(trim)]


def tuned_overrides(base: Config, *, budget: int, top_k: int, rerank: bool, trim: bool) -> dict[str, Any]:
    """Dotted-key overrides that give ``base`` this retrieved budget, top-k, reranker and trimming.

    The retrieved section gets ``budget`` as an absolute cap and stops borrowing unused history/question
    budget (lending into it would make the real context larger than the measured one).
    """
    kind = base.rerank.kind if base.rerank.kind != "none" else "bi-encoder"
    return {"budget.retrieved.cap": int(budget), "budget.retrieved.ratio": None,
            "budget.lend": [list(p) for p in base.budget.lend if p[1] != "retrieved"],
            "retrieval.top_k": int(top_k), "rerank.top_n": int(top_k),
            "rerank.kind": kind if rerank else "none", "trim.sentence_selection": bool(trim)}


def tuned_config(base: Config, row: Mapping[str, Any]) -> Config:
    """``base`` with the budget and setting of a sweep row (see :func:`tuned_overrides`)."""
    return base.with_overrides(tuned_overrides(base, budget=row["budget"], top_k=row["top_k"],
                                               rerank=row["rerank"], trim=row["trim"]))


def changed_keys(cfg: Config, base: Config | None = None) -> dict[str, Any]:
    """The nested part of ``cfg`` that differs from ``base`` (default: the built-in defaults)."""
    def diff(a: Any, b: Any) -> Any:
        if isinstance(a, dict) and isinstance(b, dict):
            out = {k: d for k in a if (d := diff(a[k], b.get(k, _MISSING))) is not _MISSING}
            return out or _MISSING
        return _MISSING if a == b else a
    got = diff(cfg.model_dump(mode="json"), (base or Config()).model_dump(mode="json"))
    return {} if got is _MISSING else got


_MISSING: Any = object()


def write_config(cfg: Config, path: str | Path) -> Config:
    """Write the keys of ``cfg`` that differ from the defaults as YAML at ``path`` (folders created), so
    the file stays valid as defaults change, and return it re-read with ``load_config`` (environment
    ignored): a file that ``ragbudget serve --config`` would reject fails here."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(yaml.safe_dump(changed_keys(cfg), sort_keys=False), encoding="utf-8")
    return load_config(p, environ={})


class _MemoEmbedder:
    """Remembers ``embed`` rows by text for one question and setting (later budgets reuse them)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dim = inner.dim
        self._rows: dict[str, np.ndarray] = {}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        todo = list(dict.fromkeys(t for t in texts if t not in self._rows))
        if todo:
            self._rows.update(zip(todo, self.inner.embed(todo)))
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._rows[t] for t in texts]).astype(np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed_query(text)


_percentile = percentile  # the one definition (ragbudget.kernels.stats)


def sweep_context(folder: str | Path, base: Config, embedder: Embedder, *, budgets: Sequence[int],
                  top_ks: Sequence[int], rerank: Sequence[bool] = (True, False), trim: Sequence[bool] = (True, False),
                  limit: int | None = None, index: HybridIndex | None = None,
                  progress: Callable[[int, int], None] | None = None) -> list[Row]:
    """One row per (setting, budget): answer-in-context, retrieved tokens (mean, P95) and context latency
    (retrieval + first build, P50/P95 ms) over the answerable questions of ``folder``.

    ``index``: a ready index of ``folder/corpus.jsonl`` (default: built in memory with ``base``'s chunking).
    """
    if not budgets or min(budgets) < 1:
        raise ConfigError(f"budgets must be positive token counts, got {list(budgets)}")
    grid = settings_grid(top_ks, rerank, trim)
    budgets = sorted({int(b) for b in budgets})
    configs = {(s, b): base.with_overrides(tuned_overrides(base, budget=b, top_k=s.top_k, rerank=s.rerank,
                                                           trim=s.trim)) for s in grid for b in budgets}
    tok = Tokenizer(base.tokenizer.encoding)
    questions = load_questions(folder, limit)
    index = index if index is not None else build_index(folder, base, embedder)
    retriever = HybridRetriever(index, base.retrieval, embedder)
    shared: dict[bool, Reranker | None] = {}
    if base.rerank.kind == "cross-encoder":  # a model load per question would dominate: load it once
        shared[True] = make_reranker(base.rerank, embedder)
    hits: dict[tuple[Setting, int], list[bool]] = {}
    toks: dict[tuple[Setting, int], list[int]] = {}
    lat: dict[Setting, list[float]] = {}
    kmax = max(s.top_k for s in grid)
    try:
        for qi, q in enumerate(questions):
            t0 = time.perf_counter()
            found = retriever.retrieve(q["text"], k=kmax)
            retrieve_ms = (time.perf_counter() - t0) * 1000
            for s in grid:
                cands: list[Scored] = found[:s.top_k]
                reranker = None
                if s.rerank:
                    reranker = shared.get(True) or make_reranker(configs[(s, budgets[0])].rerank,
                                                                 _MemoEmbedder(embedder))
                for bi, b in enumerate(budgets):
                    builder = ContextBuilder(configs[(s, b)], tok, reranker)
                    t1 = time.perf_counter()
                    built = builder.build(q["text"], cands)
                    if bi == 0:
                        lat.setdefault(s, []).append(retrieve_ms + (time.perf_counter() - t1) * 1000)
                    text = SEP.join(c.chunk.text for c in built.context)
                    hits.setdefault((s, b), []).append(contains_answer(text, q["answers"]))
                    toks.setdefault((s, b), []).append(built.ledger.sections["retrieved"].used)
            if progress:
                progress(qi + 1, len(questions))
    finally:
        retriever.close()
    rows: list[Row] = []
    for s in grid:
        for b in budgets:
            h, t, la = hits.get((s, b), []), toks.get((s, b), []), lat.get(s, [])
            rows.append({"label": s.label, "top_k": s.top_k, "rerank": s.rerank, "trim": s.trim, "budget": b,
                         "questions": len(h), "answer_in_context": round(float(np.mean(h)), 4) if h else 0.0,
                         "context_tokens_mean": round(float(np.mean(t)), 1) if t else 0.0,
                         "context_tokens_p95": round(_percentile(t, 95), 1),
                         "latency_ms_p50": round(_percentile(la, 50), 2),
                         "latency_ms_p95": round(_percentile(la, 95), 2)})
    return rows


def subset_answers(folder: str | Path, out: str | Path, *, questions: int, distractors: int = 0,
                   per_question: int = 2) -> Path:
    """Write a small answers folder at ``out``: the first ``questions`` answerable questions, up to
    ``per_question`` paragraphs that contain one of each question's answers, and ``distractors`` other
    paragraphs (for quick runs and tests). Returns ``out``."""
    src, dst = Path(folder), Path(out)
    qs = load_questions(src, questions)
    corpus = [json.loads(line) for line in (src / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
              if line.strip()]
    keep: dict[int, None] = {}
    for q in qs:
        found = [i for i, d in enumerate(corpus) if contains_answer(str(d.get("text", "")), q["answers"])]
        keep.update(dict.fromkeys(found[:per_question]))
    others = [i for i in range(len(corpus)) if i not in keep][:max(distractors, 0)]
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "corpus.jsonl").write_text("".join(json.dumps(corpus[i]) + "\n" for i in sorted([*keep, *others])),
                                      encoding="utf-8")
    (dst / "questions.jsonl").write_text(
        "".join(json.dumps({"_id": q["id"], "text": q["text"], "answers": q["answers"]}) + "\n" for q in qs),
        encoding="utf-8")
    return dst


def pareto_front(rows: Sequence[Mapping[str, Any]], x: str, y: str) -> list[dict[str, Any]]:
    """Rows not dominated when ``x`` is a cost (lower is better) and ``y`` a quality (higher is better),
    sorted by ``x``. Among exact ties the first row is kept."""
    out: list[dict[str, Any]] = []
    best_y = -np.inf
    for r in sorted(rows, key=lambda r: (r[x], -r[y])):
        if r[y] > best_y:
            out.append(dict(r))
            best_y = r[y]
    return out


def choose_point(rows: Sequence[Mapping[str, Any]], *, x: str = "context_tokens_mean", y: str = "answer_in_context",
                 tolerance: float = 0.01, min_y: float | None = None) -> dict[str, Any]:
    """The cheapest Pareto point whose ``y`` is within ``tolerance`` of the best (or at least ``min_y``
    when given). Raises :class:`~ragbudget.errors.ConfigError` when no row reaches ``min_y``."""
    if not rows:
        raise ConfigError("no sweep rows to choose from", fix="run the sweep first")
    front = pareto_front(rows, x, y)
    need = min_y if min_y is not None else front[-1][y] - tolerance
    for r in front:
        if r[y] >= need:
            return r
    raise ConfigError(f"no setting reaches {y} ≥ {need} (best {front[-1][y]})",
                      fix="lower the target or sweep larger budgets / top-k")


def sweep_thresholds(pairs: Sequence[Pair], embedder: Embedder, thresholds: Sequence[float], *,
                     guards: Sequence[bool] = (True, False), base: Config | None = None) -> list[Row]:
    """Hit rate (label-1 pairs) and false-hit rate (label-0 pairs) per threshold, with the lexical guards
    on and off, through the real semantic cache (:func:`~ragbudget.eval.cache_eval.evaluate_pairs`)."""
    sem = (base or Config()).cache.semantic
    memo = _MemoEmbedder(embedder)  # each text is embedded once, not once per guard setting
    rows: list[Row] = []
    for g in guards:
        rows += evaluate_pairs(pairs, memo, sem.model_copy(update={"guards": bool(g)}), thresholds=thresholds)
    return rows


def choose_threshold(rows: Sequence[Mapping[str, Any]], target_false_hit_rate: float, *,
                     guards: bool | None = True, hit_tolerance: float = 0.0) -> dict[str, Any]:
    """Among rows whose false-hit rate is at most the target, the highest (safest) threshold whose hit rate
    is within ``hit_tolerance`` of the best such row. ``guards=None`` considers rows with and without
    the lexical guards. Raises :class:`~ragbudget.errors.ConfigError` when no row meets the target."""
    if not 0 <= target_false_hit_rate <= 1:
        raise ConfigError(f"target false-hit rate must be in [0, 1], got {target_false_hit_rate}")
    ok = [r for r in rows if (guards is None or r["guards"] == guards) and r["false_hit_rate"] <= target_false_hit_rate]
    if not ok:
        raise ConfigError(f"no threshold keeps the false-hit rate at or under {target_false_hit_rate:.2%}",
                          fix="sweep thresholds closer to 1.0 or raise the target")
    best = max(r["hit_rate"] for r in ok)
    near = [r for r in ok if r["hit_rate"] >= best - max(hit_tolerance, 0.0) - 1e-12]
    return dict(max(near, key=lambda r: (r["threshold"], r["hit_rate"])))


def cache_overrides(row: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted-key overrides that apply a :func:`choose_threshold` row to a config."""
    return {"cache.semantic.threshold": float(row["threshold"]), "cache.semantic.guards": bool(row["guards"])}


__all__ = ["Row", "Setting", "cache_overrides", "choose_point", "choose_threshold", "pareto_front",
           "settings_grid", "subset_answers", "sweep_context", "sweep_thresholds", "tuned_config", "tuned_overrides",
           "write_config"]

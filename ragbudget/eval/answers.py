"""Answer-in-context evaluation: does the budgeted retrieved context contain a gold answer?

Layout (DESIGN.md "answers"): ``DIR/corpus.jsonl`` (``_id``, ``title``, ``text``) and
``DIR/questions.jsonl`` (``_id``, ``text``, ``answers``). The corpus is indexed with the project's own
ingest + :class:`~ragbudget.index.HybridIndex` (in memory), retrieved with
:class:`~ragbudget.retrieval.search.HybridRetriever`, reranked and trimmed exactly as a request would be. For
every budget the same run also measures a dense top-k baseline: the dense ranking's whole chunks, taken
in order while they fit the same token budget.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..config import Config
from ..embed.encoder import Embedder
from ..errors import IngestError
from ..index import HybridIndex
from ..ingest import load_path
from ..retrieval.rerank import Reranker
from ..retrieval.search import HybridRetriever
from ..kernels.stats import percentile
from ..kernels.tokens import Tokenizer
from ..budget.fit import plan_context
from ..types import Scored

SEP = "\n\n"


@dataclass
class BudgetResult:
    """Figures for one budget (and method)."""

    method: str
    budget: int
    questions: int
    answer_in_context: float
    context_tokens_mean: float
    context_tokens_p95: float

    def as_dict(self) -> dict[str, Any]:
        return {"method": self.method, "budget": self.budget, "questions": self.questions,
                "answer_in_context": round(self.answer_in_context, 4),
                "context_tokens_mean": round(self.context_tokens_mean, 1),
                "context_tokens_p95": round(self.context_tokens_p95, 1)}


@dataclass
class AnswersReport:
    results: list[BudgetResult] = field(default_factory=list)
    chunks: int = 0
    retriever: str = ""

    def budgeted(self) -> list[BudgetResult]:
        return [r for r in self.results if r.method == "budgeted"]


def load_questions(folder: str | Path, limit: int | None = None) -> list[dict[str, Any]]:
    """Questions with at least one answer string (the answerable ones); ``supporting`` (corpus ids of the
    paragraphs a multi-hop question needs) is kept when the set lists it."""
    path = Path(folder) / "questions.jsonl"
    if not path.is_file() or not (Path(folder) / "corpus.jsonl").is_file():
        raise IngestError(f"{folder} is not an answers folder (needs corpus.jsonl and questions.jsonl)",
                          fix="see the 'answers' layout in DESIGN.md")
    out = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                q = json.loads(line)
            except json.JSONDecodeError as err:
                raise IngestError(f"{path}:{n}: not JSON ({err})") from None
            answers = [a for a in q.get("answers", []) if isinstance(a, str) and a.strip()]
            if isinstance(q.get("text"), str) and q["text"].strip() and answers:
                rec: dict[str, Any] = {"id": q.get("_id"), "text": q["text"], "answers": answers}
                if isinstance(q.get("supporting"), list):  # multi-hop sets: the paragraphs it needs
                    rec["supporting"] = [str(s) for s in q["supporting"]]
                out.append(rec)
    return out[:limit] if limit else out


def build_index(folder: str | Path, cfg: Config, embedder: Embedder) -> HybridIndex:
    """An in-memory hybrid index of ``folder/corpus.jsonl`` (nothing is written)."""
    docs, _ = load_path(str(Path(folder) / "corpus.jsonl"))
    with tempfile.TemporaryDirectory() as tmp:
        icfg = cfg.with_overrides({"index.dir": tmp})
        index = HybridIndex.create("eval-answers", icfg, model_id=embedder.model_id, dim=embedder.dim)
        index.add_documents(docs, embedder, save=False)
    return index


def contains_answer(text: str, answers: Sequence[str]) -> bool:
    low = text.lower()
    return any(a.lower() in low for a in answers)


def dense_top_k(items: Sequence[Scored], budget: int, tokenizer: Tokenizer) -> list[str]:
    """Whole chunks in ranking order while the joined context stays within ``budget`` tokens."""
    out: list[str] = []
    used = 0
    for s in items:
        n = tokenizer.count(s.chunk.text) + (tokenizer.count(SEP) if out else 0)
        if used + n > budget:
            break
        out.append(s.chunk.text)
        used += n
    return out


def evaluate_answers(folder: str | Path, cfg: Config, embedder: Embedder, reranker: Reranker | None,
                     budgets: Sequence[int], *, limit: int | None = None, candidates: int | None = None,
                     baseline: bool = True, progress: Callable[[int, int], None] | None = None) -> AnswersReport:
    """Measure answer-in-context and context tokens for each budget (and the dense baseline)."""
    tok = Tokenizer(cfg.tokenizer.encoding)
    questions = load_questions(folder, limit)
    index = build_index(folder, cfg, embedder)
    retriever = HybridRetriever(index, cfg.retrieval, embedder)
    k = candidates or max(cfg.retrieval.top_k, cfg.rerank.top_n)  # what a request retrieves
    hits: dict[tuple[str, int], list[bool]] = {}
    toks: dict[tuple[str, int], list[int]] = {}
    try:
        for qi, q in enumerate(questions):
            found = retriever.retrieve(q["text"], k=k)
            plan = plan_context(q["text"], found, tok, reranker, cfg, terms=index.sparse.analyzer.terms,
                                term_weights=index.sparse.idf)
            dense = retriever.retrieve(q["text"], k=k, mode="dense") if baseline else []
            for b in budgets:
                res = plan.pack(b)
                text = SEP.join(s.chunk.text for s in res.kept)
                hits.setdefault(("budgeted", b), []).append(contains_answer(text, q["answers"]))
                toks.setdefault(("budgeted", b), []).append(tok.count(text))
                if baseline:
                    dtext = SEP.join(dense_top_k(dense, b, tok))
                    hits.setdefault(("dense top-k", b), []).append(contains_answer(dtext, q["answers"]))
                    toks.setdefault(("dense top-k", b), []).append(tok.count(dtext))
            if progress:
                progress(qi + 1, len(questions))
    finally:
        retriever.close()
    report = AnswersReport(chunks=len(index), retriever=f"HybridRetriever({cfg.retrieval.mode}) top {k}")
    for (method, b), h in hits.items():
        t = np.asarray(toks[(method, b)], dtype=float)
        report.results.append(BudgetResult(method=method, budget=b, questions=len(h),
                                           answer_in_context=float(np.mean(h)) if h else 0.0,
                                           context_tokens_mean=float(t.mean()) if len(t) else 0.0,
                                           context_tokens_p95=percentile(t, 95)))
    report.results.sort(key=lambda r: (r.method != "budgeted", r.budget))
    return report

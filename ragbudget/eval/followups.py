"""Follow-up questions on CANARD: retrieval with the raw question, the condensed query and the human rewrite.

CANARD (QuAC dialogs) gives, per turn, the conversation so far, the question as asked ("Why did they break
up?") and a human self-contained rewrite ("Why did Zappa and the Mothers of Invention break up?"). The
answer to turn *n* is the last history entry of turn *n + 1*. This evaluation builds a corpus with one
document per dialog — its title and section, then every answer of the dialog in order, so the distractors
are answers about the same subject — and, for each answerable follow-up, retrieves with three queries:

- ``raw``: the question as asked;
- ``condensed``: :func:`ragbudget.stages.condense.condense` over the history (what the pipeline retrieves with);
- ``gold``: the human rewrite (an upper bound).

Reported per query kind: recall@k (a retrieved chunk holds the answer's first sentence) and
answer-in-context (the budgeted context, built as a request would, holds it).

    ragbudget eval followups ../shared/data/canard --limit 600
"""

from __future__ import annotations

import json
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Sequence

from ..stages.condense import condense
from ..config import Config
from ..embed.encoder import Embedder
from ..retrieval.rerank import Reranker
from ..retrieval.search import HybridRetriever
from ..kernels.tokens import Tokenizer
from ..budget.fit import plan_context
from ..budget.history import last_answer
from ..kernels.sentences import split_sentences
from .answers import SEP, build_index, contains_answer
from .history_eval import as_messages, load_canard

KINDS = ("raw", "condensed", "gold")
NO_ANSWER = "CANNOTANSWER"


def followup_set(records: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(corpus records, follow-up questions) from CANARD records."""
    dialogs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        dialogs[r["QuAC_dialog_id"]].append(r)
    corpus, questions = [], []
    for did, turns in dialogs.items():
        turns.sort(key=lambda r: r["Question_no"])
        longest = max(turns, key=lambda r: len(r["History"]))["History"]
        answers = [a for a in longest[3::2] if a and a != NO_ANSWER]
        if not answers:
            continue
        corpus.append({"_id": did, "title": " — ".join(longest[:2]), "text": "\n\n".join(answers)})
        for r in turns:
            n = r["Question_no"]
            later = [t for t in turns if t["Question_no"] == n + 1]
            if n < 2 or not later:
                continue
            ans = later[0]["History"][-1]
            if not ans or ans == NO_ANSWER:
                continue
            first = (split_sentences(ans) or [ans])[0]
            questions.append({"dialog": did, "raw": r["Question"], "gold": r["Rewrite"],
                              "history": as_messages(r["History"]), "answers": [first]})
    return corpus, questions


def evaluate_followups(path: str | Path, cfg: Config, embedder: Embedder, reranker: Reranker | None, *,
                       limit: int | None = None, k: int = 10, budget: int | None = None,
                       progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    records = load_canard(path)
    corpus, questions = followup_set(records)
    if limit:
        questions = questions[:limit]  # the whole corpus stays: every other dialog is a distractor
    tok = Tokenizer(cfg.tokenizer.encoding)
    budget = budget or cfg.budget.retrieved.cap or 1000
    with tempfile.TemporaryDirectory(prefix="rb-canard-") as tmp:
        folder = Path(tmp)
        with (folder / "corpus.jsonl").open("w", encoding="utf-8") as f:
            for rec in corpus:
                f.write(json.dumps(rec) + "\n")
        (folder / "questions.jsonl").write_text("", encoding="utf-8")
        index = build_index(folder, cfg, embedder)
    retriever = HybridRetriever(index, cfg.retrieval, embedder)
    n_cand = max(cfg.retrieval.top_k, cfg.rerank.top_n)
    stats: dict[str, dict[str, list[float]]] = {kind: {"recall": [], "aic": [], "tokens": []} for kind in KINDS}
    changed = 0
    try:
        for i, q in enumerate(questions):
            c = condense(q["raw"], q["history"])
            changed += c.changed
            last = last_answer(q["history"])
            for kind, text in (("raw", q["raw"]), ("condensed", c.query), ("gold", q["gold"])):
                found = retriever.retrieve(text, k=max(k, n_cand))
                stats[kind]["recall"].append(any(contains_answer(s.chunk.text, q["answers"]) for s in found[:k]))
                plan = plan_context(text, found[:n_cand], tok, reranker, cfg, terms=index.sparse.analyzer.terms,
                                    term_weights=index.sparse.idf, previous_answer=last)
                ctx = SEP.join(s.chunk.text for s in plan.pack(budget).kept)
                stats[kind]["aic"].append(contains_answer(ctx, q["answers"]))
                stats[kind]["tokens"].append(tok.count(ctx))
            if progress:
                progress(i + 1, len(questions))
    finally:
        retriever.close()
    n = max(len(questions), 1)
    out: dict[str, Any] = {"questions": len(questions), "documents": len(corpus), "chunks": len(index),
                           "condensed_changed": round(changed / n, 3), "k": k, "budget": budget}
    for kind, s in stats.items():
        out[kind] = {f"recall@{k}": round(sum(s["recall"]) / n, 4), "answer_in_context": round(sum(s["aic"]) / n, 4),
                     "context_tokens_mean": round(sum(s["tokens"]) / n, 1)}
    return out


__all__ = ["KINDS", "evaluate_followups", "followup_set"]

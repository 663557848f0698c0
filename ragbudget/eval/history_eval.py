"""CANARD history evaluation: does the kept history hold what the human rewrite needed?

For each CANARD turn, the *needed* words are the content words of ``Rewrite`` that are absent from
``Question`` but present in ``History`` (e.g. the entity a pronoun refers to). After fitting the history
into a budget, we report the fraction of needed words that the kept (possibly compressed) history still
contains, averaged over turns that need at least one word.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..config import TrimConfig
from ..errors import IngestError
from ..budget.history import content_words, fit_history
from ..kernels.tokens import Tokenizer
from ..types import Message


@dataclass
class HistoryBudgetResult:
    budget: int
    turns: int
    needed_kept: float  # mean fraction of needed words kept
    fully_kept: float  # fraction of turns with every needed word kept
    history_tokens_mean: float

    def as_dict(self) -> dict[str, Any]:
        return {"budget": self.budget, "turns": self.turns, "needed_kept": round(self.needed_kept, 4),
                "fully_kept": round(self.fully_kept, 4), "history_tokens_mean": round(self.history_tokens_mean, 1)}


def load_canard(path: str | Path, limit: int | None = None) -> list[dict[str, Any]]:
    p = Path(path)
    if p.is_dir():
        p = p / "dev.json"
    if not p.is_file():
        raise IngestError(f"CANARD file not found: {p}", fix="pass ../shared/data/canard (with dev.json)")
    data = json.loads(p.read_text(encoding="utf-8"))
    return data[:limit] if limit else data


def as_messages(history: Sequence[str]) -> list[Message]:
    """CANARD history: [title, section, q1, a1, q2, a2, ...] → messages (title/section as one system line)."""
    msgs = [Message("system", " — ".join(history[:2]))] if len(history) >= 2 else []
    for i, text in enumerate(history[2:]):
        msgs.append(Message("user" if i % 2 == 0 else "assistant", text))
    return msgs


def evaluate_history(records: Sequence[dict[str, Any]], budgets: Sequence[int], tokenizer: Tokenizer,
                     cfg: TrimConfig) -> list[HistoryBudgetResult]:
    out = []
    for b in budgets:
        fracs, full, toks = [], [], []
        for r in records:
            hist_text = " ".join(r["History"])
            needed = (content_words(r["Rewrite"]) - content_words(r["Question"])) & content_words(hist_text)
            if not needed:
                continue
            res = fit_history(as_messages(r["History"]), b, tokenizer, cfg, query=r["Question"])
            kept = content_words(" ".join(m.content for m in res.messages))
            frac = len(needed & kept) / len(needed)
            fracs.append(frac)
            full.append(frac == 1.0)
            toks.append(res.used)
        n = len(fracs) or 1
        out.append(HistoryBudgetResult(budget=b, turns=len(fracs), needed_kept=sum(fracs) / n,
                                       fully_kept=sum(full) / n, history_tokens_mean=sum(toks) / n))
    return out

"""Semantic-cache evaluation on labelled pairs (``label text_a text_b``, DESIGN.md "pairs").

For each pair, ``text_a`` is stored (in a scope of its own) and ``text_b`` looked up through the real
:class:`~ragbudget.cache.SemanticResponseCache` (same threshold, guards and verifier as in service).
``hit_rate`` is over label-1 pairs (right hits), ``false_hit_rate`` over label-0 pairs (wrong answers),
each with a 95% Wilson interval (``hit_rate_ci``, ``false_hit_rate_ci``); ``served_by`` and ``refused_by``
count the decisions (:class:`~ragbudget.cache.semantic.Decision`) by reason.

Optional extra columns ``kind`` and ``split`` (as in ``tests/data/near_miss_pairs.tsv``) give a per-kind
breakdown (``by_kind``) and a subset (:func:`select`: a split name, or ``even``/``odd`` rows, the
tuning / held-out halves used for MRPC).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..cache import MemoryBackend, ResponseScope, SemanticResponseCache, Verifier
from ..config import SemanticCacheConfig
from ..embed.encoder import Embedder
from ..errors import IngestError


@dataclass(frozen=True)
class Pair:
    label: int
    text_a: str
    text_b: str
    kind: str = ""
    split: str = ""


def load_pairs(path: str | Path) -> list[Pair]:
    """Read a pairs TSV (header ``label text_a text_b``); a malformed file is an IngestError."""
    p = Path(path)
    if not p.is_file():
        raise IngestError(f"pairs file not found: {p}", fix="pass a TSV with header 'label text_a text_b'")
    pairs: list[Pair] = []
    with p.open(newline="", encoding="utf-8") as f:
        rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(rows, None)
        if header is None or [h.strip() for h in header[:3]] != ["label", "text_a", "text_b"]:
            raise IngestError(f"{p}: first line must be the header 'label<TAB>text_a<TAB>text_b', got {header!r}")
        for n, row in enumerate(rows, start=2):
            if not row:
                continue
            if len(row) < 3 or row[0].strip() not in ("0", "1"):
                raise IngestError(f"{p}:{n}: expected 'label(0|1)<TAB>text_a<TAB>text_b', got {row[:3]!r}")
            extra = dict(zip([h.strip() for h in header[3:]], row[3:]))
            pairs.append(Pair(int(row[0]), row[1], row[2], extra.get("kind", ""), extra.get("split", "")))
    if not pairs:
        raise IngestError(f"{p}: no pairs after the header")
    return pairs


def select(pairs: Sequence[Pair], split: str | None) -> list[Pair]:
    """The pairs of one split: ``even`` / ``odd`` rows (1st, 3rd, ... / 2nd, 4th, ...), or a ``split``
    column value; None or ``all``: every pair. An empty selection is an IngestError."""
    if split in (None, "all"):
        return list(pairs)
    if split in ("even", "odd"):
        out = list(pairs[0 if split == "even" else 1::2])
    else:
        out = [p for p in pairs if p.split == split]
    if not out:
        raise IngestError(f"no pairs in split {split!r}", fix="use all, even, odd or a value of the split column")
    return out


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion (exact 0 or 1 at the ends; (0, 1) for n = 0)."""
    if n <= 0:
        return (0.0, 1.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, round(centre - half, 4)), min(1.0, round(centre + half, 4)))


def _score(pairs: Sequence[Pair], va: np.ndarray, vb: np.ndarray, embedder: Embedder,
           config: SemanticCacheConfig, verifier: Verifier | None, conversation: bool = False) -> dict[str, Any]:
    cache = SemanticResponseCache(MemoryBackend(max_entries=len(pairs) + 1), embedder,
                                  config.model_copy(update={"max_entries": len(pairs) + 1}), verifier=verifier)
    hits = {0: 0, 1: 0}
    totals = {0: 0, 1: 0}
    kinds: dict[str, list[int]] = {}  # kind -> [pairs, hits]
    served: dict[str, int] = {}
    refused: dict[str, int] = {}
    for i, (p, a, b) in enumerate(zip(pairs, va, vb)):
        scope = ResponseScope(tenant=f"pair-{i}", index_version="eval", prompt_version="eval", model_tier="eval",
                              max_tokens=0, conversation=f"conversation-{i}" if conversation else "")
        cache.store(scope, p.text_a, {"answer": f"answer-{i}"}, embedding=a)
        hit, decisions = cache.lookup_explained(scope, p.text_b, embedding=b)
        for d in decisions:
            tally = served if d.accepted else refused
            tally[f"{p.label}:{d.reason}"] = tally.get(f"{p.label}:{d.reason}", 0) + 1
        totals[p.label] += 1
        hits[p.label] += int(hit is not None)
        if p.kind:
            k = kinds.setdefault(f"{p.label}:{p.kind}", [0, 0])
            k[0] += 1
            k[1] += int(hit is not None)
    out: dict[str, Any] = {"threshold": config.threshold, "guards": config.guards, "contrast": config.guard_contrast,
            "verifier": config.verifier if cache.learned is not None else "lexical",
            "hit_rate": hits[1] / totals[1] if totals[1] else 0.0, "hit_rate_ci": wilson(hits[1], totals[1]),
            "false_hit_rate": hits[0] / totals[0] if totals[0] else 0.0,
            "false_hit_rate_ci": wilson(hits[0], totals[0]),
            "pairs": len(pairs), "positives": totals[1], "negatives": totals[0],
            "rejected_by_guard": cache.stats.rejected_by_guard,
            "served_by": dict(sorted(served.items())), "refused_by": dict(sorted(refused.items()))}
    if kinds:
        out["by_kind"] = {k: {"pairs": n, "hits": h} for k, (n, h) in sorted(kinds.items())}
    return out


def evaluate_pairs(pairs: Sequence[Pair], embedder: Embedder, config: SemanticCacheConfig | None = None, *,
                   thresholds: Sequence[float] | None = None, verifier: Verifier | None = None,
                   conversation: bool = False) -> list[dict[str, Any]]:
    """One result dict per threshold (default: the config's). Texts are embedded once, in batches.

    ``conversation``: each pair is two wordings of one conversation's follow-up (CANARD's rewrites), so both
    share a conversation scope, as they would in the pipeline."""
    cfg = config or SemanticCacheConfig()
    va = embedder.embed([p.text_a for p in pairs])
    vb = embedder.embed([p.text_b for p in pairs])
    ts = list(thresholds) if thresholds else [cfg.threshold]
    return [_score(pairs, va, vb, embedder, cfg.model_copy(update={"threshold": float(t)}), verifier, conversation)
            for t in ts]

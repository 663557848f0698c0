"""Mine question-shaped near-miss negatives from the shared data: ``.venv/bin/python benchmarks/cache_pairs.py OUT.tsv``.

Real users' questions are what a semantic cache sees, and the shared data has thousands of real questions
that differ from one another: SQuAD 2.0 questions (eval/squad2), HotpotQA questions (eval/hotpot_dev) and
CANARD's self-contained rewrites (canard/dev.json). For every question the script pairs it with its
nearest *other* question by MiniLM cosine — within the same CANARD dialog (same topic, a different
question), within the whole SQuAD / HotpotQA sample — and writes the pairs whose cosine is at least
``--min-cosine`` as label 0 (a cache must not serve one's answer for the other). Pairs whose texts are
equal after lowercasing and stripping punctuation are dropped (a repeated question is a true hit).

Columns ``label text_a text_b kind split`` (kind = source; split alternates ``tune`` / ``heldout`` by
row within each source), the layout ``ragbudget eval cache`` and ``ragbudget.cache.build_verifier`` read.
Deterministic: the same data and model give the same file. Label noise: a CANARD user who asks the same
thing twice gives a true duplicate labelled 0 (rare; it only makes the false-hit figures pessimistic).
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np

import _common
from ragbudget.config import EmbeddingConfig
from ragbudget.embed.encoder import SentenceTransformerEmbedder


def _norm(t: str) -> str:
    return re.sub(r"[^\w ]", "", t.casefold()).strip()


def _clean(t: str) -> str:
    return " ".join(t.replace("\t", " ").split())


def nearest_pairs(texts: list[str], vecs: np.ndarray, groups: list[str], min_cos: float) -> list[tuple[str, str, float]]:
    """Each text with its nearest other text of the same group (cosine ≥ ``min_cos``), each pair once."""
    by_group: dict[str, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        by_group[g].append(i)
    seen: set[tuple[int, int]] = set()
    out = []
    for g in sorted(by_group):
        idx = by_group[g]
        if len(idx) < 2:
            continue
        sims = vecs[idx] @ vecs[idx].T
        np.fill_diagonal(sims, -1.0)
        for r, i in enumerate(idx):
            c = int(np.argmax(sims[r]))
            j = idx[c]
            key = (min(i, j), max(i, j))
            if sims[r, c] < min_cos or key in seen or _norm(texts[i]) == _norm(texts[j]):
                continue
            seen.add(key)
            out.append((texts[i], texts[j], float(sims[r, c])))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="TSV to write")
    ap.add_argument("--data", default=str(_common.SHARED_DATA), help="the shared data folder")
    ap.add_argument("--min-cosine", type=float, default=0.6)
    args = ap.parse_args(argv)
    data = Path(args.data)
    emb = SentenceTransformerEmbedder(EmbeddingConfig(cache=False))
    sources: dict[str, tuple[list[str], list[str]]] = {}
    for name, path in (("squad", data / "eval" / "squad2" / "questions.jsonl"),
                       ("hotpot", data / "eval" / "hotpot_dev" / "questions_all.jsonl")):
        texts = sorted({_clean(json.loads(line)["text"]) for line in path.read_text(encoding="utf-8").splitlines()
                        if line.strip()})
        sources[name] = (texts, ["all"] * len(texts))
    turns = json.loads((data / "canard" / "dev.json").read_text(encoding="utf-8"))
    canard = sorted({(t["QuAC_dialog_id"], _clean(t["Rewrite"])) for t in turns})
    sources["canard"] = ([t for _, t in canard], [d for d, _ in canard])
    rows = []
    for name, (texts, groups) in sources.items():
        vecs = emb.embed(texts)
        for n, (a, b, _) in enumerate(nearest_pairs(texts, vecs, groups, args.min_cosine)):
            rows.append(f"0\t{a}\t{b}\t{name}\t{'tune' if n % 2 == 0 else 'heldout'}")
        print(f"{name}: {sum(r.split(chr(9))[3] == name for r in rows)} pairs")
    Path(args.out).write_text("label\ttext_a\ttext_b\tkind\tsplit\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

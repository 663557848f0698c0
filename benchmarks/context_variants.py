"""What the default pipeline's prompt spends per data set, against config variants (no model: the extractive
tier answers; the question is what context reaches the prompt).

    .venv/bin/python benchmarks/context_variants.py --sets squad2,hotpot_dev,canard,longdocs --n 40 \
        --variant 'noparent={"trim.parent_share": 0}' --variant 'w0={"trim.parent_share": 0, "trim.sentence_window": 0}'

Per set and variant: mean prompt tokens (cl100k, the whole prompt), retrieved-section tokens, chunks sent,
answer-in-context, and on multi-hop sets how often every supporting document is in context. The sets are the
real-model headline's (``real_headline.load_set``: CANARD follow-ups with their history, long documents built
from squad2); ``--offset`` takes questions after the headline's first ones, for tuning on other questions.
Indexes are kept under ``--work`` and reused by later runs (the variants change only what happens after
retrieval).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import _common  # noqa: F401  (puts the checkout on sys.path)
from ragbudget import RAG
from ragbudget.config import Config
from ragbudget.eval.answers import contains_answer
from ragbudget.embed.encoder import EmbeddingCache, SentenceTransformerEmbedder
from real_headline import load_set


def run(sets: list[str], n: int, variants: dict[str, dict], data: Path, work: Path, offset: int = 0) -> list[dict]:
    rows = []
    work.mkdir(parents=True, exist_ok=True)
    embedder = SentenceTransformerEmbedder(cache=EmbeddingCache(str(work / "embeddings.sqlite")))
    for name in sets:
        base = work / name
        base.mkdir(parents=True, exist_ok=True)
        corpus, questions = load_set(name, data, work, embedder, n + offset)
        questions = questions[offset:offset + n]
        for vname, over in variants.items():
            cfg = Config().with_overrides({
                "index.dir": str(base / "ix"), "cache.path": str(base / "cache.sqlite"), "cache.response": False,
                "cache.retrieval": False, "llm.tiers": [{"name": "x", "backend": "extractive", "model": "extractive"}],
                **over})
            with RAG(cfg, index=name, embedder=embedder) as rag:
                if not (base / "ix" / name).exists():
                    rag.ingest(str(corpus))
                per = []
                for q in questions:
                    a = rag.query(q["text"], history=q.get("history"))
                    ctx = a.context or []
                    docs = {c.chunk.doc_id for c in ctx}
                    sup = q.get("supporting") or []
                    per.append({"prompt": a.ledger.prompt.get("total_tokens", 0),
                                "retrieved": a.ledger.sections["retrieved"].used,
                                "chunks": a.ledger.sections["retrieved"].items_in,
                                "aic": contains_answer(" ".join(c.chunk.text for c in ctx), q["answers"]),
                                "both": all(any(s in d for d in docs) for s in sup) if sup else None})
            both = [p["both"] for p in per if p["both"] is not None]
            row = {"set": name, "variant": vname, "n": len(per),
                   **{k: round(statistics.mean(float(p[k]) for p in per), 2)
                      for k in ("prompt", "retrieved", "chunks", "aic")},
                   "both": round(sum(both) / len(both), 2) if both else None}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="squad2,hotpot_dev")
    ap.add_argument("--n", type=int, default=40, help="questions per set")
    ap.add_argument("--data", default="../shared/data/eval")
    ap.add_argument("--work", default="/tmp/ragbudget-context-variants")
    ap.add_argument("--offset", type=int, default=0, help="skip this many questions per set (tune on others)")
    ap.add_argument("--variant", action="append", default=[], help='NAME={"dotted.key": value, ...}')
    args = ap.parse_args(argv)
    variants = {"default": {}}
    for v in args.variant:
        name, _, spec = v.partition("=")
        variants[name] = json.loads(spec)
    run(args.sets.split(","), args.n, variants, Path(args.data), Path(args.work), args.offset)


if __name__ == "__main__":
    main()

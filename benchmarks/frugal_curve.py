"""Quality × tokens: ragbudget's defaults at several retrieved budgets against LlamaIndex's defaults at
several top-k, same embedder, same data, same run (issue 16).

    .venv/bin/python benchmarks/frugal_curve.py --data ../shared/data/eval --json /tmp/curve.json

Sets: ``squad2`` as shipped (one paragraph per record); ``squad2-long`` (its paragraphs grouped by topic
into documents of up to ~3,000 tokens, see :mod:`ragbudget.eval.longdocs`); ``squad2-mixed`` (shuffled into
documents of up to ~1,500 tokens); ``canard-dialogs`` (CANARD: one document per QuAC dialog holding its
answers, the first 400 follow-ups as their human rewrites, the answer's first sentence as the answer; see
:mod:`ragbudget.eval.followups`) — answers that do not echo the question's words; ``hotpot_dev`` (multi-hop:
short Wikipedia paragraphs, each question needs two). ``--sets`` picks some. Questions and answers are
unchanged. ragbudget: the built-in defaults
(or ``--config``), the retrieved budget swept; LlamaIndex: ``SentenceSplitter()`` (1024/200), in-memory
``VectorStoreIndex``, dense top-k, whole chunks. Context tokens = cl100k tokens of the joined context text.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from _baseline import build_baseline, eval_answers, read_corpus  # also puts the checkout on sys.path
from ragbudget.config import Config, load_config
from ragbudget.embed.encoder import EmbeddingCache, SentenceTransformerEmbedder
from ragbudget.eval.answers import evaluate_answers, load_questions
from ragbudget.eval.followups import followup_set
from ragbudget.eval.history_eval import load_canard
from ragbudget.eval.longdocs import build_long_documents
from ragbudget.retrieval.rerank import make_reranker
from ragbudget.kernels.tokens import Tokenizer

BUDGETS = (100, 250, 500, 1000, 2000, 4000)
TOP_KS = (1, 2, 3, 5, 10)


def curve(folder: Path, cfg: Config, emb: SentenceTransformerEmbedder) -> dict[str, list[dict[str, float]]]:
    rep = evaluate_answers(folder, cfg, emb, make_reranker(cfg.rerank, emb), BUDGETS, baseline=False)
    ours = [{"budget": r.budget, "aic": round(r.answer_in_context, 3), "tokens": round(r.context_tokens_mean, 1)}
            for r in rep.budgeted()]
    base = build_baseline(read_corpus(folder / "corpus.jsonl"), emb)
    qs = load_questions(folder)
    li = []
    for k in TOP_KS:
        r = eval_answers(base, qs, Tokenizer(), k)
        li.append({"top_k": k, "aic": round(r["answer_in_context"], 3), "tokens": r["context_tokens_mean"]})
    return {"ragbudget": ours, "llamaindex": li}


def canard_set(src: Path, out: Path, n: int = 400) -> Path:
    corpus, questions = followup_set(load_canard(src))
    out.mkdir(parents=True, exist_ok=True)
    with (out / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for rec in corpus:
            f.write(json.dumps(rec) + "\n")
    with (out / "questions.jsonl").open("w", encoding="utf-8") as f:
        for i, q in enumerate(questions[:n]):
            f.write(json.dumps({"_id": str(i), "text": q["gold"], "answers": q["answers"]}) + "\n")
    return out


def verdict(res: dict[str, list[dict[str, float]]]) -> list[str]:
    """Per LlamaIndex point: the cheapest ragbudget point with at least its answer-in-context."""
    out = []
    for p in res["llamaindex"]:
        ok = [o for o in res["ragbudget"] if o["aic"] >= p["aic"]]
        if not ok:
            out.append(f"top-{p['top_k']}: no budget reaches {p['aic']}")
            continue
        best = min(ok, key=lambda o: o["tokens"])
        out.append(f"top-{p['top_k']} {p['aic']}@{p['tokens']:.0f} ← budget {best['budget']} {best['aic']}@"
                   f"{best['tokens']:.0f} ({best['tokens'] / p['tokens']:.2f}× tokens)")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data/eval", help="folder holding squad2/")
    ap.add_argument("--canard", default="../shared/data/canard", help="CANARD folder (dev.json)")
    ap.add_argument("--config", default=None)
    ap.add_argument("--sets", default="squad2,squad2-long,squad2-mixed,canard-dialogs,hotpot_dev",
                    help="comma-separated subset of the sets")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    cfg = load_config(args.config) if args.config else Config()
    emb = SentenceTransformerEmbedder(cfg.embedding, EmbeddingCache(Path(tempfile.gettempdir()) / "rb-curve-emb.sqlite"))
    squad = Path(args.data) / "squad2"
    results = {}
    with tempfile.TemporaryDirectory(prefix="rb-curve-") as tmp:
        builders = {"squad2": lambda: squad,
                    "squad2-long": lambda: Path(build_long_documents(squad, Path(tmp) / "long", tokens=3000,
                                                                     group="topic", embedder=emb)["out"]),
                    "squad2-mixed": lambda: Path(build_long_documents(squad, Path(tmp) / "mixed", tokens=1500,
                                                                      group="random")["out"]),
                    "canard-dialogs": lambda: canard_set(Path(args.canard), Path(tmp) / "canard"),
                    "hotpot_dev": lambda: Path(args.data) / "hotpot_dev"}
        wanted = [x.strip() for x in args.sets.split(",") if x.strip()]
        unknown = sorted(set(wanted) - set(builders))
        if unknown:
            ap.error(f"unknown set(s) {unknown}; choose from {sorted(builders)}")
        for name in wanted:
            res = curve(builders[name](), cfg, emb)
            results[name] = res
            print(f"\n## {name}")
            print("ragbudget  " + "  ".join(f"{o['budget']}: {o['aic']:.3f} @ {o['tokens']:.0f}" for o in res["ragbudget"]))
            print("llamaindex " + "  ".join(f"k={p['top_k']}: {p['aic']:.3f} @ {p['tokens']:.0f}" for p in res["llamaindex"]))
            for line in verdict(res):
                print("  " + line)
            sys.stdout.flush()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

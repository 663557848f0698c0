"""``ragbudget eval answers DIR --budget N [--json] [--sweep ...]`` and ``ragbudget eval history DIR``."""

from __future__ import annotations

import argparse
import json
import sys

from typing import TYPE_CHECKING

from ..config import Config, load_config
from .output import count_bar

if TYPE_CHECKING:
    from ..embed.encoder import SentenceTransformerEmbedder

# The library is imported inside the handlers (a fast `--help`); these equal the library's (a test checks).
GROUPS = ("topic", "random")  # ragbudget.eval.longdocs.GROUPS


def _budgets(text: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not vals or any(v < 0 for v in vals):
        raise argparse.ArgumentTypeError("budgets must be non-negative integers")
    return vals


def add_eval_parser(eval_sub: argparse._SubParsersAction) -> None:
    p = eval_sub.add_parser("answers", help="answer-in-context under a retrieved-context budget")
    p.add_argument("dir", help="answers folder (corpus.jsonl + questions.jsonl)")
    p.add_argument("--budget", type=int, default=None, help="retrieved-context budget in tokens")
    p.add_argument("--sweep", type=_budgets, default=None, help="comma-separated budgets, e.g. 200,400,800")
    p.add_argument("--limit", type=int, default=None, help="first N questions only")
    p.add_argument("--no-baseline", action="store_true", help="skip the dense top-k baseline")
    p.add_argument("--embedding-cache", default=".ragbudget/embeddings.sqlite")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.set_defaults(handler=run_answers)
    h = eval_sub.add_parser("history", help="CANARD: does the kept history hold what the rewrite needed")
    h.add_argument("dir", nargs="?", default="../shared/data/canard")
    h.add_argument("--sweep", type=_budgets, default=[0, 32, 64, 128, 256, 512])
    h.add_argument("--limit", type=int, default=None)
    h.add_argument("--json", action="store_true")
    h.set_defaults(handler=run_history)
    f = eval_sub.add_parser("followups", help="CANARD: retrieval with raw, condensed and human-rewritten follow-ups")
    f.add_argument("dir", nargs="?", default="../shared/data/canard")
    f.add_argument("--limit", type=int, default=600, help="first N follow-up questions (0: all)")
    f.add_argument("--k", type=int, default=10, help="recall@k")
    f.add_argument("--embedding-cache", default=".ragbudget/embeddings.sqlite")
    f.add_argument("--json", action="store_true")
    f.set_defaults(handler=run_followups)
    ld = eval_sub.add_parser("longdocs", help="build long documents from an answers folder's short paragraphs")
    ld.add_argument("src", help="answers folder (corpus.jsonl + questions.jsonl)")
    ld.add_argument("out", help="folder to write (corpus.jsonl + questions.jsonl)")
    ld.add_argument("--tokens", type=int, default=3000, help="document size in tokens (about)")
    ld.add_argument("--group", choices=GROUPS, default="topic", help="topic: k-means clusters; random: shuffled")
    ld.add_argument("--seed", type=int, default=7)
    ld.set_defaults(handler=run_longdocs)


def run_answers(args: argparse.Namespace) -> int:
    from ..eval.answers import evaluate_answers
    from ..retrieval.rerank import make_reranker

    cfg = load_config(args.config)
    budgets = args.sweep or [args.budget if args.budget is not None else cfg.budget.retrieved.cap or 1200]
    emb = _embedder(cfg, args.embedding_cache)
    with count_bar("questions") as progress:
        rep = evaluate_answers(args.dir, cfg, emb, make_reranker(cfg.rerank, emb), budgets, limit=args.limit,
                               baseline=not args.no_baseline, progress=progress)
    print(f"{rep.chunks} chunks; {rep.retriever}; rerank {cfg.rerank.kind}; trim order {cfg.trim.order}",
          file=sys.stderr)
    if not args.json:  # --json: only the JSON object on stdout
        print(f"{'method':<12} {'budget':>6} {'answer_in_context':>17} {'tokens_mean':>11} {'tokens_p95':>10}")
        for r in rep.results:
            print(f"{r.method:<12} {r.budget:>6} {r.answer_in_context:>17.3f} {r.context_tokens_mean:>11.1f} "
                  f"{r.context_tokens_p95:>10.1f}")
    else:
        main = rep.budgeted()[-1] if len(budgets) == 1 else None
        obj = main.as_dict() if main else {"sweep": [r.as_dict() for r in rep.results]}
        if main:
            obj.pop("method")
        print(json.dumps(obj))
    return 0


def _embedder(cfg: Config, path: str) -> SentenceTransformerEmbedder:
    from ..embed.encoder import EmbeddingCache, SentenceTransformerEmbedder

    return SentenceTransformerEmbedder(cfg.embedding, EmbeddingCache(path) if cfg.embedding.cache else None)


def run_followups(args: argparse.Namespace) -> int:
    from ..eval.followups import KINDS, evaluate_followups
    from ..retrieval.rerank import make_reranker

    cfg = load_config(args.config)
    emb = _embedder(cfg, args.embedding_cache)
    res = evaluate_followups(args.dir, cfg, emb, make_reranker(cfg.rerank, emb), limit=args.limit or None, k=args.k)
    print(f"{res['questions']} follow-ups, {res['documents']} dialogs ({res['chunks']} chunks); condensed query "
          f"differs from the question in {res['condensed_changed']:.0%}", file=sys.stderr)
    if args.json:  # only the JSON object on stdout
        print(json.dumps(res))
        return 0
    print(f"{'query':<10} {'recall@' + str(args.k):>9} {'answer_in_context':>17} {'tokens_mean':>11}")
    for kind in KINDS:
        r = res[kind]
        print(f"{kind:<10} {r[f'recall@{args.k}']:>9.3f} {r['answer_in_context']:>17.3f} {r['context_tokens_mean']:>11.1f}")
    return 0


def run_longdocs(args: argparse.Namespace) -> int:
    from ..eval.longdocs import build_long_documents

    cfg = load_config(args.config)
    emb = _embedder(cfg, ".ragbudget/embeddings.sqlite") if args.group == "topic" else None
    res = build_long_documents(args.src, args.out, tokens=args.tokens, group=args.group, embedder=emb,
                               seed=args.seed)
    print(json.dumps(res))
    return 0


def run_history(args: argparse.Namespace) -> int:
    from ..eval.history_eval import evaluate_history, load_canard
    from ..kernels.tokens import Tokenizer

    cfg = load_config(args.config)
    recs = load_canard(args.dir, args.limit)
    res = evaluate_history(recs, args.sweep, Tokenizer(cfg.tokenizer.encoding), cfg.trim)
    if args.json:  # only the JSON object on stdout
        print(json.dumps({"sweep": [r.as_dict() for r in res]}))
        return 0
    print(f"{'budget':>6} {'turns':>6} {'needed_kept':>11} {'fully_kept':>10} {'tokens_mean':>11}")
    for r in res:
        print(f"{r.budget:>6} {r.turns:>6} {r.needed_kept:>11.3f} {r.fully_kept:>10.3f} {r.history_tokens_mean:>11.1f}")
    return 0

"""``ragbudget eval cache PAIRS.tsv``: semantic-cache hit and false-hit rates on labelled pairs."""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

from ..config import load_config
from ..errors import ConfigError


def _thresholds(text: str) -> list[float]:
    try:
        ts = [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise ConfigError(f"--sweep: expected comma-separated numbers, got {text!r}",
                          fix="e.g. --sweep 0.80,0.85,0.90") from None
    if not ts or any(not 0 <= t <= 1 for t in ts):
        raise ConfigError(f"--sweep: thresholds must lie in [0, 1], got {text!r}")
    return ts


def _ci(ci: list[float] | tuple[float, float]) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def _run(args: argparse.Namespace) -> int:
    from ..embed.encoder import SentenceTransformerEmbedder  # in the handler: a fast `--help`
    from ..eval.cache_eval import evaluate_pairs, load_pairs, select

    cfg = load_config(getattr(args, "config", None))
    sem = cfg.cache.semantic
    if args.threshold is not None:
        if not 0 <= args.threshold <= 1:
            raise ConfigError(f"--threshold must lie in [0, 1], got {args.threshold}")
        sem = sem.model_copy(update={"threshold": args.threshold})
    if args.no_guards:
        sem = sem.model_copy(update={"guards": False})
    if args.no_contrast:
        sem = sem.model_copy(update={"guard_contrast": False})
    if args.verifier is not None:
        sem = sem.model_copy(update={"verifier": args.verifier})
    if args.min_score is not None:
        if not 0 <= args.min_score <= 1:
            raise ConfigError(f"--min-score must lie in [0, 1], got {args.min_score}")
        sem = sem.model_copy(update={"verifier_min_score": args.min_score})
    pairs = select(load_pairs(args.pairs), args.split)
    embedder = SentenceTransformerEmbedder(cfg.embedding.model_copy(update={"cache": False}))
    if args.sweep:
        rows = evaluate_pairs(pairs, embedder, sem, thresholds=_thresholds(args.sweep), conversation=args.conversation)
        table = Table(title=f"semantic cache on {args.pairs} ({len(pairs)} pairs, guards "
                            f"{'on' if sem.guards else 'off'}, contrast {'on' if sem.guard_contrast else 'off'})")
        for col in ("threshold", "hit_rate", "95% CI", "false_hit_rate", "95% CI", "rejected_by_guard"):
            table.add_column(col, justify="right")
        for r in rows:
            table.add_row(f"{r['threshold']:.3f}", f"{r['hit_rate']:.3f}", _ci(r["hit_rate_ci"]),
                          f"{r['false_hit_rate']:.4f}", _ci(r["false_hit_rate_ci"]), str(r["rejected_by_guard"]))
        if args.json:  # only the JSON object on stdout
            print(json.dumps({"sweep": rows}))
        else:
            Console().print(table)
        return 0
    (r,) = evaluate_pairs(pairs, embedder, sem, conversation=args.conversation)
    if args.json:
        print(json.dumps(r))
    else:
        print(f"pairs {r['pairs']}  threshold {r['threshold']:.3f}  "
              f"hit_rate {r['hit_rate']:.3f} {_ci(r['hit_rate_ci'])} on {r['positives']} positives  "
              f"false_hit_rate {r['false_hit_rate']:.4f} {_ci(r['false_hit_rate_ci'])} on {r['negatives']} negatives  "
              f"(guards {'on' if sem.guards else 'off'}, contrast {'on' if sem.guard_contrast else 'off'}, "
              f"verifier {r['verifier']})")
        for name, tally in (("served", r["served_by"]), ("refused", r["refused_by"])):
            if tally:
                print(f"  {name} by reason (label:reason): " + ", ".join(f"{k} {v}" for k, v in tally.items()))
        for kind, k in r.get("by_kind", {}).items():
            print(f"  {kind:<24} {k['hits']:>4} hits of {k['pairs']}")
    return 0


def add_eval_parser(eval_sub: argparse._SubParsersAction) -> None:
    p = eval_sub.add_parser("cache", help="semantic-cache hit / false-hit rates on labelled pairs")
    p.add_argument("pairs", help="TSV with header 'label text_a text_b'")
    p.add_argument("--threshold", type=float, default=None, help="cosine threshold (default: config)")
    p.add_argument("--sweep", default=None, help="comma-separated thresholds, printed as a table")
    p.add_argument("--no-guards", action="store_true", help="cosine only (to see what the guards add)")
    p.add_argument("--no-contrast", action="store_true", help="guards without the contrast verifier")
    p.add_argument("--verifier", choices=("learned", "lexical"), default=None,
                   help="learned: a model scores soft refusals (default: config); lexical: refuse them all")
    p.add_argument("--min-score", type=float, default=None, help="learned verifier's bar (default: the model's)")
    p.add_argument("--split", default=None,
                   help="evaluate a subset: even or odd rows, or a value of the pairs file's split column")
    p.add_argument("--conversation", action="store_true",
                   help="each pair is one conversation's follow-up worded twice (a shared conversation scope)")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.set_defaults(handler=_run)

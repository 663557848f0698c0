"""Model commands: ``make-gguf`` (a small random-weight llama GGUF).

The generation benchmarks (``ragbudget eval generation`` before) are ``benchmarks/generation.py`` in a checkout."""

from __future__ import annotations

import argparse
from typing import Any

from .moved import add_moved


def add_parser(sub: Any) -> None:
    p = sub.add_parser("make-gguf", help="write a small random-weight llama GGUF (gibberish text, real timings)")
    p.add_argument("out", help="output .gguf path")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=None)
    p.add_argument("--ff", type=int, default=128)
    p.add_argument("--context-length", type=int, default=2048)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(handler=_make_gguf)


def _make_gguf(args: argparse.Namespace) -> int:
    from ..llm.gguf_writer import GGUFSpec, write_random_gguf  # in the handler: a fast `--help`

    spec = GGUFSpec(layers=args.layers, dim=args.dim, heads=args.heads, kv_heads=args.kv_heads, ff=args.ff,
                    context_length=args.context_length, seed=args.seed)
    path = write_random_gguf(args.out, spec)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB, {spec.layers} layers, dim {spec.dim}): "
          "random weights — its text is gibberish, its timings are real")
    return 0


def add_eval_parser(eval_sub: Any) -> None:
    add_moved(eval_sub, "generation", "ragbudget eval generation", ".venv/bin/python benchmarks/generation.py")

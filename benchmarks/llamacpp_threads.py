"""Decode speed of the real model on llama.cpp: threads, calling thread, and a loaded machine.

    .venv/bin/python benchmarks/llamacpp_threads.py --tokens 96 --rounds 3

SmolLM2-135M-Instruct (Q4_1) answers one fixed prompt at temperature 0 for ``--tokens`` tokens, for each
n_threads in ``--threads``, called from the main thread and from a fresh worker thread (as the router and the
service call it), on an idle machine and with ``--load`` busy processes spinning beside it (what an ingest
or another tenant's request does to a two-core box). Reported: decode tokens/s (completion tokens over the
time after the first token) and prompt-evaluation tokens/s, the median of ``--rounds`` runs, rounds
interleaved so every setting sees the same machine.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import threading
import time
from typing import Any

import _common  # noqa: F401 - puts the checkout first on sys.path
from ragbudget.llm import LlamaCppGenerator, make_prompt
from ragbudget.llm.models import require_smollm2

PROMPT = make_prompt([("system", "You are a helpful assistant."),
                      ("user", "Explain in detail how a lighthouse works, its history and its keepers. " * 8)])


def _spin(stop: Any) -> None:
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x += 1


def _one(gen: LlamaCppGenerator, tokens: int, in_worker: bool) -> dict[str, float]:
    out: dict[str, Any] = {}

    def run() -> None:
        gen.reset()
        t0 = time.perf_counter()
        g = gen.generate(PROMPT, max_tokens=tokens)
        total = time.perf_counter() - t0
        ttft = (g.timings.ttft_ms or 0) / 1000
        out["decode_tps"] = (g.usage.completion_tokens - 1) / max(total - ttft, 1e-9)
        out["prompt_tps"] = g.usage.prompt_tokens / max(ttft, 1e-9)

    if in_worker:
        t = threading.Thread(target=run)
        t.start()
        t.join()
    else:
        run()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--load", type=int, default=1, help="busy processes beside the engine in the loaded runs")
    args = ap.parse_args(argv)
    model = require_smollm2()
    threads = [int(t) for t in args.threads.split(",")]
    gens = {n: LlamaCppGenerator(str(model), n_ctx=2048, n_threads=n) for n in threads}
    for g in gens.values():
        g.generate(PROMPT, max_tokens=4)  # load and warm
    results: dict[str, list[dict[str, float]]] = {}
    for load in (0, args.load):
        stop = mp.Event()
        procs = [mp.Process(target=_spin, args=(stop,), daemon=True) for _ in range(load)]
        for p in procs:
            p.start()
        try:
            for _ in range(args.rounds):
                for n, g in gens.items():
                    for worker in (False, True):
                        key = f"n_threads={n} {'worker' if worker else 'main'} thread, {load} busy"
                        results.setdefault(key, []).append(_one(g, args.tokens, worker))
        finally:
            stop.set()
            for p in procs:
                p.join()
    table = {k: {m: round(statistics.median(r[m] for r in v), 1) for m in ("decode_tps", "prompt_tps")}
             for k, v in results.items()}
    print("| setting | decode tokens/s | prompt tokens/s |\n|---|---|---|")
    for k, v in table.items():
        print(f"| {k} | {v['decode_tps']} | {v['prompt_tps']} |")
    print(json.dumps({"tokens": args.tokens, "rounds": args.rounds, "prompt_tokens": gens[threads[0]].count_prompt(PROMPT),
                      "results": table}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Engine-token accuracy: prompt tokens counted before the call against what the engine reports (issue 16).

    .venv/bin/python benchmarks/engine_tokens.py --data ../shared/data/eval/squad2 --n 40

Prompts: ragbudget's default context for the first ``--n`` SQuAD2 questions. Engine: llama.cpp in process
on a generated GGUF (ragbudget.llm.gguf_writer; word-piece vocabulary), which reports the prompt tokens it
evaluated. Counters compared: the tier's engine counter (llama.cpp tokenizer + chat template), the
``gguf:PATH`` counter an OpenAI-compatible tier serving that GGUF would use (vocabulary-only load), the
calibrated estimate (builder tokens × the engine/builder ratio learned from the previous answers), and the
builder's own cl100k count (what the window check used before).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from ragbudget import RAG
from ragbudget.config import Config
from ragbudget.eval.answers import load_questions
from ragbudget.llm import LlamaCppGenerator
from ragbudget.llm.counting import GGUFCounter, RatioCalibration
from ragbudget.llm.gguf_writer import GGUFSpec, write_random_gguf


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data/eval/squad2")
    ap.add_argument("--n", type=int, default=40)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rb-engine-tokens-") as tmp:
        model = write_random_gguf(Path(tmp) / "m.gguf", GGUFSpec(layers=2, dim=128, heads=4, ff=256,
                                                                   context_length=8192))
        gen = LlamaCppGenerator(str(model), n_ctx=8192, n_threads=2)
        cfg = Config().with_overrides({"index.dir": f"{tmp}/idx", "cache.response": False, "cache.retrieval": False})
        rag = RAG(cfg, index="squad2")
        rag.ingest(Path(args.data) / "corpus.jsonl")
        gguf = GGUFCounter(str(model))
        cal = RatioCalibration()
        rows = {"engine counter": [], "gguf:PATH counter": [], "calibrated estimate": [], "builder cl100k": []}
        try:
            for q in load_questions(args.data)[: args.n]:
                loaded = rag.indexes.get("squad2")
                built = rag.builder.build(q["text"], loaded.retriever.retrieve(q["text"], 10))
                p = built.prompt
                counted = gen.count_prompt(p)
                reported = gen.generate(p, max_tokens=2).usage.prompt_tokens
                est = cal.estimate("t", p.total_tokens)
                for name, n in (("engine counter", counted), ("gguf:PATH counter", gguf.count_prompt(p)),
                                ("calibrated estimate", est), ("builder cl100k", p.total_tokens)):
                    rows[name].append(abs(n - reported) / reported)
                cal.observe("t", p.total_tokens, reported)
        finally:
            rag.close()
    out = {k: {"mean_abs_err_pct": round(100 * float(np.mean(v)), 2), "max_abs_err_pct": round(100 * float(np.max(v)), 2)}
           for k, v in rows.items()}
    print("| counter | mean |error| | max |error| |\n|---|---|---|")
    for k, v in out.items():
        print(f"| {k} | {v['mean_abs_err_pct']}% | {v['max_abs_err_pct']}% |")
    print(json.dumps({"prompts": args.n, **out}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Generation benchmarks on a real engine (random-weight GGUF: gibberish text, real timings).

``.venv/bin/python benchmarks/generation.py [--requests 20] [--layers 4 --dim 256]`` (from the repo root)
prints markdown; data: squad2/ under ``--data`` (default ../shared/data/eval):

- prefix layout: the same requests (≈2k-token static part from SQuAD paragraphs used as fixed docs,
  varying question + a retrieved snippet) laid out cache-friendly (static first) versus variable-first,
  on the in-process llama.cpp backend and on ``python -m llama_cpp.server`` through the openai backend:
  median / P95 TTFT and the ratio;
- output length: total and decode time against max_tokens;
- routing: share per tier and estimated cost against always-large on a mixed request set.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import httpx

from _common import EVAL_DATA, data_dir  # first: puts the checkout on sys.path
from ragbudget.config import LLMConfig, PromptConfig, RouterConfig, TierConfig
from ragbudget.eval.latency import HANDLER_QS, HARD_TEMPLATES
from ragbudget.llm import ExtractiveGenerator, Generator, LlamaCppGenerator, OpenAIGenerator, make_prompt
from ragbudget.llm.gguf_writer import GGUFSpec, write_random_gguf
from ragbudget.route import Router
from ragbudget.kernels.stats import percentile
from ragbudget.kernels.tokens import Tokenizer
from ragbudget.types import Chunk, Prompt, Scored

SQUAD = EVAL_DATA / "squad2"
SNIPPET_CHARS = 160  # one retrieved sentence; the byte-level vocab makes ~1 token per character


def engine_counter(llm: Any) -> Callable[[str], int]:
    """Tokens of a text as a loaded llama.cpp engine counts them."""
    return lambda t: len(llm.tokenize(t.encode(), add_bos=False))


def load_squad(root: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    corpus = [json.loads(line) for line in (root / "corpus.jsonl").open()]
    questions = [json.loads(line) for line in (root / "questions.jsonl").open()]
    return corpus, questions


def static_part(corpus: list[dict[str, Any]], count: Callable[[str], int], target: int) -> str:
    """System text + fixed docs grown to ``target`` engine tokens."""
    text = PromptConfig().system + "\n\nReference documents:\n"
    i = 0
    while count(text) < target:
        text += f"\n[F{i}] {corpus[i]['text']}"
        i += 1
    return text


def requests(corpus: list[dict[str, Any]], questions: list[dict[str, Any]], n: int,
             snippet_chars: int = SNIPPET_CHARS) -> list[tuple[str, str]]:
    out = []
    for k, q in enumerate(questions[:n]):
        para = corpus[(100 + 17 * k) % len(corpus)]["text"]
        out.append((q["text"], para.split(". ")[0][:snippet_chars]))
    return out


def layout(kind: str, static: str, question: str, snippet: str) -> Prompt:
    variable = (f"Retrieved:\n[1] {snippet}\n\n" if snippet else "") + f"Question: {question}"
    if kind == "cache-friendly":
        return make_prompt([("system", static), ("user", variable)], static_prefix=static)
    return make_prompt([("system", f"{variable}\n\n{static}"), ("user", question)], static_prefix="")


def ttft_pair(gens: dict[str, Generator], static: str, reqs: list[tuple[str, str]]) -> dict[str, dict[str, float]]:
    """TTFT per layout; each layout has its own engine (own KV cache) and requests alternate between
    them, so both layouts see the same machine load (the machine is shared and noisy)."""
    for kind, gen in gens.items():
        gen.generate(layout(kind, static, "warm-up question?", "warm-up snippet."), max_tokens=2)
    acc: dict[str, dict[str, list[float]]] = {k: {"ttft": [], "cached": [], "prompt": []} for k in gens}
    for q, snip in reqs:
        for kind, gen in gens.items():
            g = gen.generate(layout(kind, static, q, snip), max_tokens=4)
            acc[kind]["ttft"].append(g.timings.ttft_ms or 0.0)
            acc[kind]["cached"].append(g.usage.cached_tokens)
            acc[kind]["prompt"].append(g.usage.prompt_tokens)
    return {k: {"median": statistics.median(a["ttft"]), "p95": percentile(a["ttft"], 95),
                "cached": statistics.mean(a["cached"]), "prompt": statistics.mean(a["prompt"])}
            for k, a in acc.items()}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model: Path, n_ctx: int, threads: int) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
                             "--port", str(port), "--n_ctx", str(n_ctx), "--n_threads", str(threads),
                             "--model_alias", "bench"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}/v1"
    for _ in range(600):
        try:
            if httpx.get(f"{base}/models", timeout=1).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("llama_cpp.server did not start")


def bench_prefix(model: Path, static_target: int, n: int, threads: int,
                 snippet_chars: int = SNIPPET_CHARS, squad: Path = SQUAD) -> list[str]:
    corpus, questions = load_squad(squad)
    local = LlamaCppGenerator(str(model), n_ctx=4096, n_threads=threads)
    count = engine_counter(local.load())
    static = static_part(corpus, count, static_target)
    reqs = requests(corpus, questions, n, snippet_chars)
    lines = [f"static part: {count(static)} engine tokens; {n} requests, each a SQuAD question + a one-sentence "
             f"retrieved snippet (≤{snippet_chars} chars; 0 = question only); max_tokens=4; one untimed warm-up per layout; each layout on its own engine "
             "(own KV cache), requests alternating between the two so both see the same load", "",
             "| engine | layout | median TTFT ms | P95 TTFT ms | mean prompt tok | mean cached tok |",
             "|---|---|---|---|---|---|"]
    kinds = ("variable-first", "cache-friendly")
    results: dict[tuple[str, str], dict[str, float]] = {}
    locals_ = {k: LlamaCppGenerator(str(model), n_ctx=4096, n_threads=threads) for k in kinds}
    for k, r in ttft_pair(locals_, static, reqs).items():  # type: ignore[arg-type]
        results[("in-process", k)] = r
    del count, local, locals_  # free the in-process engines before the servers start
    servers = {k: start_server(model, 4096, threads) for k in kinds}
    try:
        remotes = {k: OpenAIGenerator("bench", base_url=servers[k][1], timeout_s=300, first_token_timeout_s=300)
                   for k in kinds}
        for k, r in ttft_pair(remotes, static, reqs).items():  # type: ignore[arg-type]
            results[("server", k)] = r
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(10)
    for (eng, kind), r in results.items():
        tok = (f"{r['prompt']:.0f} | {r['cached']:.0f}" if eng == "in-process"
               else "n/a (the server streams no usage) | n/a")
        lines.append(f"| {eng} | {kind} | {r['median']:.1f} | {r['p95']:.1f} | {tok} |")
    lines.append("")
    for eng in ("in-process", "server"):
        a, b = results[(eng, "variable-first")], results[(eng, "cache-friendly")]
        lines.append(f"- {eng}: median ratio {a['median'] / b['median']:.1f}×, P95 ratio {a['p95'] / b['p95']:.1f}×")
    return lines


def bench_output(model: Path, reps: int, threads: int, squad: Path = SQUAD) -> list[str]:
    corpus, questions = load_squad(squad)
    gen = LlamaCppGenerator(str(model), n_ctx=4096, n_threads=threads)
    llm = gen.load()
    static = static_part(corpus, lambda t: len(llm.tokenize(t.encode(), add_bos=False)), 500)
    lines = ["| max_tokens | completion tok | median total ms | median decode ms (total − TTFT) | "
             "decode ms / token | total vs max_tokens=32 |", "|---|---|---|---|---|---|"]
    sizes = (32, 64, 128, 256)
    runs: dict[int, dict[str, list[float]]] = {mt: {"total": [], "decode": [], "comp": []} for mt in sizes}
    for r in range(reps):  # sizes interleaved so each sees the same machine load
        prompt = layout("cache-friendly", static, questions[r]["text"], "x")
        gen.generate(prompt, max_tokens=1)  # untimed: prefill once, so every size starts from the same cache
        for mt in sizes:
            g = gen.generate(prompt, max_tokens=mt)
            runs[mt]["total"].append(g.timings.total_ms)
            runs[mt]["decode"].append(g.timings.total_ms - (g.timings.ttft_ms or 0))
            runs[mt]["comp"].append(g.usage.completion_tokens)
    base_total = statistics.median(runs[sizes[0]]["total"])
    for mt in sizes:
        t, dec = statistics.median(runs[mt]["total"]), statistics.median(runs[mt]["decode"])
        lines.append(f"| {mt} | {statistics.mean(runs[mt]['comp']):.0f} | {t:.0f} | {dec:.0f} | "
                     f"{dec / mt:.2f} | {t / base_total:.2f}× |")
    return lines


def bench_routing(n_factual: int, squad: Path = SQUAD) -> list[str]:
    corpus, questions = load_squad(squad)
    tok = Tokenizer()
    conf = LLMConfig(tiers=[
        TierConfig(name="small", backend="extractive", context_window=16384, price_in_per_1k=0.00015,
                   price_out_per_1k=0.0006),
        TierConfig(name="large", backend="extractive", context_window=128000, price_in_per_1k=0.0025,
                   price_out_per_1k=0.01)],
        router=RouterConfig(faq={"What are the support hours?": "9:00-17:00 CET, Monday to Friday."}))
    router = Router(conf, generators={"small": ExtractiveGenerator(tokenizer=tok),
                                      "large": ExtractiveGenerator(tokenizer=tok)})
    reqs: list[tuple[str, str | None, dict[str, Any] | None]] = []
    factual = [q for q in questions if q["answers"]][: n_factual]
    for k, fq in enumerate(factual):
        reqs.append((fq["text"], "extraction" if k % 5 == 0 else None, fq))
    for k, fq in enumerate(factual[:20]):
        body = fq["text"].rstrip("? ")
        reqs.append((HARD_TEMPLATES[k % 2].format(q=body[0].lower() + body[1:]), None, fq))
    reqs += [(h, None, None) for h in HANDLER_QS]
    reqs += [("what are the support hours", "faq", None)] * 5
    served: dict[str, int] = {}
    cost = large_cost = 0.0
    escalated = 0
    for question, task, q in reqs:
        h = router.handle(question)
        if h is not None:
            served[h.decision.tier.split(":")[0]] = served.get(h.decision.tier.split(":")[0], 0) + 1
            continue
        ctx_texts: list[str] = []
        if q is not None:
            gold = next((c for c in corpus if any(a.lower() in c["text"].lower() for a in q["answers"])), None)
            ctx_texts = ([gold["text"]] if gold else []) + [corpus[(len(ctx_texts) + 31 * len(question)) %
                                                                   len(corpus)]["text"]]
        ctx = [Scored(Chunk(id=f"c{i}", doc_id=f"d{i}", text=t), score=1.0 - 0.1 * i) for i, t in enumerate(ctx_texts)]
        docs = "\n".join(f"[{i + 1}] {t}" for i, t in enumerate(ctx_texts))
        p = make_prompt([("system", PromptConfig().system), ("user", f"{docs}\n\nQuestion: {question}")],
                        static_prefix=PromptConfig().system, count=tok.count)
        out = router.generate(p, question=question, max_tokens=128, context=ctx, task=task)
        served[out.decision.tier] = served.get(out.decision.tier, 0) + 1
        escalated += out.decision.escalated
        cost += out.decision.estimated_cost
        large_cost += out.decision.always_large_cost
    total = len(reqs)
    lines = [f"{total} requests: {n_factual} SQuAD questions (every 5th tagged task=extraction), 20 hard rewrites "
             "of them (\"Explain why … compare …\"), 10 handler questions (arithmetic, units, dates), 5 FAQ hits; "
             "context = the paragraph holding the answer + one distractor; tiers priced like a small/large "
             "hosted pair ($0.15/$0.60 and $2.50/$10 per 1M in/out); both tiers run the extractive backend here, "
             "so costs come from real token counts, not from model quality.", "",
             "| served by | requests | share |", "|---|---|---|"]
    for tier in ("handler", "small", "large"):
        lines.append(f"| {tier} | {served.get(tier, 0)} | {served.get(tier, 0) / total:.0%} |")
    lines += ["", f"- escalated small → large: {escalated}",
              f"- estimated cost: ${cost:.5f} routed vs ${large_cost:.5f} always-large "
              f"({cost / large_cost:.1%} of always-large; handler requests cost $0 in both columns)"]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--static-tokens", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--snippet-chars", type=int, default=SNIPPET_CHARS)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", choices=("prefix", "output", "routing"), default=None)
    ap.add_argument("--data", default=str(EVAL_DATA), help="folder holding squad2/ (default: %(default)s)")
    args = ap.parse_args(argv)
    squad = data_dir(Path(args.data) / "squad2", "corpus.jsonl", "questions.jsonl")
    with tempfile.TemporaryDirectory() as tmp:
        model = write_random_gguf(Path(tmp) / "bench.gguf", GGUFSpec(layers=args.layers, dim=args.dim, heads=4,
                                                                      ff=args.dim * 3, context_length=4096))
        print(f"model: random llama GGUF, {args.layers} layers, dim {args.dim}, ff {args.dim * 3}, n_ctx 4096, "
              f"{args.threads} threads\n")
        if args.only in (None, "prefix"):
            print("### Prefix layout (TTFT)\n")
            print("\n".join(bench_prefix(model, args.static_tokens, args.requests, args.threads,
                                        args.snippet_chars, squad)) + "\n")
        if args.only in (None, "output"):
            print("### Output length (in-process llama.cpp)\n")
            print("\n".join(bench_output(model, args.reps, args.threads, squad)) + "\n")
    if args.only in (None, "routing"):
        print("### Routing\n")
        print("\n".join(bench_routing(60, squad)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

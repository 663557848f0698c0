"""``ragbudget bench replay|traffic|compare`` and ``ragbudget info``.

The project's own benchmarks (headline, micro-batching, ...) are scripts in ``benchmarks/`` of a checkout;
``ragbudget bench headline`` and ``bench microbatch`` only say so (:mod:`.moved`)."""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from ..config import Config, load_config
from ..errors import ConfigError
from .moved import add_moved
from .output import err_console, output_file, plain, report_failures, result_bar

if TYPE_CHECKING:
    from ..eval.replay import ReplayReport


def add_parser(sub: Any) -> None:
    b = sub.add_parser("bench", help="replay traffic, generate traffic, A/B configs")
    bs = b.add_subparsers(dest="bench_command", metavar="KIND")

    p = bs.add_parser("replay", help="replay a traffic file against the library or a running API")
    p.add_argument("traffic", help="traffic JSONL (see ragbudget/eval/traffic.py)")
    p.add_argument("--url", default=None, help="base URL of a running `ragbudget serve` (default: in process)")
    p.add_argument("--index", default=None,
                   help="index to query (in process or --url); default: each line's index, else the default")
    p.add_argument("--rate", type=float, default=None, help="arrivals/s for lines without 't'")
    p.add_argument("--speed", type=float, default=1.0, help="time compression of arrivals (2 = twice as fast)")
    p.add_argument("--max-requests", type=int, default=1000)
    p.add_argument("--max-seconds", type=float, default=300.0)
    p.add_argument("--max-in-flight", type=int, default=64)
    p.add_argument("--api-key", action="append", default=[], metavar="TENANT=KEY", help="API key per tenant")
    p.add_argument("--json", default=None, metavar="OUT", help="write summary + per-request records here")
    p.add_argument("--plot", default=None, metavar="OUT.png")
    p.set_defaults(handler=_replay)

    p = bs.add_parser("traffic", help="synthesise a traffic file from a dataset")
    p.add_argument("dataset", help="answers/BEIR folder, questions JSONL or text file (one question per line)")
    p.add_argument("--out", required=True)
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--rate", type=float, default=2.0, help="Poisson arrivals per second")
    p.add_argument("--repeat", type=float, default=0.2)
    p.add_argument("--paraphrase", type=float, default=0.1)
    p.add_argument("--pairs", default=None, help="label/text_a/text_b TSV (e.g. MRPC): paraphrases from pairs")
    p.add_argument("--tenants", default="default", help="comma-separated, assigned round robin")
    p.add_argument("--batch-share", type=float, default=0.0)
    p.add_argument("--history-max", type=int, default=0)
    p.add_argument("--max-tokens", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(handler=_traffic)

    p = bs.add_parser("compare", help="A/B two configs on the same traffic, interleaved, with ratios")
    p.add_argument("a", help="config A (YAML)")
    p.add_argument("b", help="config B (YAML)")
    p.add_argument("--traffic", required=True)
    p.add_argument("--ingest", default=None, help="ingest this corpus into a fresh temporary index for each")
    p.add_argument("--max-requests", type=int, default=200)
    p.add_argument("--max-seconds", type=float, default=600.0)
    p.add_argument("--json", default=None)
    p.set_defaults(handler=_compare)

    for q in bs.choices.values():  # nested commands: accept --config after the command too
        if q.prog.split()[-1] != "compare":
            q.add_argument("--config", dest="config", default=argparse.SUPPRESS, help="YAML config")
    for name, script in (("headline", "headline.py"), ("microbatch", "microbatch.py")):
        add_moved(bs, name, f"ragbudget bench {name}", f".venv/bin/python benchmarks/{script}")

    i = sub.add_parser("info", help="config summary, indexes, KV-cache capacity of configured tiers")
    i.add_argument("--json", action="store_true")
    i.set_defaults(handler=_info)


def _cfg(args: argparse.Namespace) -> Config:
    return load_config(getattr(args, "config", None))


def _replay(args: argparse.Namespace) -> int:
    from ..eval.outcome import check_indexes, failures
    from ..eval.replay import HttpTarget, LibraryTarget, plot, replay, rich_table
    from ..eval.traffic import load_traffic
    from ..pipeline import RAG

    output_file(args.json, "--json")  # a bad output path fails now, not after the replay
    output_file(args.plot, "--plot")
    console = Console()
    records = load_traffic(args.traffic, rate=args.rate)
    keys = {}
    for kv in args.api_key:
        tenant, sep, key = kv.partition("=")
        if not sep or not tenant or not key:
            raise ConfigError(f"--api-key {kv!r} is not TENANT=KEY", fix="e.g. --api-key acme=sk-123")
        keys[tenant] = key
    n = min(len(records), args.max_requests or len(records))
    rag = None
    if not args.url:  # a missing index is reported before any model loads
        rag = RAG(_cfg(args), index=args.index)
        try:
            check_indexes(rag, [args.index or r.index for r in records[:n]])
        except BaseException:
            rag.close()
            raise

    async def go() -> ReplayReport:
        with result_bar(n, "replaying") as on_result:
            kw = dict(max_requests=args.max_requests, max_s=args.max_seconds, speed=args.speed,
                      max_in_flight=args.max_in_flight, on_result=on_result)
            if rag is None:
                target = HttpTarget(args.url, api_keys=keys, index=args.index)
                try:
                    return await replay(records, target, **kw)  # type: ignore[arg-type]
                finally:
                    await target.aclose()
            return await replay(records, LibraryTarget(rag, index=args.index), **kw)  # type: ignore[arg-type]

    try:
        if rag is not None:
            rag.warm_up()
        report = asyncio.run(go())
    finally:
        if rag is not None:
            rag.close()
    summary = report.summary()
    console.print(rich_table(summary, title=f"replay of {args.traffic} → {report.target}"))
    if args.json:
        Path(args.json).write_text(report.to_json(), encoding="utf-8")
    if args.plot:
        plot(report.results, args.plot, title=Path(args.traffic).name)
        plain(err_console(), f"plot written to {args.plot}", soft_wrap=True)
    return report_failures({report.target: summary}, failed=len(failures(report.results)),
                           aborted=report.aborted)


def _traffic(args: argparse.Namespace) -> int:
    from ..eval.traffic import generate, load_pairs, load_questions, save_traffic

    output_file(args.out, "--out")
    pairs = load_pairs(args.pairs) if args.pairs else None
    questions = [] if pairs else load_questions(args.dataset)
    recs = generate(questions, args.n, rate=args.rate, repeat=args.repeat, paraphrase_rate=args.paraphrase,
                    seed=args.seed, tenants=[t for t in args.tenants.split(",") if t] or ["default"],
                    batch_share=args.batch_share, history_max=args.history_max, max_tokens=args.max_tokens,
                    pairs=pairs)
    save_traffic(recs, args.out)
    kinds = {k: sum(r.kind == k for r in recs) for k in ("fresh", "repeat", "paraphrase")}
    print(f"wrote {len(recs)} requests over {recs[-1].t:.1f} s to {args.out}: {kinds}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from ..embed.encoder import EmbeddingCache, SentenceTransformerEmbedder
    from ..eval import compare as compare_mod
    from ..eval.outcome import check_indexes, failures
    from ..eval.replay import LibraryTarget
    from ..eval.traffic import load_traffic
    from ..pipeline import RAG
    from .index_cmds import ingest_progress

    output_file(args.json, "--json")  # a bad output path fails now, not after both runs
    records = load_traffic(args.traffic)
    cfgs = [load_config(args.a), load_config(args.b)]
    n = min(len(records), args.max_requests or len(records))
    with tempfile.TemporaryDirectory(prefix="ragbudget-compare-") as tmp:
        emb = None
        rags = []
        try:
            for i, cfg in enumerate(cfgs):
                if args.ingest:
                    cfg = cfg.with_overrides({"index.dir": str(Path(tmp) / f"idx{i}")})
                    if emb is None:  # one model, one embedding cache for both sides
                        emb = SentenceTransformerEmbedder(cfg.embedding,
                                                          cache=EmbeddingCache(Path(tmp) / "emb.sqlite"))
                rags.append(RAG(cfg, embedder=emb))
                if not args.ingest:  # before any model loads
                    check_indexes(rags[-1], [r.index for r in records[:n]])
            for rag in rags:
                rag.warm_up()
                if args.ingest:
                    with ingest_progress(Console(stderr=True), False) as progress:
                        rag.ingest(args.ingest, progress=progress)
            with result_bar(2 * n, "comparing") as on_result:
                rep = compare_mod.run_compare(records, LibraryTarget(rags[0], name=f"A {Path(args.a).name}"),
                                              LibraryTarget(rags[1], name=f"B {Path(args.b).name}"),
                                              max_requests=args.max_requests, max_s=args.max_seconds,
                                              on_result=on_result)
        finally:
            for r in rags:
                r.close()
    summary = rep.summary()
    Console().print(compare_mod.compare_table(summary))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1), encoding="utf-8")
    return report_failures({"A": summary["a"], "B": summary["b"]}, failed=len(failures(rep.a + rep.b)),
                           aborted=rep.aborted)


def info_dict(cfg: Config) -> dict[str, Any]:
    """What ``ragbudget info`` shows: config summary, indexes, KV rows (and KV problems)."""
    from ..budget.kv_memory import check_config, summary_rows
    from ..index.backends import make_backend

    try:
        check_config(cfg)
        kv_problem = None
    except ConfigError as err:
        kv_problem = str(err)
    backend = make_backend(cfg)  # the configured backend's indexes (postgres: the database's, not a folder's)
    try:
        indexes = backend.list()
    finally:
        backend.close()
    return {
        "embedding": cfg.embedding.model, "tokenizer": cfg.tokenizer.encoding,
        "retrieval": f"{cfg.retrieval.mode} top_k={cfg.retrieval.top_k} candidates={cfg.retrieval.candidates}",
        "rerank": f"{cfg.rerank.kind} top_n={cfg.rerank.top_n}",
        "budget": {"window": cfg.budget.context_window,
                   **{n: getattr(cfg.budget, n).cap for n in ("system", "history", "retrieved", "question", "output")}},
        "cache": f"{cfg.cache.backend} response={cfg.cache.response} retrieval={cfg.cache.retrieval} "
                 f"semantic={cfg.cache.semantic.enabled}",
        "tiers": [f"{t.name}: {t.backend} {t.model} window={t.context_window}" for t in cfg.llm.tiers],
        "index_backend": cfg.index.backend,
        "index_dir": cfg.index.dir if cfg.index.backend == "local" else None, "indexes": indexes,
        "kv": summary_rows(cfg.llm.tiers), "kv_problem": kv_problem,
    }


def _info(args: argparse.Namespace) -> int:
    d = info_dict(_cfg(args))
    if args.json:
        print(json.dumps(d, indent=1))
        return 0 if d["kv_problem"] is None else 1
    c = Console()
    t = Table(title="ragbudget configuration", show_header=False)
    for k in ("embedding", "tokenizer", "retrieval", "rerank", "budget", "cache", "tiers", "index_backend",
              "index_dir", "indexes"):
        v = d[k]
        if v is None:
            continue
        t.add_row(k, ", ".join(f"{a}={b}" for a, b in v.items()) if isinstance(v, dict)
                  else "\n".join(v) if isinstance(v, list) else str(v))
    c.print(t)
    if d["kv"]:
        kv = Table(title="KV cache per tier")
        cols = ["tier", "model", "kib_per_token", "context", "gib_per_request", "memory_gib", "tokens",
                "max_concurrent", "fits"]
        for col in cols:
            kv.add_column(col)
        for row in d["kv"]:
            kv.add_row(*(str(row.get(col, "-")) for col in cols))
        c.print(kv)
    else:
        c.print("KV cache: no tier has a `kv` spec (layers, kv_heads, head_dim, kv_dtype_bytes, memory_gb)")
    if d["kv_problem"]:
        c.print(f"[red]KV problem:[/red] {d['kv_problem']}")
        return 1
    return 0

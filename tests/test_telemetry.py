"""OpenTelemetry traces (issue 15): one span per stage of a real query on a real index, checked with the SDK's
in-memory exporter; off means opentelemetry is never imported by ragbudget; a collector that is down drops
and counts spans while requests answer 200. Also the Prometheus histograms a served request leaves behind."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from service_fixtures import KEYS

pytest.importorskip("opentelemetry.sdk")
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from ragbudget.pipeline import RAG  # noqa: E402
from ragbudget.service.app import BackgroundServer, create_app  # noqa: E402
from ragbudget.observe.telemetry import NOOP, OtelTracer, make_tracer  # noqa: E402

QUESTION = "what similarity laws must be obeyed when constructing aeroelastic models of heated high speed aircraft"
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def traced(cranfield_rag, service_config) -> Iterator[tuple[RAG, InMemorySpanExporter]]:
    cfg = service_config.with_overrides({"telemetry.enabled": True})
    exporter = InMemorySpanExporter()
    rag = RAG(cfg, embedder=cranfield_rag.embedder, tracer=OtelTracer(cfg.telemetry, exporter=exporter))
    yield rag, exporter
    rag.tracer.shutdown()


def _app_provider() -> TracerProvider:
    """The process's global SDK tracer provider, as an application sets it (set once per process)."""
    current = trace.get_tracer_provider()
    if not isinstance(current, TracerProvider):
        trace.set_tracer_provider(TracerProvider())
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    return provider


def test_spans_go_through_the_applications_global_tracer_provider(cranfield_rag, service_config):
    # issue 29: the application's provider (here the SDK's in-memory exporter) receives the spans; ragbudget
    # builds no provider or exporter of its own and does not shut the application's down
    exporter = InMemorySpanExporter()
    _app_provider().add_span_processor(SimpleSpanProcessor(exporter))
    cfg = service_config.with_overrides({"telemetry.enabled": True})
    assert cfg.telemetry.exporter == "app"
    rag = RAG(cfg, embedder=cranfield_rag.embedder)
    assert isinstance(rag.tracer, OtelTracer)
    assert rag.tracer.provider is None and rag.tracer.exporter is None and not rag.tracer.owns_provider
    rag.query(QUESTION + " in wind tunnels", index="default")
    rag.close()
    names = {s.name for s in exporter.get_finished_spans()}
    assert {"query", "cache", "retrieve", "embed", "context", "budget", "prompt", "route", "generate"} <= names
    assert all(s.instrumentation_scope.name == "ragbudget" for s in exporter.get_finished_spans()
               if s.name in ("query", "retrieve"))
    exporter.clear()
    with trace.get_tracer("app").start_as_current_span("still-open"):  # the app's provider was not shut down
        pass
    assert [s.name for s in exporter.get_finished_spans()] == ["still-open"]


def test_a_provider_passed_in_gets_the_spans_even_with_telemetry_off(cranfield_rag, service_config):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    assert not service_config.telemetry.enabled
    tracer = make_tracer(service_config.telemetry, provider=provider)
    rag = RAG(service_config, embedder=cranfield_rag.embedder, tracer=tracer)
    rag.query(QUESTION + " for flutter", index="default")
    rag.close()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert {"query", "retrieve", "generate"} <= set(spans)
    assert spans["retrieve"].parent.span_id == spans["query"].context.span_id


def _spans(rag: RAG, exporter: InMemorySpanExporter) -> dict[str, list]:
    assert rag.tracer.flush()
    out: dict[str, list] = {}
    for s in exporter.get_finished_spans():
        out.setdefault(s.name, []).append(s)
    return out


def test_off_by_default_is_the_noop_tracer(service_config):
    assert make_tracer(service_config.telemetry) is NOOP
    on = service_config.with_overrides({"telemetry.enabled": True}).telemetry
    assert make_tracer(on, environ={"OTEL_SDK_DISABLED": "true"}) is NOOP
    t = make_tracer(on, exporter=InMemorySpanExporter(), environ={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:1"})
    assert t.enabled and t.endpoint == "http://h:1/v1/traces"
    t.shutdown()


def test_one_span_per_stage_with_parents_and_attributes(traced):
    rag, exporter = traced
    ans = rag.query(QUESTION, index="default")
    spans = _spans(rag, exporter)
    for name in ("query", "cache", "retrieve", "embed", "context", "budget", "rerank", "trim", "prompt", "route",
                 "generate"):
        assert name in spans, f"no {name!r} span in {sorted(spans)}"
    (root,) = spans["query"]
    assert root.parent is None
    tid = root.context.trace_id
    assert all(s.context.trace_id == tid for group in spans.values() for s in group)
    by_id = {s.context.span_id: s for group in spans.values() for s in group}

    def parent(name: str) -> str:
        return by_id[spans[name][0].parent.span_id].name

    for name in ("retrieve", "context", "route", "generate"):
        assert parent(name) == "query"
    assert {s.parent.span_id for s in spans["cache"]} == {root.context.span_id}
    assert parent("embed") == parent("dense") == "retrieve"
    assert parent("budget") == parent("rerank") == parent("prompt") == "context"
    # children lie inside their parents
    for name in ("embed", "budget", "rerank", "prompt"):
        child, up = spans[name][0], by_id[spans[name][0].parent.span_id]
        assert up.start_time <= child.start_time <= child.end_time <= up.end_time

    gen = spans["generate"][0].attributes
    assert gen["gen_ai.operation.name"] == "chat"
    assert gen["gen_ai.request.model"] == ans.ledger.route["model"]
    assert gen["gen_ai.usage.output_tokens"] == ans.usage.completion_tokens
    assert gen["gen_ai.usage.input_tokens"] == ans.usage.prompt_tokens
    assert spans["route"][0].attributes["ragbudget.route"] == ans.route
    assert root.attributes["ragbudget.cache.layer"] == "miss"
    assert root.attributes["ragbudget.route"] == ans.route
    assert root.attributes["ragbudget.kernels.tokens.retrieved"] == ans.ledger.sections["retrieved"].used
    budget = spans["budget"][0].attributes
    assert budget["ragbudget.budget.allocate.retrieved"] == ans.ledger.sections["retrieved"].budget
    response_cache = [s for s in spans["cache"] if s.attributes["ragbudget.cache.kind"] == "response"]
    assert response_cache[0].attributes["ragbudget.cache.hit"] is False

    exporter.clear()
    again = rag.query(QUESTION, index="default")  # the response cache answers: no retrieval ran
    spans = _spans(rag, exporter)
    assert again.cache_layer == "exact"
    assert spans["query"][0].attributes["ragbudget.cache.layer"] == "exact"
    assert spans["cache"][0].attributes["ragbudget.cache.hit"] is True
    assert "retrieve" not in spans and "generate" not in spans


def test_served_request_span_parents_admission_and_query_and_metrics(traced):
    rag, exporter = traced
    with BackgroundServer(create_app(rag, rag.config)) as srv:
        r = httpx.post(srv.url + "/v1/query", json={"question": QUESTION + " today", "index": "default"},
                       headers={"authorization": f"Bearer {KEYS['acme']}"}, timeout=60)
        assert r.status_code == 200, r.text
        metrics = httpx.get(srv.url + "/metrics", headers={"authorization": f"Bearer {KEYS['acme']}"}, timeout=10).text
    spans = _spans(rag, exporter)
    (req,) = spans["request"]
    assert spans["admission"][0].parent.span_id == req.context.span_id
    assert spans["query"][0].parent.span_id == req.context.span_id
    assert spans["admission"][0].attributes["ragbudget.stages.admission.decision"] == "admitted"
    # Prometheus: TTFT from arrival, queue wait and every stage, after one request
    assert 'ragbudget_server_ttft_seconds_count{route="extractive",stream="false"} 1.0' in metrics
    assert "ragbudget_admission_queue_wait_seconds_count" in metrics
    for stage in ("retrieve", "rerank", "budget", "prompt", "route", "generate", "cache_response"):
        assert f'ragbudget_stage_duration_seconds_count{{stage="{stage}"}}' in metrics


def test_stream_is_traced_and_counted(traced):
    rag, exporter = traced
    with BackgroundServer(create_app(rag, rag.config)) as srv:
        with httpx.stream("POST", srv.url + "/v1/query", json={"question": QUESTION + " now", "stream": True},
                          headers={"authorization": f"Bearer {KEYS['acme']}"}, timeout=60) as r:
            body = "".join(r.iter_text())
        assert r.status_code == 200 and "event: final" in body
        metrics = httpx.get(srv.url + "/metrics", headers={"authorization": f"Bearer {KEYS['acme']}"}, timeout=10).text
    spans = _spans(rag, exporter)
    (req,) = spans["request"]
    assert spans["query"][0].parent.span_id == req.context.span_id  # across the pipeline's worker thread
    assert "generate" in spans
    assert 'ragbudget_server_ttft_seconds_count{route="extractive",stream="true"} 1.0' in metrics


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again on exit: connections are refused


def test_collector_down_drops_and_counts_requests_unaffected(cranfield_rag, service_config):
    cfg = service_config.with_overrides({"telemetry": {
        "enabled": True, "exporter": "otlp", "otlp_endpoint": f"http://127.0.0.1:{_closed_port()}/v1/traces", "export_timeout_s": 0.5}})
    rag = RAG(cfg, embedder=cranfield_rag.embedder)  # the real OTLP/HTTP exporter, from config
    try:
        with BackgroundServer(create_app(rag, cfg)) as srv:
            r = httpx.post(srv.url + "/v1/query", json={"question": QUESTION + " please"},
                           headers={"authorization": f"Bearer {KEYS['acme']}"}, timeout=60)
            assert r.status_code == 200, r.text
            assert r.json()["answer"]
            rag.tracer.flush(timeout_s=5)
            metrics = httpx.get(srv.url + "/metrics", headers={"authorization": f"Bearer {KEYS['acme']}"}, timeout=10).text
    finally:
        rag.tracer.shutdown()
    line = next(x for x in metrics.splitlines() if x.startswith("ragbudget_trace_spans_dropped_total"))
    assert float(line.split()[-1]) >= 10  # request, admission, query and its stages


BLOCKER = textwrap.dedent("""
    import builtins, json, sys
    attempts = []
    real_import = builtins.__import__
    def spy(name, globals=None, locals=None, fromlist=(), level=0):
        if name.split(".")[0] == "opentelemetry":
            attempts.append((globals or {}).get("__name__", "?"))
        return real_import(name, globals, locals, fromlist, level)
    builtins.__import__ = spy
    from ragbudget import RAG
    from ragbudget.config import Config
    import ragbudget.service.app
    rag = RAG(Config().with_overrides({"index.dir": sys.argv[1]}))
    ans = rag.query("what is 12 * 7")
    ours = [a for a in attempts if a.startswith("ragbudget")]
    sdk = sorted(m for m in sys.modules if m.startswith(("opentelemetry.sdk.trace", "opentelemetry.exporter")))
    print(json.dumps({"answer": ans.answer, "ours": ours, "sdk": sdk, "tracer": type(rag.tracer).__name__}))
""")


def test_telemetry_off_imports_nothing_from_opentelemetry(tmp_path):
    # third-party libraries (FastAPI, redis) import the OpenTelemetry API themselves; ragbudget must not
    # import any of it, and neither the tracing SDK nor an exporter may be loaded
    out = subprocess.run([sys.executable, "-c", BLOCKER, str(tmp_path)], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"answer": "84", "ours": [], "sdk": [], "tracer": "Tracer"}

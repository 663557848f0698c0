"""One metrics path: what an :class:`~ragbudget.types.Answer` records goes to Prometheus here.

Each :class:`Metrics` owns its own ``CollectorRegistry`` (no process-global registry), so several apps or
tests in one process never collide. The service calls :meth:`Metrics.observe_answer` after each request
and :meth:`Metrics.observe_admission` for each admission decision; ``GET /metrics`` serves
:meth:`Metrics.render`.

Durations are exported in seconds (``*_seconds`` histograms, Prometheus convention); the pipeline keeps its
timings in milliseconds and they are converted here. Several worker processes (``ragbudget serve --workers N``)
share one view through prometheus-client's multiprocess mode: :func:`multiprocess_dir` gives the workers a fresh
``PROMETHEUS_MULTIPROC_DIR`` (prometheus-client's own variable, read when it is imported: every worker's values
go to files there), and :meth:`Metrics.render` then sums every worker's files with ``MultiProcessCollector``,
so any worker's ``/metrics`` shows the same totals.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from ..types import Answer

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# Seconds: sub-ms cache hits up to minute-long generations.
LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
ITL_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


def _s(ms: float) -> float:
    return ms / 1000.0


@contextlib.contextmanager
def multiprocess_dir(environ: dict[str, str] | None = None) -> Iterator[str]:
    """A fresh ``PROMETHEUS_MULTIPROC_DIR`` for the worker processes started inside the block (they inherit
    the environment), removed afterwards. One the caller already set is used as it is and kept."""
    env = os.environ if environ is None else environ
    given = env.get(MULTIPROC_ENV)
    if given:
        os.makedirs(given, exist_ok=True)
        yield given
        return
    path = tempfile.mkdtemp(prefix="ragbudget-metrics-")
    env[MULTIPROC_ENV] = path
    try:
        yield path
    finally:
        env.pop(MULTIPROC_ENV, None)
        shutil.rmtree(path, ignore_errors=True)


class Metrics:
    """Prometheus collectors for one app, in a private registry."""

    def __init__(self, namespace: str = "ragbudget", *, multiprocess_dir: str | None = None) -> None:
        """``multiprocess_dir`` (default: ``$PROMETHEUS_MULTIPROC_DIR``, as prometheus-client reads it): render
        the sum over every process writing there."""
        self.multiprocess_dir = multiprocess_dir or os.environ.get(MULTIPROC_ENV) or None
        self.registry = CollectorRegistry(auto_describe=True)
        r, ns = self.registry, namespace
        self.ttft = Histogram("ttft_seconds", "Time to first token in the pipeline, from the start of the query",
                              ["route"], namespace=ns, registry=r, buckets=LATENCY_BUCKETS_S)
        self.server_ttft = Histogram("server_ttft_seconds", "Time to first token from the request's arrival at the "
                                     "server: admission queue and degradation included", ["route", "stream"],
                                     namespace=ns, registry=r, buckets=LATENCY_BUCKETS_S)
        self.itl = Histogram("inter_token_latency_seconds", "Inter-token latency", ["route"], namespace=ns,
                             registry=r, buckets=ITL_BUCKETS_S)
        self.e2e = Histogram("request_duration_seconds", "End-to-end request time", ["route"], namespace=ns,
                             registry=r, buckets=LATENCY_BUCKETS_S)
        self.stage = Histogram("stage_duration_seconds", "Duration per pipeline stage", ["stage"],
                               namespace=ns, registry=r, buckets=LATENCY_BUCKETS_S)
        self.section_tokens = Counter("section_tokens", "Tokens used per budget section", ["section"],
                                      namespace=ns, registry=r)
        self.dropped_items = Counter("section_dropped_items", "Items dropped per budget section",
                                     ["section"], namespace=ns, registry=r)
        self.prompt_tokens = Counter("prompt_tokens", "Prompt tokens sent to a model", ["route"],
                                     namespace=ns, registry=r)
        self.cached_prompt_tokens = Counter("cached_prompt_tokens", "Prompt tokens served from a prefix cache",
                                            ["route"], namespace=ns, registry=r)
        self.completion_tokens = Counter("completion_tokens", "Completion tokens generated", ["route"],
                                         namespace=ns, registry=r)
        self.saved_tokens = Counter("saved_tokens", "Model tokens a response-cache hit did not spend again "
                                    "(not in prompt/completion tokens)", ["kind"], namespace=ns, registry=r)
        self.saved_cost = Counter("saved_cost", "Estimated model cost a response-cache hit did not spend again",
                                  namespace=ns, registry=r)
        self.cache = Counter("cache_lookups", "Cache lookups by layer and result", ["layer", "result"],
                             namespace=ns, registry=r)
        self.requests = Counter("requests", "Answered requests", ["tenant", "route", "degrade_level"],
                                namespace=ns, registry=r)
        self.admission = Counter("admission_decisions", "Admission decisions",
                                 ["tenant", "priority", "decision"], namespace=ns, registry=r)
        self.queue_wait = Histogram("admission_queue_wait_seconds", "Time spent waiting for a slot",
                                    ["priority"], namespace=ns, registry=r, buckets=LATENCY_BUCKETS_S)
        # across worker processes: the highest level of a live worker, the sum of queues and slots in use
        self.degrade_level = Gauge("degrade_level", "Current degradation level (0 normal … 5 reject)",
                                   namespace=ns, registry=r, multiprocess_mode="livemax")
        self.queue_depth = Gauge("admission_queue_depth", "Requests waiting for a slot", namespace=ns,
                                 registry=r, multiprocess_mode="livesum")
        self.in_flight = Gauge("in_flight", "Requests holding a slot", namespace=ns, registry=r,
                               multiprocess_mode="livesum")
        self.spans_dropped = Counter("trace_spans_dropped", "OpenTelemetry spans dropped because their export "
                                     "failed (collector down or refusing)", namespace=ns, registry=r)
        self.errors = Counter("errors", "Requests answered with an error", ["type"], namespace=ns, registry=r)
        self.prefix_changes = Counter("static_prefix_changes", "Requests whose static prompt prefix differed from "
                                      "the previous one of its mode (a prefix-cache miss on every engine)",
                                      ["mode", "part"], namespace=ns, registry=r)

    def observe_answer(self, answer: Answer, tenant: str) -> None:
        """Record everything an answer carries: timings, tokens per section, usage, cache layer, route."""
        route = answer.route or "unknown"
        t = answer.timings
        if t.ttft_ms is not None:
            self.ttft.labels(route).observe(_s(t.ttft_ms))
        for gap in t.itl_ms:
            self.itl.labels(route).observe(_s(gap))
        if t.total_ms:
            self.e2e.labels(route).observe(_s(t.total_ms))
        for stage, ms in t.stages.items():
            self.stage.labels(stage).observe(_s(ms))
        for name, sec in answer.ledger.sections.items():
            self.section_tokens.labels(name).inc(max(0, sec.used))
            if sec.dropped:
                self.dropped_items.labels(name).inc(len(sec.dropped))
        u = answer.usage
        self.prompt_tokens.labels(route).inc(max(0, u.prompt_tokens))
        self.cached_prompt_tokens.labels(route).inc(max(0, u.cached_tokens))
        self.completion_tokens.labels(route).inc(max(0, u.completion_tokens))
        saved = answer.ledger.saved or {}
        if saved:  # a hit spent no model tokens (usage above is zero); what it saved is counted apart
            self.saved_tokens.labels("prompt").inc(max(0, int(saved.get("prompt_tokens", 0))))
            self.saved_tokens.labels("completion").inc(max(0, int(saved.get("completion_tokens", 0))))
            self.saved_cost.inc(max(0.0, float(saved.get("cost", 0.0))))
        layer = answer.cache_layer or answer.ledger.cache_layer
        self.cache.labels(layer or "any", "hit" if layer else "miss").inc()
        self.requests.labels(tenant, route, str(answer.ledger.degrade_level)).inc()
        for flag in answer.ledger.flags:
            if flag.startswith("prefix_changed:"):
                self.prefix_changes.labels(str(answer.ledger.prompt.get("mode", "")), flag.split(":", 1)[1]).inc()

    def observe_cache(self, layer: str, hit: bool) -> None:
        self.cache.labels(layer, "hit" if hit else "miss").inc()

    def observe_admission(self, tenant: str, priority: str, decision: str, queue_wait_ms: float | None = None
                          ) -> None:
        """``decision``: admitted, queued, rejected_rate, rejected_queue, shed."""
        self.admission.labels(tenant, priority, decision).inc()
        if queue_wait_ms is not None:
            self.queue_wait.labels(priority).observe(_s(queue_wait_ms))

    def observe_server_ttft(self, route: str, ttft_ms: float, *, stream: bool) -> None:
        """TTFT as the client saw it: from arrival (before admission) to the first token or the answer."""
        self.server_ttft.labels(route or "unknown", "true" if stream else "false").observe(_s(ttft_ms))

    def observe_spans_dropped(self, n: int) -> None:
        self.spans_dropped.inc(max(0, n))

    def observe_error(self, error_type: str) -> None:
        self.errors.labels(error_type).inc()

    def set_load(self, *, degrade_level: int, queue_depth: int, in_flight: int) -> None:
        self.degrade_level.set(degrade_level)
        self.queue_depth.set(queue_depth)
        self.in_flight.set(in_flight)

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type: this registry, or under multiprocess mode the sum over
        every worker's files."""
        if self.multiprocess_dir is None:
            return generate_latest(self.registry), CONTENT_TYPE_LATEST
        from prometheus_client import multiprocess
        merged = CollectorRegistry()
        multiprocess.MultiProcessCollector(merged, path=self.multiprocess_dir)
        return generate_latest(merged), CONTENT_TYPE_LATEST

    def close(self) -> None:
        """A worker that exits: its live gauges stop counting (multiprocess mode; nothing otherwise)."""
        if self.multiprocess_dir is not None:
            from prometheus_client import multiprocess
            multiprocess.mark_process_dead(os.getpid(), self.multiprocess_dir)

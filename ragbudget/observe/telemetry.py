"""OpenTelemetry traces: one span per stage of a query, built from what the query already records.

Off by default (``telemetry.enabled``) and then free: :data:`NOOP` is returned, ``opentelemetry`` is never
imported, and the pipeline's stage timings stay a plain dict.

When on, :meth:`Tracer.trace` opens a :class:`QueryTrace` for one query. Its :attr:`QueryTrace.stages` is
the dict the pipeline already writes stage timings into (``timings.stages[name] = ms``); each write is
remembered with its end time, and :meth:`QueryTrace.end` emits the ``query`` span with one child span per
stage (explicit start and end times), attributes taken from the finished :class:`~ragbudget.types.Answer`
— the same record the Prometheus metrics read. Attribute names follow the OpenTelemetry GenAI semantic
conventions where they fit (``gen_ai.operation.name``, ``gen_ai.request.model``, ``gen_ai.usage.*``);
the rest are ``ragbudget.*``.

Spans go where the application's OpenTelemetry set-up sends them: ``opentelemetry.trace.get_tracer`` on the
global tracer provider (``telemetry.exporter: app``, the default) or on a provider passed in (``make_tracer(cfg,
provider=...)``). ragbudget exports nothing itself unless told to: ``exporter: otlp`` builds a provider of its own
with an OTLP/HTTP exporter behind a batch processor (a collector that is down costs a request nothing; the spans of
a failed export are dropped and counted: ``on_drop``, the ``ragbudget_trace_spans_dropped_total`` counter), and
``exporter: console`` one that prints each span.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from ..config import TelemetryConfig

if TYPE_CHECKING:  # pragma: no cover
    from ..types import Answer

DEFAULT_ENDPOINT = "http://127.0.0.1:4318/v1/traces"  # telemetry.exporter: otlp with nothing configured

#: Stage timing key → (span name, parent stage key or None for the query span, fixed attributes).
STAGE_SPANS: dict[str, tuple[str, str | None, dict[str, Any]]] = {
    "index": ("index", None, {}),  # the index opened (loaded from disk on its first query)
    "cache_response": ("cache", None, {"ragbudget.cache.kind": "response"}),
    "cache_retrieval": ("cache", None, {"ragbudget.cache.kind": "retrieval"}),
    "retrieve": ("retrieve", None, {"gen_ai.operation.name": "retrieval"}),
    "embed": ("embed", "retrieve", {"gen_ai.operation.name": "embeddings"}),
    "dense": ("dense", "retrieve", {}),
    "sparse": ("sparse", "retrieve", {}),
    "fusion": ("fusion", "retrieve", {}),
    "context": ("context", None, {}),
    "budget": ("budget", "context", {}),
    "rerank": ("rerank", "context", {}),
    "trim": ("trim", "context", {}),
    "prompt": ("prompt", "context", {}),
    "route": ("route", None, {}),
    "generate": ("generate", None, {"gen_ai.operation.name": "chat"}),
}


class _NoopTrace:
    """What a query gets when tracing is off: a plain dict for stage timings, nothing else."""

    __slots__ = ()

    def stages(self) -> dict[str, float]:
        return {}

    def answer(self, answer: "Answer") -> None:
        pass

    def error(self, err: BaseException) -> None:
        pass

    def end(self) -> None:
        pass


_NOOP_TRACE = _NoopTrace()


class Tracer:
    """The no-op tracer (tracing off). :class:`OtelTracer` is the real one."""

    enabled = False

    def trace(self, name: str = "query", **attrs: Any) -> Any:
        return _NOOP_TRACE

    @contextlib.contextmanager
    def request(self, name: str, **attrs: Any) -> Iterator[None]:
        """A live span around a served request (the parent of its admission and query spans)."""
        yield None

    def bind(self, fn: Callable[[], None]) -> Callable[[], None]:
        """``fn`` to run in another thread under the caller's current span (unchanged when off)."""
        return fn

    def record(self, name: str, start: float, end: float | None = None, **attrs: object) -> None:
        """A finished child span of the current one, from ``start`` to ``end`` (``time.perf_counter``)."""

    def flush(self, timeout_s: float = 5.0) -> bool:
        return True

    def shutdown(self) -> None:
        pass


NOOP = Tracer()


def _clean(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """OpenTelemetry takes str, bool, int, float or sequences of one of them; None is left out."""
    out: dict[str, Any] = {}
    for k, v in attrs.items():
        if v is None:
            continue
        if isinstance(v, (str, bool, int, float)):
            out[k] = v
        elif isinstance(v, (list, tuple)):
            out[k] = [str(x) for x in v]
        else:
            out[k] = str(v)
    return out


def answer_attributes(answer: "Answer") -> dict[str, dict[str, Any]]:
    """Attributes per span name (``query`` and stage spans) from a finished answer."""
    led, u, route = answer.ledger, answer.usage, dict(answer.ledger.route or {})
    layer = answer.cache_layer or led.cache_layer
    sections = {f"ragbudget.kernels.tokens.{name}": max(0, sec.used) for name, sec in led.sections.items()}
    budgets = {f"ragbudget.budget.allocate.{name}": sec.budget for name, sec in led.sections.items()}
    usage = {"gen_ai.usage.input_tokens": u.prompt_tokens, "gen_ai.usage.output_tokens": u.completion_tokens,
             "ragbudget.usage.cached_tokens": u.cached_tokens, "ragbudget.usage.estimated": bool(route.get(
                 "usage_estimated", False))}
    model = route.get("model")
    return {
        "query": {"ragbudget.route": answer.route, "ragbudget.cache.layer": layer or "miss",
                  "ragbudget.degrade_level": led.degrade_level, "ragbudget.partial": answer.partial,
                  "ragbudget.citations": len(answer.citations), "ragbudget.ttft_ms": answer.timings.ttft_ms,
                  "gen_ai.request.model": model, **usage, **sections},
        "cache_response": {"ragbudget.cache.layer": layer or "miss", "ragbudget.cache.hit": bool(layer)},
        "cache_retrieval": {"ragbudget.cache.hit": "retrieval_cache_hit" in led.flags},
        "retrieve": {"ragbudget.retrieved.candidates": led.sections["retrieved"].items_in
                     if "retrieved" in led.sections else None},
        "budget": {**budgets, **sections},
        "rerank": {"ragbudget.stages.context.chunks": len(answer.context)},
        "prompt": {"ragbudget.stages.prompt.tokens": led.prompt.get("total_tokens"),
                   "ragbudget.stages.prompt.static_prefix_tokens": led.prompt.get("static_prefix_tokens"),
                   "ragbudget.stages.prompt.mode": led.prompt.get("mode")},
        "route": {"ragbudget.route": answer.route, "ragbudget.route.reason": route.get("reason"),
                  "ragbudget.route.backend": route.get("backend"), "gen_ai.request.model": model},
        "generate": {"gen_ai.request.model": model, "gen_ai.response.model": model,
                     "gen_ai.provider.name": route.get("backend"), "ragbudget.route": answer.route,
                     "gen_ai.response.finish_reasons": [answer.finish_reason] if answer.finish_reason else None,
                     "ragbudget.ttft_ms": answer.timings.ttft_ms, **usage},
    }


class _Stages(dict):
    """The stage-timings dict of a traced query: remembers when each stage ended."""

    def __init__(self) -> None:
        super().__init__()
        self.ended: dict[str, int] = {}

    def __setitem__(self, key: str, ms: float) -> None:
        super().__setitem__(key, ms)
        self.ended[key] = time.perf_counter_ns()

    def update(self, *args: Any, **kw: Any) -> None:  # type: ignore[override]
        for k, v in dict(*args, **kw).items():
            self[k] = v


class QueryTrace:
    """One query's spans, emitted when it ends (see the module docstring)."""

    def __init__(self, tracer: "OtelTracer", name: str, attrs: Mapping[str, Any]) -> None:
        from opentelemetry import context as otel_context
        self._tracer, self._name = tracer, name
        self._parent = otel_context.get_current()  # the service's request span, when there is one
        self._attrs = dict(attrs)
        self._start = time.perf_counter_ns()
        self._stages = _Stages()
        self._answer: Answer | None = None
        self._error: BaseException | None = None
        self._ended = False

    def stages(self) -> dict[str, float]:
        return self._stages

    def answer(self, answer: "Answer") -> None:
        self._answer = answer

    def error(self, err: BaseException) -> None:
        self._error = err

    def end(self) -> None:
        if self._ended:
            return
        self._ended = True
        from opentelemetry import trace
        from opentelemetry.trace import Status, StatusCode
        t = self._tracer
        per = answer_attributes(self._answer) if self._answer is not None else {}
        root = t.otel.start_span(self._name, context=self._parent, start_time=t.epoch_ns(self._start),
                                 attributes=_clean({**self._attrs, **per.get("query", {})}))
        if self._error is not None:
            root.record_exception(self._error)
            root.set_status(Status(StatusCode.ERROR, f"{type(self._error).__name__}: {self._error}"))
        elif self._answer is None:
            root.set_attribute("ragbudget.cancelled", True)
        ctx = {None: trace.set_span_in_context(root)}
        spans: dict[str, Any] = {}
        for key in sorted(self._stages.ended, key=lambda k: self._stages.ended[k] - self._stages[k] * 1e6):
            name, parent, fixed = STAGE_SPANS.get(key, (key, None, {}))
            end_ns = self._stages.ended[key]
            start_ns = end_ns - int(self._stages[key] * 1e6)
            if parent is not None and parent not in spans:
                parent = None  # e.g. a stage recorded without its enclosing one
            pctx = ctx[None] if parent is None else trace.set_span_in_context(spans[parent][0])
            span = t.otel.start_span(name, context=pctx, start_time=t.epoch_ns(start_ns),
                                     attributes=_clean({**fixed, **per.get(key, {})}))
            spans[key] = (span, end_ns)
        for span, end_ns in spans.values():
            span.end(end_time=t.epoch_ns(end_ns))
        if not self._stages.ended and self._answer is not None and self._answer.route.startswith("handler:"):
            h = t.otel.start_span("route", context=ctx[None], start_time=t.epoch_ns(self._start),
                                  attributes=_clean(per.get("route", {})))
            h.end()
        root.end()


class OtelTracer(Tracer):
    """Real tracing through OpenTelemetry (``pip install 'ragbudget[otel]'``).

    Where the spans go, first match wins: ``provider`` (a ``TracerProvider`` passed in); ``exporter`` (a span
    exporter: a provider of ragbudget's own sends to it); ``cfg.exporter``: ``app`` takes
    ``opentelemetry.trace.get_tracer`` from the global provider the application set, ``otlp`` / ``console`` build
    a provider of ragbudget's own. Only a provider of its own is shut down by :meth:`shutdown`."""

    enabled = True

    def __init__(self, cfg: TelemetryConfig, *, provider: Any = None, exporter: Any = None,
                 on_drop: Callable[[int], None] | None = None, environ: Mapping[str, str] | None = None) -> None:
        try:
            from opentelemetry import trace
        except ImportError as err:  # pragma: no cover - depends on the install
            from ..errors import ConfigError
            raise ConfigError("telemetry.enabled needs OpenTelemetry",
                              fix="pip install 'ragbudget[otel]' or set telemetry.enabled: false") from err
        env = os.environ if environ is None else environ
        self.config = cfg
        self.endpoint = (cfg.otlp_endpoint or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                         or (env["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/") + "/v1/traces"
                             if env.get("OTEL_EXPORTER_OTLP_ENDPOINT") else DEFAULT_ENDPOINT))
        self.exporter: _CountingExporter | None = None
        self.owns_provider = provider is None and (exporter is not None or cfg.exporter != "app")
        if provider is not None:
            self.provider = provider
        elif not self.owns_provider:
            self.provider = None  # the global one, looked up on each use (the application may set it later)
        else:
            self.provider = self._own_provider(cfg, exporter, on_drop, env)
        self.otel = trace.get_tracer("ragbudget", _version(), tracer_provider=self.provider)
        self._offset_ns = time.time_ns() - time.perf_counter_ns()

    def _own_provider(self, cfg: TelemetryConfig, exporter: Any, on_drop: Callable[[int], None] | None,
                      env: Mapping[str, str]) -> Any:
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor
            from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
        except ImportError as err:  # pragma: no cover - depends on the install
            from ..errors import ConfigError
            raise ConfigError(f"telemetry.exporter: {cfg.exporter} needs the OpenTelemetry SDK",
                              fix="pip install 'ragbudget[otel]', or telemetry.exporter: app") from err
        service = cfg.service_name or env.get("OTEL_SERVICE_NAME") or "ragbudget"
        ratio = cfg.sample_ratio
        if ratio is None:
            try:
                ratio = float(env.get("OTEL_TRACES_SAMPLER_ARG", "1.0"))
            except ValueError:
                ratio = 1.0
        console = exporter is None and cfg.exporter == "console"
        if exporter is None and console:
            exporter = ConsoleSpanExporter(service_name=service)
        elif exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            exporter = OTLPSpanExporter(endpoint=self.endpoint, timeout=cfg.export_timeout_s)
        self.exporter = _CountingExporter(exporter, on_drop or (lambda n: None))
        provider = TracerProvider(resource=Resource.create({"service.name": service}),
                                  sampler=ParentBased(TraceIdRatioBased(min(max(ratio, 0.0), 1.0))))
        counting: Any = self.exporter  # duck-typed SpanExporter (the sdk is imported lazily)
        provider.add_span_processor(SimpleSpanProcessor(counting) if console else
                                    BatchSpanProcessor(counting, export_timeout_millis=cfg.export_timeout_s * 1000))
        return provider

    def epoch_ns(self, perf_ns: int) -> int:
        return perf_ns + self._offset_ns

    def trace(self, name: str = "query", **attrs: Any) -> QueryTrace:
        return QueryTrace(self, name, attrs)

    @contextlib.contextmanager
    def request(self, name: str, **attrs: Any) -> Iterator[Any]:
        from opentelemetry.trace import SpanKind
        with self.otel.start_as_current_span(name, kind=SpanKind.SERVER, attributes=_clean(attrs)) as span:
            yield span

    def bind(self, fn: Callable[[], None]) -> Callable[[], None]:
        from opentelemetry import context as otel_context
        ctx = otel_context.get_current()

        def run() -> None:
            token = otel_context.attach(ctx)
            try:
                fn()
            finally:
                otel_context.detach(token)
        return run

    def record(self, name: str, start: float, end: float | None = None, **attrs: object) -> None:
        end = time.perf_counter() if end is None else end
        span = self.otel.start_span(name, start_time=self.epoch_ns(int(start * 1e9)), attributes=_clean(attrs))
        span.end(end_time=self.epoch_ns(int(end * 1e9)))

    def flush(self, timeout_s: float = 5.0) -> bool:
        from opentelemetry import trace
        provider = self.provider if self.provider is not None else trace.get_tracer_provider()
        force = getattr(provider, "force_flush", None)  # the API's default provider has none
        return bool(force(int(timeout_s * 1000))) if callable(force) else True

    def shutdown(self) -> None:
        """Shuts down a provider of ragbudget's own; the application's stays the application's to close."""
        if self.owns_provider and self.provider is not None:
            self.provider.shutdown()


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("ragbudget")
    except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
        return None


class _CountingExporter:
    """Wraps a span exporter: spans of an export that failed (or raised) are counted as dropped."""

    def __init__(self, inner: Any, on_drop: Callable[[int], None]) -> None:
        self.inner, self.on_drop = inner, on_drop

    def export(self, spans: Any) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult
        try:
            result = self.inner.export(spans)
        except Exception:  # noqa: BLE001 - a broken exporter must not break the processor thread
            result = SpanExportResult.FAILURE
        if result != SpanExportResult.SUCCESS:
            self.on_drop(len(spans))
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(getattr(self.inner, "force_flush", lambda *_: True)(timeout_millis))


def make_tracer(cfg: TelemetryConfig, *, provider: Any = None, exporter: Any = None,
                on_drop: Callable[[int], None] | None = None, environ: Mapping[str, str] | None = None) -> Tracer:
    """:data:`NOOP` unless ``cfg.enabled`` or a ``provider`` is passed (and ``OTEL_SDK_DISABLED`` is not true)."""
    env = os.environ if environ is None else environ
    if (not cfg.enabled and provider is None) or env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return NOOP
    return OtelTracer(cfg, provider=provider, exporter=exporter, on_drop=on_drop, environ=env)


__all__ = ["NOOP", "OtelTracer", "QueryTrace", "STAGE_SPANS", "Tracer", "answer_attributes", "make_tracer"]

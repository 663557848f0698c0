"""Replay a traffic file against the library (a :class:`~ragbudget.pipeline.RAG`) or a running API.

Open loop: each request is sent at its arrival time ``t`` (divided by ``speed``), whatever the earlier
ones are doing, with at most ``max_in_flight`` outstanding; bounded by ``max_requests`` and ``max_s``.
TTFT and inter-token gaps are measured on the client side (first token event, then gaps between token
events) the same way for both targets; stages, tokens, route cost and cache layer come from the answer's
own record (the final SSE event carries the same :meth:`Answer.to_dict`).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

import httpx
from matplotlib.figure import Figure
from rich.table import Table

from ..errors import AdmissionError, RagBudgetError
from ..pipeline import RAG
from ..types import FinalEvent, Message, TokenEvent
from .outcome import ABORT_AFTER, all_failing, error_causes
from .ranking import percentile
from .traffic import TrafficRecord, history_for

SEARCH_STAGES = ("embed", "dense", "sparse")  # one query embedding plus the index searches


@dataclass
class RequestResult:
    """What one replayed request did (status 200 = answered)."""

    id: str
    kind: str = "fresh"
    tenant: str = "default"
    status: int = 200
    error: str | None = None
    arrival_s: float = 0.0
    ttft_ms: float | None = None
    itl_ms: list[float] = field(default_factory=list)
    e2e_ms: float = 0.0
    cache_layer: str | None = None
    route: str = ""
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    context_tokens: int = 0
    estimated_cost: float = 0.0
    always_large_cost: float = 0.0
    saved_tokens: int = 0  # a response-cache hit: model tokens not spent again (usage is zero)
    saved_cost: float = 0.0
    degrade_level: int = 0
    stages: dict[str, float] = field(default_factory=dict)
    total_ms: float = 0.0  # the pipeline's own end-to-end time (no client or transport time)
    retrieval_hit: bool = False  # retrieval cache answered the search (response cache missed)

    @property
    def ok(self) -> bool:
        return self.status == 200

    @property
    def overhead_ms(self) -> float:
        """Pipeline time outside generation: the pipeline's total minus its ``generate`` stage."""
        return max(0.0, self.total_ms - self.stages.get("generate", 0.0))

    @property
    def search_ms(self) -> float:
        """Time of the query embedding plus the dense and sparse searches (as if run one after another)."""
        return sum(self.stages.get(k, 0.0) for k in SEARCH_STAGES)


def fill_from_answer(res: RequestResult, ans: Mapping[str, Any]) -> RequestResult:
    """Copy an :meth:`Answer.to_dict` record's usage, route, cache layer and stages into ``res``."""
    u = ans.get("usage", {}) or {}
    led = ans.get("ledger", {}) or {}
    route = led.get("route", {}) or {}
    res.cache_layer = ans.get("cache_layer") or led.get("cache_layer")
    res.retrieval_hit = "retrieval_cache_hit" in (led.get("flags") or [])
    res.route = ans.get("route", "") or ""
    res.prompt_tokens = int(u.get("prompt_tokens", 0))
    res.cached_tokens = int(u.get("cached_tokens", 0))
    res.completion_tokens = int(u.get("completion_tokens", 0))
    res.context_tokens = int((led.get("sections", {}).get("retrieved") or {}).get("used", 0))
    res.estimated_cost = float(route.get("estimated_cost", 0.0) or 0.0)
    res.always_large_cost = float(route.get("always_large_cost", 0.0) or 0.0)
    saved = led.get("saved") or {}
    res.saved_tokens = int(saved.get("prompt_tokens", 0)) + int(saved.get("completion_tokens", 0))
    res.saved_cost = float(saved.get("cost", 0.0) or 0.0)
    res.degrade_level = int(ans.get("degrade_level", led.get("degrade_level", 0)) or 0)
    tim = ans.get("timings") or {}
    res.stages = {k: float(v) for k, v in (tim.get("stages") or {}).items()}
    res.total_ms = float(tim.get("total_ms", 0.0) or 0.0)
    return res


class Target(Protocol):
    name: str

    async def send(self, rec: TrafficRecord, history: list[Message]) -> RequestResult: ...


class LibraryTarget:
    """Requests go through ``rag.astream`` in this process, to ``index`` (else the record's own index,
    else the RAG's default)."""

    def __init__(self, rag: RAG, name: str = "library", index: str | None = None) -> None:
        self.rag, self.name, self.index = rag, name, index

    async def send(self, rec: TrafficRecord, history: list[Message]) -> RequestResult:
        res = RequestResult(id=rec.id, kind=rec.kind, tenant=rec.tenant, arrival_s=rec.t)
        t0 = time.perf_counter()
        last = None
        try:
            async for ev in self.rag.astream(rec.question, history=history, tenant=rec.tenant,
                                             max_tokens=rec.max_tokens, index=self.index or rec.index,
                                             mode=rec.mode):
                now = time.perf_counter()
                if isinstance(ev, TokenEvent):
                    if res.ttft_ms is None:
                        res.ttft_ms = (now - t0) * 1000
                    elif last is not None:
                        res.itl_ms.append((now - last) * 1000)
                    last = now
                elif isinstance(ev, FinalEvent):
                    fill_from_answer(res, ev.answer.to_dict())
                    if res.ttft_ms is None:
                        res.ttft_ms = (now - t0) * 1000
        except AdmissionError as err:
            res.status, res.error = 429, str(err)
        except RagBudgetError as err:
            res.status, res.error = 500, f"{type(err).__name__}: {err}"
        res.e2e_ms = (time.perf_counter() - t0) * 1000
        return res


class HttpTarget:
    """Requests go to ``POST {url}/v1/query`` with ``stream: true`` (SSE), to ``index`` (else the
    record's own index, else the server's default)."""

    def __init__(self, url: str, *, api_keys: Mapping[str, str] | None = None, timeout_s: float = 120.0,
                 max_connections: int = 64, name: str | None = None, index: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.index = index
        self.name = name or self.url
        self.api_keys = dict(api_keys or {})
        self.client = httpx.AsyncClient(base_url=self.url, timeout=timeout_s,
                                        limits=httpx.Limits(max_connections=max_connections))

    async def aclose(self) -> None:
        await self.client.aclose()

    async def send(self, rec: TrafficRecord, history: list[Message]) -> RequestResult:
        res = RequestResult(id=rec.id, kind=rec.kind, tenant=rec.tenant, arrival_s=rec.t)
        body: dict[str, Any] = {"question": rec.question, "stream": True, "priority": rec.priority,
                                "history": [{"role": m.role, "content": m.content} for m in history]}
        if rec.max_tokens:
            body["max_tokens"] = rec.max_tokens
        if self.index or rec.index:
            body["index"] = self.index or rec.index
        if rec.mode:
            body["mode"] = rec.mode
        headers = {"Authorization": f"Bearer {self.api_keys[rec.tenant]}"} if rec.tenant in self.api_keys else {}
        t0 = time.perf_counter()
        last = None
        try:
            async with self.client.stream("POST", "/v1/query", json=body, headers=headers) as r:
                if r.status_code != 200:
                    res.status, res.error = r.status_code, (await r.aread()).decode("utf-8", "replace")[:300]
                else:
                    event = ""
                    async for line in r.aiter_lines():
                        if line.startswith("event:"):
                            event = line[6:].strip()
                        elif line.startswith("data:"):
                            now = time.perf_counter()
                            if event == "token":
                                if res.ttft_ms is None:
                                    res.ttft_ms = (now - t0) * 1000
                                elif last is not None:
                                    res.itl_ms.append((now - last) * 1000)
                                last = now
                            elif event == "final":
                                fill_from_answer(res, json.loads(line[5:]))
                                if res.ttft_ms is None:
                                    res.ttft_ms = (now - t0) * 1000
                            elif event == "error":
                                res.status, res.error = 599, line[5:].strip()[:300]
        except httpx.HTTPError as err:
            res.status, res.error = 598, f"{type(err).__name__}: {err}"
        res.e2e_ms = (time.perf_counter() - t0) * 1000
        return res


@dataclass
class ReplayReport:
    target: str
    results: list[RequestResult]
    wall_s: float
    skipped: int = 0  # requests not sent because of max_requests / max_s, or after an abort
    aborted: str | None = None  # why the schedule stopped early (every request was failing)

    def summary(self) -> dict[str, Any]:
        return {**summarize(self.results, self.wall_s, skipped=self.skipped, target=self.target),
                "aborted": self.aborted}

    def to_json(self) -> str:
        return json.dumps({"summary": self.summary(), "requests": [asdict(r) for r in self.results]},
                          indent=1, default=str)


async def replay(records: Sequence[TrafficRecord], target: Target, *, max_requests: int | None = None,
                 max_s: float = 300.0, speed: float = 1.0, max_in_flight: int = 64,
                 abort_after: int | None = ABORT_AFTER,
                 on_result: Callable[[RequestResult], None] | None = None) -> ReplayReport:
    """Send ``records`` at their arrival times; stop scheduling after ``max_requests`` or ``max_s``, or
    once ``abort_after`` requests have finished and all failed (the report says so in ``aborted``).
    ``on_result`` is called with each finished request (a progress display)."""
    recs = list(records)[: max_requests or None]
    sem = asyncio.Semaphore(max_in_flight)
    results: list[RequestResult] = []

    aborted: list[str] = []

    async def fire(i: int) -> None:
        async with sem:
            if aborted:  # every request so far failed: the rest are not sent (counted as skipped)
                return
            try:
                results.append(await target.send(recs[i], history_for(recs, i)))
            except Exception as err:  # noqa: BLE001 - a crash is a result (500), never a lost request
                rec = recs[i]
                results.append(RequestResult(id=rec.id, kind=rec.kind, tenant=rec.tenant, arrival_s=rec.t,
                                             status=500, error=f"{type(err).__name__}: {err}"))
            if on_result is not None:
                on_result(results[-1])
            if abort_after and not aborted and all_failing(results, abort_after):
                aborted.append(f"stopped after the first {len(results)} requests all failed")

    tasks: dict[asyncio.Task[None], int] = {}
    t0 = time.perf_counter()
    for i, rec in enumerate(recs):
        at = rec.t / speed
        if at > max_s or aborted:
            break
        await asyncio.sleep(max(0.0, at - (time.perf_counter() - t0)))
        tasks[asyncio.create_task(fire(i))] = i
    remaining = max(0.1, max_s - (time.perf_counter() - t0))
    _, pending = await asyncio.wait(list(tasks), timeout=remaining) if tasks else (set(), set())
    for t in pending:  # still running at the deadline: cancelled and reported as client timeouts (408)
        t.cancel()
        rec = recs[tasks[t]]
        results.append(RequestResult(id=rec.id, kind=rec.kind, tenant=rec.tenant, arrival_s=rec.t, status=408,
                                     error=f"replay deadline ({max_s:g} s)", e2e_ms=max_s * 1000))
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)
    wall = time.perf_counter() - t0
    return ReplayReport(target=target.name, results=sorted(results, key=lambda r: r.arrival_s), wall_s=wall,
                        skipped=len(records) - len(results), aborted=aborted[0] if aborted else None)


def _pcts(values: Sequence[float], prefix: str) -> dict[str, float | None]:
    if not values:
        return {f"{prefix}_p{p}_ms": None for p in (50, 95, 99)}
    return {f"{prefix}_p{p}_ms": round(percentile(values, p), 2) for p in (50, 95, 99)}


def summarize(results: Sequence[RequestResult], wall_s: float, *, skipped: int = 0,
              target: str = "") -> dict[str, Any]:
    """Percentiles, throughput, cache hit rate per layer, tokens and cost of a replay."""
    ok = [r for r in results if r.ok]
    n = len(ok)
    layers: dict[str, int] = {}
    for r in ok:
        if r.cache_layer:
            layers[r.cache_layer] = layers.get(r.cache_layer, 0) + 1
    fresh = [r for r in ok if not r.cache_layer]
    out: dict[str, Any] = {
        "target": target, "sent": len(results), "ok": n, "errors": len(results) - n, "skipped": skipped,
        "wall_s": round(wall_s, 2), "throughput_rps": round(n / wall_s, 2) if wall_s > 0 else 0.0,
        **_pcts([r.ttft_ms for r in ok if r.ttft_ms is not None], "ttft"),
        **_pcts([g for r in ok for g in r.itl_ms], "itl"),
        **_pcts([r.e2e_ms for r in ok], "e2e"),
        **_pcts([r.overhead_ms for r in fresh], "overhead"),
        **_pcts([r.search_ms for r in fresh if r.search_ms > 0], "search"),
        "cache_hit_rate": round(sum(layers.values()) / n, 4) if n else 0.0,
        "cache_hit_rate_by_layer": {**{k: round(v / n, 4) for k, v in sorted(layers.items())},
                                    "retrieval": round(sum(r.retrieval_hit for r in ok) / n, 4) if n else 0.0},
        "prompt_tokens_mean": round(sum(r.prompt_tokens for r in ok) / n, 1) if n else 0.0,
        "context_tokens_mean": round(sum(r.context_tokens for r in fresh) / len(fresh), 1) if fresh else 0.0,
        "cached_tokens_total": sum(r.cached_tokens for r in ok),
        "completion_tokens_total": sum(r.completion_tokens for r in ok),
        "prompt_tokens_total": sum(r.prompt_tokens for r in ok),
        "estimated_cost": round(sum(r.estimated_cost for r in ok), 6),
        "always_large_cost": round(sum(r.always_large_cost for r in ok), 6),
        "saved_tokens_total": sum(r.saved_tokens for r in ok),  # cache hits: not in the usage or cost above
        "saved_cost": round(sum(r.saved_cost for r in ok), 6),
    }
    by_kind: dict[str, list[RequestResult]] = {}
    for r in ok:
        by_kind.setdefault(r.kind, []).append(r)
    out["cache_hit_rate_by_kind"] = {k: round(sum(1 for r in v if r.cache_layer) / len(v), 4)
                                     for k, v in sorted(by_kind.items())}
    errs: dict[str, int] = {}
    for r in results:
        if not r.ok:
            errs[str(r.status)] = errs.get(str(r.status), 0) + 1
    out["errors_by_status"] = errs
    out["error_causes"] = error_causes(results)
    return out


SUMMARY_ROWS = [("requests ok / sent", lambda s: f"{s['ok']} / {s['sent']}"),
                ("throughput (req/s)", lambda s: s["throughput_rps"]),
                ("TTFT P50 / P95 / P99 ms", lambda s: f"{s['ttft_p50_ms']} / {s['ttft_p95_ms']} / {s['ttft_p99_ms']}"),
                ("ITL P50 / P95 / P99 ms", lambda s: f"{s['itl_p50_ms']} / {s['itl_p95_ms']} / {s['itl_p99_ms']}"),
                ("end-to-end P50 / P95 / P99 ms", lambda s: f"{s['e2e_p50_ms']} / {s['e2e_p95_ms']} / {s['e2e_p99_ms']}"),
                ("overhead / answered-fresh (no generate) P50 / P99 ms", lambda s: f"{s['overhead_p50_ms']} / {s['overhead_p99_ms']}"),
                ("cache hit rate", lambda s: s["cache_hit_rate"]),
                ("  by layer", lambda s: ", ".join(f"{k} {v}" for k, v in s["cache_hit_rate_by_layer"].items()) or "-"),
                ("  by kind", lambda s: ", ".join(f"{k} {v}" for k, v in s["cache_hit_rate_by_kind"].items()) or "-"),
                ("prompt tokens / request", lambda s: s["prompt_tokens_mean"]),
                ("context tokens / answered-fresh", lambda s: s["context_tokens_mean"]),
                ("cached prompt tokens (total)", lambda s: s["cached_tokens_total"]),
                ("completion tokens (total)", lambda s: s["completion_tokens_total"]),
                ("estimated cost / always-large", lambda s: f"{s['estimated_cost']} / {s['always_large_cost']}"),
                ("saved by cache hits: tokens / cost", lambda s: f"{s.get('saved_tokens_total', 0)} / "
                                                                 f"{s.get('saved_cost', 0.0)}"),
                ("errors", lambda s: s["errors_by_status"] or 0)]


def rich_table(summary: Mapping[str, Any], title: str = "replay") -> Any:
    """A rich Table of a summary (print it with ``rich.console.Console().print``)."""
    t = Table(title=title)
    t.add_column("metric")
    t.add_column("value", justify="right")
    for label, fn in SUMMARY_ROWS:
        t.add_row(label, str(fn(summary)))
    return t


def plot(results: Sequence[RequestResult], path: str | Path, title: str = "replay") -> Path:
    """PNG: end-to-end latency and TTFT over arrival time (cache hits marked), and the latency CDF.

    Log axes only hold positive values: a request without a TTFT is left out of the TTFT series, and a
    replay with no answered request still writes a figure (saying so) rather than failing."""
    ok = [r for r in results if r.ok]
    fig = Figure(figsize=(11, 4))  # no pyplot: no global backend state, renders with Agg
    a, b = fig.subplots(1, 2)
    e2e = [r.e2e_ms for r in ok if r.e2e_ms > 0]
    ttft = [r.ttft_ms for r in ok if r.ttft_ms is not None and r.ttft_ms > 0]
    for hit, colour, label in ((False, "tab:blue", "miss"), (True, "tab:green", "cache hit")):
        pts = [r for r in ok if bool(r.cache_layer) == hit and r.e2e_ms > 0]
        if pts:
            a.scatter([r.arrival_s for r in pts], [r.e2e_ms for r in pts], s=8, c=colour, label=f"e2e ({label})")
    timed = [r for r in ok if r.ttft_ms is not None and r.ttft_ms > 0]
    if timed:
        a.scatter([r.arrival_s for r in timed], [r.ttft_ms for r in timed], s=4, c="tab:orange", label="TTFT")
    a.set_xlabel("arrival (s)")
    a.set_ylabel("ms")
    a.set_title(title)
    for vals, label in ((e2e, "end-to-end"), (ttft, "TTFT")):
        v = sorted(vals)
        if v:
            b.plot(v, [(i + 1) / len(v) for i in range(len(v))], label=label)
    if e2e or ttft:
        a.set_yscale("log")
        b.set_xscale("log")
        a.legend(fontsize=7)
        b.legend(fontsize=7)
    else:
        errors = len(results) - len(ok)
        for ax in (a, b):
            ax.text(0.5, 0.5, f"no answered requests ({errors} errors)", ha="center", va="center",
                    transform=ax.transAxes)
    b.set_xlabel("ms")
    b.set_ylabel("share of requests")
    b.grid(alpha=0.3)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=100)
    return out


__all__ = ["RequestResult", "LibraryTarget", "HttpTarget", "ReplayReport", "replay", "summarize", "rich_table",
           "plot", "fill_from_answer"]

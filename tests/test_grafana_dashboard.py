"""Issue 29: the Grafana dashboard in the repository (docs/grafana/ragbudget.json) queries only metric names
that a real app's /metrics exports, after real requests."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families
from service_fixtures import KEYS

from ragbudget.service.app import BackgroundServer, create_app

DASHBOARD = Path(__file__).resolve().parents[1] / "docs" / "grafana" / "ragbudget.json"
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
            "gauge": ("",), "summary": ("_sum", "_count", "_created")}


def _exprs() -> list[str]:
    dash = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]


def test_dashboard_is_a_grafana_dashboard():
    dash = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert dash["title"] and dash["schemaVersion"] >= 30 and len(dash["panels"]) >= 10
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
    assert all(p["targets"] and p["gridPos"] for p in dash["panels"])


def test_every_metric_in_the_dashboard_is_exported(cranfield_rag):
    headers = {"authorization": f"Bearer {KEYS['acme']}"}
    with BackgroundServer(create_app(cranfield_rag, cranfield_rag.config)) as srv:
        for q in ("how do wings flutter at high speed", "what is 6 * 7"):  # retrieval + generation, a handler
            assert httpx.post(srv.url + "/v1/query", json={"question": q}, headers=headers, timeout=60).is_success
        assert httpx.post(srv.url + "/v1/query", json={"question": "x", "index": "nope"}, headers=headers,
                          timeout=60).status_code == 404  # an error, counted by type
        text = httpx.get(srv.url + "/metrics", headers=headers, timeout=10).text
    exported: set[str] = set()
    with_samples: set[str] = set()
    for fam in text_string_to_metric_families(text):
        exported |= {fam.name + s for s in SUFFIXES.get(fam.type, ("",))}
        with_samples |= {s.name for s in fam.samples}
    used = {m for e in _exprs() for m in re.findall(r"\bragbudget_[a-z0-9_]+", e)}
    assert len(used) >= 15
    assert not used - exported, f"dashboard queries metrics /metrics does not export: {sorted(used - exported)}"
    # the core panels have data after real requests (not only declared families)
    for name in ("ragbudget_requests_total", "ragbudget_server_ttft_seconds_bucket",
                 "ragbudget_stage_duration_seconds_bucket", "ragbudget_request_duration_seconds_bucket",
                 "ragbudget_section_tokens_total", "ragbudget_admission_decisions_total", "ragbudget_errors_total",
                 "ragbudget_cache_lookups_total", "ragbudget_prompt_tokens_total"):
        assert name in with_samples and name in used, name
    assert not any(n.endswith("_ms") or "_ms_" in n for n in exported)  # durations in seconds

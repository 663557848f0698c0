"""Metrics: an Answer's timings, ledger, usage and cache layer land in a private Prometheus registry."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from ragbudget.observe.metrics import Metrics
from ragbudget.types import Answer, Ledger, SectionLedger, Timings, Usage


def _samples(m: Metrics) -> dict[tuple[str, tuple], float]:
    body, ctype = m.render()
    assert ctype.startswith("text/plain")
    out = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _answer(cache_layer=None) -> Answer:
    ledger = Ledger(sections={"retrieved": SectionLedger(budget=1200, used=900, dropped=[{"id": "x"}]),
                              "question": SectionLedger(budget=256, used=12)}, degrade_level=2)
    return Answer(question="q", answer="a", ledger=ledger, usage=Usage(prompt_tokens=1000, cached_tokens=600,
                                                                        completion_tokens=40),
                  timings=Timings(stages={"embed": 4.0, "dense": 1.5}, ttft_ms=120.0, itl_ms=[10.0, 30.0],
                                  total_ms=700.0),
                  route="small", cache_layer=cache_layer)


def test_observe_answer_records_every_field():
    m = Metrics()
    m.observe_answer(_answer(), tenant="acme")
    m.observe_answer(_answer(cache_layer="semantic"), tenant="acme")
    s = _samples(m)
    assert s[("ragbudget_ttft_ms_count", (("route", "small"),))] == 2
    assert s[("ragbudget_ttft_ms_sum", (("route", "small"),))] == 240.0
    assert s[("ragbudget_inter_token_latency_ms_count", (("route", "small"),))] == 4
    assert s[("ragbudget_request_duration_ms_sum", (("route", "small"),))] == 1400.0
    assert s[("ragbudget_stage_duration_ms_count", (("stage", "embed"),))] == 2
    assert s[("ragbudget_section_tokens_total", (("section", "retrieved"),))] == 1800
    assert s[("ragbudget_section_dropped_items_total", (("section", "retrieved"),))] == 2
    assert s[("ragbudget_cached_prompt_tokens_total", (("route", "small"),))] == 1200
    assert s[("ragbudget_cache_lookups_total", (("layer", "semantic"), ("result", "hit")))] == 1
    assert s[("ragbudget_cache_lookups_total", (("layer", "any"), ("result", "miss")))] == 1
    assert s[("ragbudget_requests_total", (("degrade_level", "2"), ("route", "small"), ("tenant", "acme")))] == 2


def test_admission_and_load_gauges():
    m = Metrics()
    m.observe_admission("acme", "interactive", "queued", queue_wait_ms=35.0)
    m.observe_admission("acme", "batch", "shed")
    m.set_load(degrade_level=3, queue_depth=7, in_flight=2)
    s = _samples(m)
    assert s[("ragbudget_admission_decisions_total",
              (("decision", "queued"), ("priority", "interactive"), ("tenant", "acme")))] == 1
    assert s[("ragbudget_admission_queue_wait_ms_sum", (("priority", "interactive"),))] == 35.0
    assert s[("ragbudget_degrade_level", ())] == 3
    assert s[("ragbudget_admission_queue_depth", ())] == 7


def test_registries_are_private():
    a, b = Metrics(), Metrics()  # no "Duplicated timeseries" error: no global registry
    a.observe_answer(_answer(), tenant="t")
    assert ("ragbudget_ttft_ms_count", (("route", "small"),)) not in _samples(b)

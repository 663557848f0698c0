"""Metrics: an Answer's timings, ledger, usage and cache layer land in a private Prometheus registry."""

from __future__ import annotations

from pathlib import Path

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
    assert s[("ragbudget_ttft_seconds_count", (("route", "small"),))] == 2
    assert s[("ragbudget_ttft_seconds_sum", (("route", "small"),))] == 0.24
    assert s[("ragbudget_inter_token_latency_seconds_count", (("route", "small"),))] == 4
    assert s[("ragbudget_request_duration_seconds_sum", (("route", "small"),))] == 1.4
    assert s[("ragbudget_stage_duration_seconds_count", (("stage", "embed"),))] == 2
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
    assert s[("ragbudget_admission_queue_wait_seconds_sum", (("priority", "interactive"),))] == 0.035
    assert s[("ragbudget_degrade_level", ())] == 3
    assert s[("ragbudget_admission_queue_depth", ())] == 7


def test_registries_are_private():
    a, b = Metrics(), Metrics()  # no "Duplicated timeseries" error: no global registry
    a.observe_answer(_answer(), tenant="t")
    assert ("ragbudget_ttft_seconds_count", (("route", "small"),)) not in _samples(b)


# ------------------------------------------------------------------ several worker processes (issue 29)

WORKER = """
import sys
from ragbudget.observe.metrics import Metrics
from ragbudget.types import Answer, Ledger, Timings
m = Metrics()
assert m.multiprocess_dir
for _ in range(int(sys.argv[1])):
    m.observe_answer(Answer(question="q", answer="a", ledger=Ledger(), timings=Timings(total_ms=250.0),
                            route="small"), tenant="acme")
m.set_load(degrade_level=int(sys.argv[2]), queue_depth=int(sys.argv[1]), in_flight=1)
"""


def test_multiprocess_mode_sums_every_workers_counters(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for n, level in ((2, 1), (3, 4)):  # two real processes, each writing its own files
        out = subprocess.run([sys.executable, "-c", WORKER, str(n), str(level)], env=env, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
    assert len({p.name.split("_")[-1] for p in tmp_path.glob("counter_*.db")}) == 2
    s = _samples(Metrics(multiprocess_dir=str(tmp_path)))
    assert s[("ragbudget_requests_total", (("degrade_level", "0"), ("route", "small"), ("tenant", "acme")))] == 5
    assert s[("ragbudget_request_duration_seconds_count", (("route", "small"),))] == 5
    assert abs(s[("ragbudget_request_duration_seconds_sum", (("route", "small"),))] - 1.25) < 1e-9
    assert s[("ragbudget_request_duration_seconds_bucket", (("le", "0.25"), ("route", "small")))] == 5
    # live gauges of processes that exited are gone only once marked dead; these were not
    assert s[("ragbudget_admission_queue_depth", ())] == 5
    assert s[("ragbudget_degrade_level", ())] == 4


def test_multiprocess_dir_is_fresh_and_removed(tmp_path):
    from ragbudget.observe.metrics import MULTIPROC_ENV, multiprocess_dir

    env: dict[str, str] = {}
    with multiprocess_dir(env) as d:
        assert env[MULTIPROC_ENV] == d and Path(d).is_dir() and not any(Path(d).iterdir())
        (Path(d) / "counter_1.db").write_bytes(b"")
    assert MULTIPROC_ENV not in env and not Path(d).exists()
    given = {MULTIPROC_ENV: str(tmp_path / "mine")}
    with multiprocess_dir(given) as d:
        assert d == str(tmp_path / "mine")
    assert (tmp_path / "mine").is_dir() and given[MULTIPROC_ENV] == d  # the caller's own is kept

"""Frugal by default: the budget is a ceiling, the ledger says why each section stopped, follow-ups
retrieve with a condensed query, and a changed static prefix is caught on the request it happens."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragbudget import RAG
from ragbudget.config import Config
from ragbudget.stages.prompt import PrefixMonitor, prefix_parts, static_prefix

SAMPLE_DOCS = Path(__file__).resolve().parents[1] / "ragbudget" / "sample_docs"


def _cfg(tmp_path: Path, **over) -> Config:
    base = {"index.dir": str(tmp_path / "indexes"), "cache.response": False, "cache.retrieval": False}
    base.update(over)
    return Config().with_overrides(base)


@pytest.fixture()
def rag(tmp_path, embedder):
    r = RAG(_cfg(tmp_path), index="docs", embedder=embedder)
    r.ingest(SAMPLE_DOCS)
    yield r
    r.close()


def test_defaults_do_not_lend_unused_budget_into_the_context() -> None:
    cfg = Config()
    assert cfg.budget.lend == [] and cfg.trim.adaptive
    assert cfg.budget.retrieved.cap <= 1000


def test_retrieved_section_stops_when_the_evidence_runs_out(rag, tmp_path, embedder):
    ans = rag.query("How is unused budget lent?")
    sec = ans.ledger.sections["retrieved"]
    assert sec.stop in ("evidence", "budget", "exhausted")
    assert sec.used < sec.budget  # a ceiling, not a target
    assert ans.ledger.sections["output"].stop == "cap"
    full = RAG(_cfg(tmp_path, **{"trim.adaptive": False}), index="docs", embedder=embedder)
    try:
        filled = full.query("How is unused budget lent?").ledger.sections["retrieved"]
    finally:
        full.close()
    assert filled.used > sec.used
    if sec.stop == "evidence":
        assert any("evidence ran out" in n for n in sec.notes)


def test_follow_up_retrieves_with_the_condensed_question(rag):
    history = [{"role": "user", "content": "What does the Semantic Cache store?"},
               {"role": "assistant", "content": "Answers to earlier questions, keyed by their embedding."}]
    ans = rag.query("What does it reject?", history=history)
    notes = ans.ledger.sections["question"].notes
    assert any("condensed" in n and "Semantic Cache" in n for n in notes), notes
    assert ans.question == "What does it reject?"  # the prompt shows the question as asked


def test_prefix_monitor_names_the_part_that_changed() -> None:
    cfg = Config()
    m = PrefixMonitor()
    p = cfg.prompt
    assert m.observe("concise", static_prefix(p, "concise"), prefix_parts(p, "concise")) is None
    assert m.observe("concise", static_prefix(p, "concise"), prefix_parts(p, "concise")) is None
    p2 = cfg.with_overrides({"prompt.modes.concise.instruction": "Answer in one short sentence."}).prompt
    assert m.observe("concise", static_prefix(p2, "concise"), prefix_parts(p2, "concise")) == \
        "modes.concise.instruction"
    p3 = cfg.with_overrides({"prompt.policies": ["Never guess."]}).prompt
    assert m.observe("concise", static_prefix(p3, "concise"), prefix_parts(p3, "concise")) == "policies"


def test_a_changed_prefix_is_flagged_and_counted_on_the_request(rag):
    rag.query("How is unused budget lent?")
    rag.config.prompt.system = rag.config.prompt.system + " Be brief."  # e.g. a hot-edited config
    ans = rag.query("What does the semantic cache reject?")
    assert "prefix_changed:system" in ans.ledger.flags
    body = rag.metrics.render()[0].decode()
    assert 'ragbudget_static_prefix_changes_total{mode="concise",part="system"} 1.0' in body
    again = rag.query("What is a ledger?")
    assert not any(f.startswith("prefix_changed") for f in again.ledger.flags)

"""The one Answer codec: ``Answer.to_dict`` → JSON → ``Answer.from_dict`` keeps every field of a real answer."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from ragbudget import RAG
from ragbudget.cache import ExactResponseCache, MemoryBackend, answer_from_dict
from ragbudget.cache.keys import ResponseScope
from ragbudget.config import Config
from ragbudget.types import Answer, Ledger, SectionLedger, Usage

SAMPLE_DOCS = Path(__file__).resolve().parents[1] / "ragbudget" / "sample_docs"


@pytest.fixture(scope="module")
def real_answer(tmp_path_factory, embedder) -> Answer:
    tmp = tmp_path_factory.mktemp("codec")
    cfg = Config().with_overrides({"index.dir": str(tmp / "indexes"), "cache.path": str(tmp / "cache.sqlite")})
    rag = RAG(cfg, index="docs", embedder=embedder)
    try:
        rag.ingest(SAMPLE_DOCS)
        return rag.query("How is unused budget lent between sections?", mode="detailed")
    finally:
        rag.close()


def _every_field_set(ans: Answer) -> Answer:
    """The real answer with every field moved off its default, so a field the codec drops shows."""
    led = dataclasses.replace(ans.ledger, cache_layer="semantic", degrade_level=3,
                              flags=[*ans.ledger.flags, "partial"], saved={"total_tokens": 7, "tier": "large"})
    return dataclasses.replace(ans, ledger=led, cache_layer="semantic", partial=True, extractive=not ans.extractive,
                               finish_reason="length", usage=Usage(ans.usage.prompt_tokens, 5,
                                                                   ans.usage.completion_tokens))


def _assert_same(back: Answer, ans: Answer) -> None:
    for f in dataclasses.fields(Answer):
        got, want = getattr(back, f.name), getattr(ans, f.name)
        if f.name == "context":  # the record keeps what Scored.to_dict writes (ranks are not part of it)
            assert [s.to_dict() for s in got] == [s.to_dict() for s in want]
            assert [s.chunk.source for s in got] == [s.chunk.source for s in want]
        else:
            assert got == want, f.name


def test_real_answer_is_complete_before_the_roundtrip(real_answer):
    ans = real_answer
    assert ans.citations and ans.context and ans.ledger.sections and ans.ledger.route and ans.ledger.prompt
    assert ans.usage.prompt_tokens > 0 and ans.timings.stages and ans.timings.itl_ms and ans.route
    # every field of Answer is in the record: a new field that to_dict forgot fails here
    assert {f.name for f in dataclasses.fields(Answer)} == set(ans.to_dict())
    assert {f.name for f in dataclasses.fields(Ledger)} == set(ans.ledger.to_dict())
    assert {f.name for f in dataclasses.fields(SectionLedger)} == set(ans.ledger.to_dict()["sections"]["retrieved"])


@pytest.mark.parametrize("variant", ["as_answered", "every_field_set"])
def test_answer_roundtrip_through_json_keeps_every_field(real_answer, variant):
    ans = real_answer if variant == "as_answered" else _every_field_set(real_answer)
    back = Answer.from_dict(json.loads(json.dumps(ans.to_dict())))
    _assert_same(back, ans)
    assert back.to_dict() == ans.to_dict()


def test_cache_serves_through_the_same_codec(real_answer):
    cache = ExactResponseCache(MemoryBackend())
    scope = ResponseScope(tenant="t", index_version="v1", prompt_version="p1", model_tier="extractive",
                          max_tokens=256, mode="detailed")
    assert cache.store(scope, real_answer.question, real_answer.to_dict())
    hit = cache.lookup(scope, real_answer.question)
    assert hit is not None
    served = hit.answer()
    assert served.cache_layer == "exact" and served.ledger.cache_layer == "exact"
    want = dataclasses.replace(real_answer, cache_layer="exact",
                               ledger=dataclasses.replace(real_answer.ledger, cache_layer="exact"))
    _assert_same(served, want)
    assert answer_from_dict(hit.record, cache_layer="exact").to_dict() == served.to_dict()  # the kept alias

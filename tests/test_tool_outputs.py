"""Tool outputs (issue 15): deterministic handler answers go through the tool cache (clock-dependent ones
never do) and ``service.limits.max_tool_output_bytes`` is enforced (an oversized output is not used; an
oversized FAQ answer is a config error)."""

from __future__ import annotations

import pytest

from ragbudget.config import Config
from ragbudget.errors import ConfigError
from ragbudget.pipeline import RAG


def _rag(tmp_path, **over) -> RAG:
    return RAG(Config().with_overrides({"index.dir": str(tmp_path), **over}))


def test_handler_answers_are_cached_in_the_tool_layer(tmp_path):
    rag = _rag(tmp_path, **{"llm.router.faq": {"Where is the office?": "Building 4, second floor."}})
    stats = rag.cache.tool.stats
    first = rag.query("what is 12 * 7")
    assert first.answer == "84" and first.route == "handler:arithmetic"
    assert (stats.hits, stats.stores) == (0, 1)
    again = rag.query("What is 12   * 7")  # same question, normalised: served by the tool cache
    assert again.answer == "84" and again.route == "handler:arithmetic" and stats.hits == 1
    assert rag.query("where is the office").answer == "Building 4, second floor."
    assert rag.query("WHERE IS THE OFFICE").answer == "Building 4, second floor." and stats.hits == 2


def test_clock_dependent_answers_are_never_cached(tmp_path):
    rag = _rag(tmp_path)
    stats = rag.cache.tool.stats
    assert rag.query("what time is it").route == "handler:datetime"
    assert rag.query("what time is it").route == "handler:datetime"
    assert stats.stores == 0 and stats.hits == 0
    assert rag.query("what day of the week is 2024-03-05").answer == "Tuesday"
    assert stats.stores == 1


def test_cache_off_still_answers(tmp_path):
    rag = _rag(tmp_path, **{"cache.tool": False})
    assert rag.cache.tool is None
    assert rag.query("what is 2 + 3").answer == "5"


def test_output_over_the_limit_is_not_used(tmp_path):
    rag = _rag(tmp_path, **{"service.limits.max_tool_output_bytes": 4})
    # "convert 5 km to miles" answers "5 km = 3.106856 miles" (21 bytes): over 4, so no handler answers;
    # the question goes on to retrieval (an empty index here: not found)
    assert rag.router.handle("convert 5 km to miles", max_output_bytes=4) is None
    assert rag.router.handle("convert 5 km to miles", max_output_bytes=64) is not None
    assert rag.query("what is 2 + 3").answer == "5"  # 1 byte: within the limit


def test_faq_answer_over_the_limit_fails_at_load():
    with pytest.raises((ConfigError, ValueError), match="max_tool_output_bytes"):
        Config().with_overrides({"service.limits.max_tool_output_bytes": 10,
                                 "llm.router.faq": {"q": "an answer longer than ten bytes"}})

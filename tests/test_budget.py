"""Budget allocation: pure maths, property-tested."""

import pytest
from hypothesis import given, settings, strategies as st

from ragbudget.budget.allocate import SECTIONS, allocate, lend, total
from ragbudget.config import BudgetConfig, load_config
from ragbudget.errors import BudgetConfigError, BudgetError, ConfigError


def test_default_allocation_uses_caps_and_fits():
    a = allocate(BudgetConfig())
    assert (a.system, a.history, a.retrieved, a.question, a.output) == (512, 1024, 1000, 256, 512)
    assert total(a) + BudgetConfig().safety_margin <= a.window


def test_small_window_shrinks_retrieved_first_and_keeps_mins():
    cfg = BudgetConfig.model_validate({"retrieved": {"cap": 1200, "min": 100}})
    a = allocate(cfg, window=2048)
    assert total(a) + cfg.safety_margin <= 2048
    assert a.retrieved < 1200 and a.retrieved >= 100
    assert a.system == 512 and a.question == 256  # untouched while retrieved/history can give


def test_output_clamped_to_mode_and_tier():
    a = allocate(BudgetConfig(), output_tokens=128)
    assert a.output == 128
    assert allocate(BudgetConfig(), output_tokens=4000).output == 512
    assert allocate(BudgetConfig(), output_tokens=400, output_limit=64).output == 64


def test_window_below_minimums_is_budget_error():
    cfg = BudgetConfig.model_validate({"system": {"cap": 512, "min": 300}, "output": {"cap": 512, "min": 300}})
    with pytest.raises(BudgetError, match="minimums"):
        allocate(cfg, window=500)


def test_impossible_config_fails_at_load():
    with pytest.raises(BudgetConfigError, match="over budget.context_window"):
        BudgetConfig.model_validate({"context_window": 1024})
    with pytest.raises((BudgetConfigError, ConfigError)):
        load_config(None, environ={"RAGBUDGET_BUDGET__SYSTEM__MIN": "9999"})


def test_zero_budget_section_is_allowed():
    cfg = BudgetConfig.model_validate({"history": {"cap": 0}})
    assert allocate(cfg).history == 0


def test_lend_moves_unused_history_to_retrieved():
    a = allocate(BudgetConfig())
    policy = [("history", "retrieved"), ("question", "retrieved")]
    b = lend(a, {"history": 100, "question": 20}, policy)
    assert b.history == 100 and b.question == 20
    assert b.retrieved == a.retrieved + (1024 - 100) + (256 - 20)
    assert total(b) == total(a)


def test_default_policy_lends_nothing_a_budget_is_a_ceiling():
    a = allocate(BudgetConfig())
    assert lend(a, {"history": 100, "question": 20}, BudgetConfig().lend) == a


sizes = st.integers(min_value=0, max_value=3000)


@settings(max_examples=200, deadline=None)
@given(window=st.integers(min_value=128, max_value=200_000),
       caps=st.lists(sizes, min_size=5, max_size=5),
       used=st.lists(st.integers(min_value=0, max_value=5000), min_size=5, max_size=5),
       out=st.one_of(st.none(), st.integers(min_value=1, max_value=5000)))
def test_properties_sum_within_window_and_lending_keeps_usage(window, caps, used, out):
    caps = caps[:-1] + [max(1, caps[-1])]  # an output cap of 0 is refused at load (issue 13)
    data = {n: {"cap": c} for n, c in zip(SECTIONS, caps)}
    data["context_window"] = max(window, sum(caps) + 16)
    cfg = BudgetConfig.model_validate(data)
    a = allocate(cfg, window=window, output_tokens=out)
    assert total(a) + cfg.safety_margin <= window or total(a) == 0
    assert all(getattr(a, n) >= 0 for n in SECTIONS)
    demand = dict(zip(SECTIONS, used))
    b = lend(a, demand, [("history", "retrieved"), ("question", "retrieved"), ("system", "history")])
    assert total(b) == total(a)
    for n in SECTIONS:
        assert getattr(b, n) >= min(demand[n], getattr(a, n))  # never below what it used


def test_small_window_gives_unused_fixed_sections_to_the_context_first() -> None:
    """A 512-token window under the default caps: without needs, empty history keeps its space and the
    retrieved section shrinks to nothing; with the request's measured needs it keeps the room they leave."""
    cfg = load_config(None, environ={}).budget
    blind = allocate(cfg, window=512, output_tokens=64)
    told = allocate(cfg, window=512, output_tokens=64, needs={"history": 0, "system": 71, "question": 20})
    assert blind.retrieved == 0
    assert told.history == 0 and told.system == 71 and told.question == 20
    assert told.retrieved == 512 - cfg.safety_margin - 71 - 20 - 64
    # a roomy window is untouched: caps stay ceilings, nothing is lent by the needs
    assert allocate(cfg, needs={"history": 0, "system": 71, "question": 20}) == allocate(cfg)


def test_one_budget_rule_for_the_question_limit_and_allocation() -> None:
    """cap 256 and ratio 0.01 of 8192: the config's question limit and the allocation agree on 81 tokens, so a
    200-token question is refused before it could be cut (both rules used to disagree: 252 vs 81)."""
    from ragbudget.stages.accounting import check_question
    from ragbudget.config import question_limit
    from ragbudget.errors import QuestionTooLongError
    from ragbudget.kernels.tokens import Tokenizer

    cfg = load_config(None, environ={}).with_overrides({"budget.question.ratio": 0.01})
    assert cfg.budget.section_tokens("question") == allocate(cfg.budget).question == 81
    limit, _ = question_limit(cfg)
    assert limit == 81 - 4
    with pytest.raises(QuestionTooLongError):
        check_question("word " * 200, cfg, Tokenizer())

"""Router: tier choice, window fit and re-fit, escalation, fallback, timeouts, circuit breaker, cost.

Backends are scripted here (the Generator protocol is the seam); one test routes to the real llama.cpp
engine on a generated GGUF.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ragbudget.testing import ScriptedGenerator
from ragbudget.config import LLMConfig, RouterConfig, TierConfig
from ragbudget.errors import BackendUnavailableError, RoutingError
from ragbudget.llm import LlamaCppGenerator, make_prompt
from ragbudget.route import CircuitBreaker, Router
from ragbudget.types import Chunk, Prompt, Scored

CTX = [Scored(Chunk(id="c1", doc_id="d1", text="The Eiffel Tower is in Paris. It was completed in 1889."),
              score=0.9, rerank_score=0.8)]


def cfg(small_window: int = 4096, **router: object) -> LLMConfig:
    return LLMConfig(tiers=[
        TierConfig(name="small", backend="scripted", model="s", context_window=small_window,
                   price_in_per_1k=0.1, price_out_per_1k=0.2, first_token_timeout_s=0.5, timeout_s=5),
        TierConfig(name="large", backend="scripted", model="l", context_window=16384,
                   price_in_per_1k=1.0, price_out_per_1k=2.0, first_token_timeout_s=2, timeout_s=5),
    ], router=RouterConfig(**router))


def prompt(n_words: int = 50) -> Prompt:
    return make_prompt([("system", "Answer from context."), ("user", "word " * n_words)])


GOOD = "The Eiffel Tower was completed in 1889 in Paris."


def test_easy_question_goes_small_hard_goes_large() -> None:
    small, large = ScriptedGenerator(GOOD), ScriptedGenerator(GOOD)
    r = Router(cfg(), generators={"small": small, "large": large})
    easy = r.generate(prompt(), question="When was the Eiffel Tower completed?", max_tokens=50, context=CTX)
    assert easy.decision.tier == "small" and "small" in easy.decision.reason and not easy.decision.escalated
    hard = r.generate(prompt(), question="Why was the Eiffel Tower built and how does it compare to other "
                                         "towers? Explain.", max_tokens=50, context=CTX)
    assert hard.decision.tier == "large" and hard.decision.difficulty >= 0.6
    faq = r.generate(prompt(), question="Why? Explain and compare.", max_tokens=50, context=CTX, task="faq")
    assert faq.decision.tier == "small" and "task" in faq.decision.reason
    assert easy.decision.estimated_cost < easy.decision.always_large_cost


def test_low_retrieval_confidence_raises_difficulty() -> None:
    r = Router(cfg(), generators={"small": ScriptedGenerator(GOOD), "large": ScriptedGenerator(GOOD)})
    q = "When was the tower completed?"
    assert r.difficulty(q, confidence=0.05) > r.difficulty(q, confidence=0.9)


def test_window_too_small_is_never_chosen() -> None:
    small, large = ScriptedGenerator(GOOD), ScriptedGenerator(GOOD)
    r = Router(cfg(small_window=256), generators={"small": small, "large": large})
    out = r.generate(prompt(300), question="When?", max_tokens=50, context=CTX)
    assert out.decision.tier == "large" and "too small" in out.decision.reason and not small.calls


def test_max_tokens_over_tier_limit_is_capped_and_said() -> None:
    conf = cfg()
    conf.tiers[0].max_output_tokens = 64
    r = Router(conf, generators={"small": ScriptedGenerator(GOOD), "large": ScriptedGenerator(GOOD)})
    out = r.generate(prompt(), question="When?", max_tokens=500, context=CTX)
    assert out.decision.tier == "small" and "capped" in out.decision.reason


def test_prompt_over_every_window_is_routing_error() -> None:
    r = Router(cfg(), generators={"small": ScriptedGenerator(GOOD), "large": ScriptedGenerator(GOOD)})
    with pytest.raises(RoutingError, match="over every tier's window"):
        r.generate(prompt(20000), question="When?", max_tokens=50)


def test_fallback_to_smaller_window_refits_context() -> None:
    small, large = ScriptedGenerator(GOOD), ScriptedGenerator(BackendUnavailableError("down"))
    r = Router(cfg(small_window=512), generators={"small": small, "large": large})
    windows: list[int] = []

    def refit(window: int) -> Prompt:
        windows.append(window)
        return prompt(100)

    out = r.generate(prompt(600), question="Why? Explain and compare in depth.", max_tokens=50, context=CTX,
                     refit=refit)
    assert out.decision.tier == "small" and out.decision.fallbacks == ["large"] and out.decision.refitted
    assert windows == [512] and small.calls[0].total_tokens < 200


@pytest.mark.parametrize("bad,why", [("", "empty"), ("I'm sorry, I cannot answer that.", "refusal"),
                                     ("Bananas grow on tall herbaceous plants everywhere.", "low grounding")])
def test_failed_check_escalates(bad: str, why: str) -> None:
    small, large = ScriptedGenerator(bad), ScriptedGenerator(GOOD)
    r = Router(cfg(), generators={"small": small, "large": large})
    out = r.generate(prompt(), question="When was it completed?", max_tokens=50, context=CTX)
    d = out.decision
    assert d.escalated and d.escalated_from == "small" and d.tier == "large" and d.escalation_reason.startswith(why)
    assert out.generation.text.strip() == GOOD
    assert len(small.calls) == 1 and len(large.calls) == 1


def test_escalation_can_be_disabled() -> None:
    r = Router(cfg(escalate_on_failed_check=False), generators={"small": ScriptedGenerator(""), "large": ScriptedGenerator(GOOD)})
    assert r.generate(prompt(), question="When?", max_tokens=50, context=CTX).decision.tier == "small"


def test_error_falls_back_then_all_down_is_clean_error() -> None:
    small, large = ScriptedGenerator(BackendUnavailableError("refused")), ScriptedGenerator(GOOD)
    r = Router(cfg(), generators={"small": small, "large": large})
    out = r.generate(prompt(), question="When?", max_tokens=50, context=CTX)
    assert out.decision.tier == "large" and out.decision.fallbacks == ["small"]
    assert "refused" in out.decision.errors[0]
    r2 = Router(cfg(), generators={"small": ScriptedGenerator(BackendUnavailableError("a")),
                                   "large": ScriptedGenerator(BackendUnavailableError("b"))})
    with pytest.raises(BackendUnavailableError, match="every tier failed"):
        r2.generate(prompt(), question="When?", max_tokens=50)


def test_first_token_timeout_falls_back_without_hanging() -> None:
    small, large = ScriptedGenerator(("sleep", 3.0, GOOD)), ScriptedGenerator(GOOD)
    r = Router(cfg(), generators={"small": small, "large": large})
    out = r.generate(prompt(), question="When?", max_tokens=50, context=CTX)
    assert out.decision.tier == "large" and "first-token timeout" in out.decision.errors[0]


def test_a_total_limit_shorter_than_the_first_token_limit_is_named_as_such() -> None:
    """timeout_s 0.3 with first_token_timeout_s 60: the total limit ran out, and the error says so (it used to
    report a 60 s first-token timeout after 0.3 s)."""
    c = LLMConfig(tiers=[TierConfig(name="small", backend="scripted", model="s", first_token_timeout_s=60,
                                    timeout_s=0.3),
                         TierConfig(name="large", backend="scripted", model="l")])
    r = Router(c, generators={"small": ScriptedGenerator(("sleep", 3.0, GOOD)), "large": ScriptedGenerator(GOOD)})
    out = r.generate(prompt(), question="When?", max_tokens=50, context=CTX)
    assert out.decision.tier == "large" and "total timeout after 0.3s" in out.decision.errors[0]


def test_partial_everywhere_is_marked_partial() -> None:
    r = Router(cfg(), generators={"small": ScriptedGenerator(("partial", "The tower")),
                                  "large": ScriptedGenerator(BackendUnavailableError("down"))})
    out = r.generate(prompt(), question="When?", max_tokens=50, context=CTX)
    assert out.generation.partial and out.decision.partial and out.generation.text == "The tower"


def test_stream_falls_back_before_first_token_and_marks_partial_after() -> None:
    r = Router(cfg(), generators={"small": ScriptedGenerator(BackendUnavailableError("x")), "large": ScriptedGenerator(GOOD)})
    s = r.stream(prompt(), question="When?", max_tokens=50, context=CTX)
    assert "".join(e.text for e in s).strip() == GOOD
    assert s.routed.decision.tier == "large" and s.routed.decision.fallbacks == ["small"]
    r2 = Router(cfg(), generators={"small": ScriptedGenerator(("partial", "The tower")), "large": ScriptedGenerator(GOOD)})
    s2 = r2.stream(prompt(), question="When?", max_tokens=50, context=CTX)
    assert [e.text for e in s2] == ["The tower"]
    assert s2.routed.generation.partial and s2.routed.decision.partial


def test_stream_with_escalation_holds_small_tokens() -> None:
    small, large = ScriptedGenerator("I'm sorry, I cannot answer that."), ScriptedGenerator(GOOD)
    r = Router(cfg(), generators={"small": small, "large": large})
    s = r.stream(prompt(), question="When?", max_tokens=50, context=CTX, escalate=True)
    assert "".join(e.text for e in s).strip() == GOOD  # the refusal never reached the client
    d = s.routed.decision
    assert d.escalated and d.escalated_from == "small" and d.tier == "large" and d.escalation_reason == "refusal"
    small.script = [GOOD]
    s2 = r.stream(prompt(), question="When?", max_tokens=50, context=CTX, escalate=True)
    assert "".join(e.text for e in s2).strip() == GOOD and s2.routed.decision.tier == "small"


async def test_async_twins() -> None:
    r = Router(cfg(), generators={"small": ScriptedGenerator(GOOD), "large": ScriptedGenerator(GOOD)})
    out = await r.agenerate(prompt(), question="When?", max_tokens=50, context=CTX)
    assert out.decision.tier == "small"
    st = await r.astream(prompt(), question="When?", max_tokens=50, context=CTX)
    assert "".join([e.text async for e in st]).strip() == GOOD and st.stream.routed.decision.tier == "small"


def test_circuit_breaker_opens_and_half_opens() -> None:
    now = [0.0]
    br = CircuitBreaker(failures=2, reset_s=10, clock=lambda: now[0])
    assert br.allow()
    br.failure()
    assert br.state == "closed"
    br.failure()
    assert br.state == "open" and not br.allow()
    now[0] = 11
    assert br.state == "half_open" and br.allow() and not br.allow()  # one trial only
    br.failure()
    assert br.state == "open"
    now[0] = 22
    assert br.allow()
    br.success()
    assert br.state == "closed" and br.allow()


def test_router_skips_open_breaker() -> None:
    now = [0.0]
    small, large = ScriptedGenerator(BackendUnavailableError("down")), ScriptedGenerator(GOOD)
    r = Router(cfg(breaker_failures=2, breaker_reset_s=30), generators={"small": small, "large": large},
               clock=lambda: now[0])
    for _ in range(2):
        r.generate(prompt(), question="When?", max_tokens=50, context=CTX)
    assert r.breakers["small"].state == "open"
    out = r.generate(prompt(), question="When?", max_tokens=50, context=CTX)
    assert len(small.calls) == 2 and "circuit open" in out.decision.errors[0]
    small.script = [GOOD]
    now[0] = 31
    out = r.generate(prompt(), question="When?", max_tokens=50, context=CTX)
    assert out.decision.tier == "small" and r.breakers["small"].state == "closed"


def test_handlers_answer_without_model() -> None:
    small = ScriptedGenerator(GOOD)
    r = Router(cfg(faq={"What are your opening hours?": "9 to 5."}), generators={"small": small,
                                                                               "large": ScriptedGenerator(GOOD)})
    assert r.handle("What is 12 * 12?").generation.text == "144"
    faq = r.handle("what are your opening hours")
    assert faq.decision.tier == "handler:faq" and faq.generation.text == "9 to 5."
    assert r.handle("When was the Eiffel Tower completed?") is None and not small.calls


def test_unknown_generator_name_is_error() -> None:
    with pytest.raises(RoutingError, match="unknown tiers"):
        Router(cfg(), generators={"medium": ScriptedGenerator(GOOD)})


def test_escalates_from_extractive_to_real_llamacpp(tiny_gguf: Path) -> None:
    pytest.importorskip("llama_cpp")
    conf = LLMConfig(tiers=[TierConfig(name="extractive"),
                            TierConfig(name="local", backend="llamacpp", model=str(tiny_gguf), context_window=2048,
                                       n_threads=2)])
    r = Router(conf)
    assert isinstance(r.generators["local"], LlamaCppGenerator)
    p = make_prompt([("user", "Question: Who painted the Mona Lisa?")])
    out = r.generate(p, question="Who painted the Mona Lisa?", max_tokens=8, context=CTX)
    assert out.decision.escalated and out.decision.escalation_reason == "refusal"
    assert out.decision.tier == "local" and out.generation.backend == "llamacpp"
    assert out.generation.usage.completion_tokens == 8

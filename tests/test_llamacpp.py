"""In-process llama.cpp backend on a generated GGUF: streaming, usage, prefix-cache reuse, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragbudget.errors import GenerationError, ModelNotFoundError
from ragbudget.llm import LlamaCppGenerator, make_prompt

pytest.importorskip("llama_cpp")

STATIC = "You answer from the documents. Policy: cite sources as [n]. " * 6


@pytest.fixture(scope="module")
def gen(tiny_gguf: Path) -> LlamaCppGenerator:
    g = LlamaCppGenerator(str(tiny_gguf), n_ctx=2048, n_threads=2)
    g.load()
    return g


def _prompt(question: str, static: str = STATIC):
    return make_prompt([("system", static), ("user", f"Question: {question}")], static_prefix=static)


def test_stream_usage_and_timings(gen: LlamaCppGenerator) -> None:
    s = gen.stream(_prompt("what is a llama?"), max_tokens=10)
    events = list(s)
    g = s.generation
    assert g is not None and not g.partial and g.backend == "llamacpp"
    assert len(events) == 10 and [e.index for e in events] == list(range(10))
    assert g.text == "".join(e.text for e in events)
    assert g.usage.completion_tokens == 10 and g.finish_reason == "length"
    assert g.usage.prompt_tokens > len(STATIC) // 2  # byte-level vocabulary: ~1 token per character
    assert g.timings.ttft_ms is not None and len(g.timings.itl_ms) == 9


def test_shared_prefix_is_reused(gen: LlamaCppGenerator) -> None:
    gen.reset()
    first = gen.generate(_prompt("first question"), max_tokens=4)
    second = gen.generate(_prompt("another, different question"), max_tokens=4)
    assert first.usage.cached_tokens == 0
    # everything up to the question is served from the KV cache
    n_static = len(gen.load().tokenize(f"system: {STATIC}".encode()))  # chat template: "role: content"
    assert second.usage.cached_tokens >= n_static
    assert second.usage.cached_tokens < second.usage.prompt_tokens
    other = gen.generate(_prompt("q", static="A completely different system prompt. " * 10), max_tokens=4)
    assert other.usage.cached_tokens < 10


async def test_async_twins(gen: LlamaCppGenerator) -> None:
    g = await gen.agenerate(_prompt("async?"), max_tokens=5)
    assert g.usage.completion_tokens == 5
    st = gen.astream(_prompt("async stream?"), max_tokens=6)
    pieces = [e.text async for e in st]
    assert len(pieces) == 6 and st.generation is not None and st.generation.text == "".join(pieces)


def test_prompt_over_context_is_clear_error_and_backend_survives(gen: LlamaCppGenerator) -> None:
    with pytest.raises(GenerationError, match="n_ctx|context"):
        gen.generate(_prompt("x" * 5000), max_tokens=4)
    assert gen.generate(_prompt("still alive?"), max_tokens=3).usage.completion_tokens == 3


def test_decode_failure_is_retried_once(gen: LlamaCppGenerator, monkeypatch: pytest.MonkeyPatch) -> None:
    real = gen._run
    calls = {"n": 0}

    def flaky(*a, **kw):  # the engine's own error, raised on the first decode only
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("llama_decode returned 1")
        return real(*a, **kw)

    monkeypatch.setattr(gen, "_run", flaky)
    g = gen.generate(_prompt("retry me"), max_tokens=3)
    assert calls["n"] == 2 and g.usage.completion_tokens == 3

    def always(*a, **kw):
        raise RuntimeError("llama_decode returned 1")

    monkeypatch.setattr(gen, "_run", always)
    with pytest.raises(GenerationError, match="decode failed twice"):
        gen.generate(_prompt("fail"), max_tokens=3)
    monkeypatch.setattr(gen, "_run", real)
    assert gen.generate(_prompt("back"), max_tokens=2).usage.completion_tokens == 2


def test_missing_model_is_clear(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="make-gguf"):
        LlamaCppGenerator(str(tmp_path / "nope.gguf")).generate(_prompt("x"), max_tokens=2)


def test_count_prompt_equals_the_engines_own_count(gen: LlamaCppGenerator) -> None:
    """The tier counts in the engine's tokens (chat template included), not in cl100k: the count made
    before the call is exactly what llama.cpp then reports as prompt tokens."""
    for q in ("what is a llama?", "How long is the Seine, and which bridges cross it in Paris? " * 5):
        p = _prompt(q)
        counted = gen.count_prompt(p)
        g = gen.generate(p, max_tokens=4)
        assert counted == g.usage.prompt_tokens
        assert counted != p.total_tokens  # the builder's cl100k count differs from the engine's


def test_router_checks_the_window_in_engine_tokens(tiny_gguf: Path, gen: LlamaCppGenerator) -> None:
    """A prompt that fits the window in cl100k tokens but not in the engine's is refitted (or refused),
    never sent over the window."""
    from ragbudget.config import LLMConfig, TierConfig
    from ragbudget.route import Router

    p = _prompt("Seine bridges? " * 40)
    engine_n = gen.count_prompt(p)
    assert engine_n > p.total_tokens  # this vocabulary spends more tokens than cl100k
    window = (p.total_tokens + engine_n) // 2 + 8  # fits in cl100k (+8 output), not in engine tokens
    tier = TierConfig(name="local", backend="llamacpp", model=str(tiny_gguf), context_window=max(window, 128),
                      max_output_tokens=8)
    router = Router(LLMConfig(tiers=[tier]), generators={"local": gen})
    n, estimated = router.engine_tokens(tier, p)
    assert (n, estimated) == (engine_n, False)
    sent = []

    def refit(w: int):
        sent.append(w)
        return _prompt("Seine bridges?")

    routed = router.generate(p, question="Seine bridges?", max_tokens=8, refit=refit)
    assert sent and routed.decision.refitted
    assert routed.decision.prompt_tokens_counted == routed.generation.usage.prompt_tokens
    assert routed.generation.usage.prompt_tokens + 8 <= tier.context_window

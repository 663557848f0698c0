"""The openai backend streaming from real servers on loopback: llama-cpp-python's OpenAI-compatible server
running the generated GGUF, and a raw HTTP server of our own for the bad cases."""

from __future__ import annotations

import pytest

from fixtures_llm import RawServer, free_port
from ragbudget.config import TierConfig
from ragbudget.errors import (BackendUnavailableError, GenerationError, GenerationTimeoutError,
                              PartialGenerationError)
from ragbudget.llm import OpenAIGenerator, make_prompt

STATIC = "System policy: answer from the documents and cite them. " * 3


def _prompt(q: str):
    return make_prompt([("system", STATIC), ("user", q)], static_prefix=STATIC)


def test_streams_from_llama_cpp_server(llama_server: str) -> None:
    gen = OpenAIGenerator("tiny", base_url=llama_server, timeout_s=30, first_token_timeout_s=30)
    assert "tiny" in gen.check()
    s = gen.stream(_prompt("What is in the documents?"), max_tokens=12)
    events = list(s)
    g = s.generation
    assert g is not None and not g.partial and g.backend == "openai"
    assert len(events) >= 2 and g.text == "".join(e.text for e in events)
    assert g.finish_reason == "length"
    assert g.usage.prompt_tokens > 0 and g.usage.completion_tokens >= len(events) - 1
    assert g.timings.ttft_ms is not None and len(g.timings.itl_ms) == len(events) - 1


async def test_async_against_server(llama_server: str) -> None:
    gen = OpenAIGenerator("tiny", base_url=llama_server)
    g = await gen.agenerate(_prompt("async"), max_tokens=6)
    assert g.text and not g.partial


def test_usage_and_cached_tokens_are_read(raw_server: RawServer) -> None:
    g = OpenAIGenerator("raw", base_url=raw_server.base_url).generate(_prompt("hi"), max_tokens=5)
    assert g.text == "Hello partial world" and not g.partial
    assert (g.usage.prompt_tokens, g.usage.cached_tokens, g.usage.completion_tokens) == (11, 7, 3)


def test_stream_closed_mid_answer_is_partial(raw_server: RawServer) -> None:
    raw_server.mode = "close_mid"
    s = OpenAIGenerator("raw", base_url=raw_server.base_url, retries=0).stream(_prompt("hi"), max_tokens=5)
    with pytest.raises(PartialGenerationError) as ei:
        list(s)
    assert ei.value.partial_text == "Hello partial world"
    assert s.generation is not None and s.generation.partial and s.generation.text == "Hello partial world"


def test_malformed_sse_is_partial(raw_server: RawServer) -> None:
    raw_server.mode = "malformed"
    with pytest.raises(PartialGenerationError, match="malformed") as ei:
        OpenAIGenerator("raw", base_url=raw_server.base_url, retries=0).generate(_prompt("hi"), max_tokens=5)
    assert ei.value.partial_text == "Hello partial world"


def test_wrong_model_is_unavailable(raw_server: RawServer) -> None:
    gen = OpenAIGenerator("no-such-model", base_url=raw_server.base_url, retries=0)
    with pytest.raises(BackendUnavailableError, match="404"):
        gen.generate(_prompt("hi"), max_tokens=5)
    with pytest.raises(BackendUnavailableError, match="unknown model"):
        gen.check()


def test_unreachable_server_is_unavailable() -> None:
    gen = OpenAIGenerator("m", base_url=f"http://127.0.0.1:{free_port()}/v1", retries=0, timeout_s=2)
    with pytest.raises(BackendUnavailableError, match="unreachable"):
        gen.generate(_prompt("hi"), max_tokens=5)


def test_first_token_timeout(raw_server: RawServer) -> None:
    raw_server.mode = "slow"
    gen = OpenAIGenerator("raw", base_url=raw_server.base_url, retries=0, first_token_timeout_s=0.5)
    with pytest.raises(GenerationTimeoutError):
        gen.generate(_prompt("hi"), max_tokens=5)


def test_missing_api_key_env_is_clear(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RB_TEST_KEY", raising=False)
    tier = TierConfig(name="big", backend="openai", model="gpt", api_key_env="RB_TEST_KEY")
    with pytest.raises(GenerationError, match="RB_TEST_KEY"):
        OpenAIGenerator.from_tier(tier)
    monkeypatch.setenv("RB_TEST_KEY", "sk-test")
    assert OpenAIGenerator.from_tier(tier).client.api_key == "sk-test"


@pytest.fixture(params=["extractive", "llamacpp", "openai-llama-server"])
def any_backend(request: pytest.FixtureRequest):
    from ragbudget.llm import ExtractiveGenerator, LlamaCppGenerator

    if request.param == "extractive":
        return ExtractiveGenerator()
    if request.param == "llamacpp":
        pytest.importorskip("llama_cpp")
        return LlamaCppGenerator(str(request.getfixturevalue("tiny_gguf")), n_ctx=2048, n_threads=2)
    return OpenAIGenerator("tiny", base_url=request.getfixturevalue("llama_server"))


async def test_generator_conformance(any_backend) -> None:
    """Every backend honours the same protocol: events, final Generation, usage, timings, async twins."""
    from ragbudget.llm import Generator
    from ragbudget.types import Chunk, Scored

    ctx = [Scored(Chunk(id="c", doc_id="d", text="Llamas are domesticated South American camelids. "
                        "They are used as pack animals."), score=1.0)]
    p = make_prompt([("system", STATIC), ("user", "Question: What are llamas used as?")], static_prefix=STATIC)
    assert isinstance(any_backend, Generator)
    s = any_backend.stream(p, max_tokens=8, context=ctx)
    events = list(s)
    g = s.generation
    assert events and [e.index for e in events] == list(range(len(events)))
    assert g.text == "".join(e.text for e in events) and not g.partial
    assert 0 < g.usage.completion_tokens <= 8 and g.usage.prompt_tokens > 0
    assert g.timings.ttft_ms is not None and len(g.timings.itl_ms) == len(events) - 1
    assert g.backend == any_backend.name
    g2 = await any_backend.agenerate(p, max_tokens=8, context=ctx)
    assert 0 < g2.usage.completion_tokens <= 8


def test_gguf_counter_counts_what_llama_cpp_evaluates(llama_server: str, tiny_gguf) -> None:
    """A server that serves a GGUF: `tokenizer: gguf:PATH` counts with that model's tokenizer and chat
    template — exactly what llama.cpp evaluates (the in-process engine reports it) — and, since this
    server streams no usage, that count replaces the builder's cl100k estimate, marked as not reported."""
    from ragbudget.config import LLMConfig
    from ragbudget.llm import LlamaCppGenerator
    from ragbudget.route import Router

    tier = TierConfig(name="srv", backend="openai", model="tiny", base_url=llama_server, context_window=2048,
                      max_output_tokens=4, tokenizer=f"gguf:{tiny_gguf}")
    router = Router(LLMConfig(tiers=[tier]))
    engine = LlamaCppGenerator(str(tiny_gguf), n_ctx=2048, n_threads=2)
    for q in ("What is in the documents?", "Which bridges cross the Seine in Paris, and when were they built?"):
        p = _prompt(q)
        r = router.generate(p, question=q, max_tokens=4)
        truth = engine.generate(p, max_tokens=2).usage.prompt_tokens
        assert r.decision.prompt_tokens_counted == truth and not r.decision.prompt_tokens_estimated
        assert r.generation.usage_estimated  # llama-cpp-python's server sends no usage in streams
        assert r.generation.usage.prompt_tokens == truth != p.total_tokens
    auto = Router(LLMConfig(tiers=[tier.model_copy(update={"tokenizer": "auto"})]))
    r = auto.generate(_prompt("What is in the documents?"), question="q", max_tokens=4)
    assert r.decision.prompt_tokens_estimated and r.generation.usage_estimated

"""Conformance: every real implementation of each seam satisfies its Protocol.

Each Protocol is ``runtime_checkable``; ``isinstance`` checks the members exist, :func:`_signatures_fit`
checks each method accepts what the Protocol promises callers may pass, and a short behaviour check runs
the real object (no fakes of the code under test).
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import numpy as np
import pytest
import redis

from ragbudget.stages.buckets import Buckets, MemoryBuckets, RedisBuckets
from ragbudget.cache import MemoryBackend, RedisBackend, SQLiteBackend
from ragbudget.cache.base import KVBackend
from ragbudget.embed.encoder import Embedder, SentenceTransformerEmbedder
from ragbudget.eval.tuning import _MemoEmbedder
from ragbudget.llm import ExtractiveGenerator, LlamaCppGenerator, OpenAIGenerator, make_prompt
from ragbudget.llm.base import Generator
from ragbudget.embed.microbatch import MicroBatcher
from ragbudget.retrieval.rerank import BiEncoderReranker, CrossEncoderReranker, Reranker
from ragbudget.types import Chunk, Generation, Scored, TokenEvent

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # benchmarks/retrieval_modes.py
from retrieval_modes import _EncodeEveryQuery  # noqa: E402


def _protocol_methods(proto: type) -> dict[str, inspect.Signature]:
    out = {}
    for name, member in vars(proto).items():
        if name.startswith("_") or isinstance(member, property) or not callable(member):
            continue
        out[name] = inspect.signature(member)
    return out


def _signatures_fit(impl: type, proto: type) -> None:
    """Every parameter a Protocol method declares is accepted by the implementation, with a compatible
    kind (positional stays positional, keyword-only may be taken by name or by ``**kwargs``)."""
    for name, want in _protocol_methods(proto).items():
        got = inspect.signature(getattr(impl, name))
        params = got.parameters
        has_kwargs = any(p.kind is p.VAR_KEYWORD for p in params.values())
        for p in list(want.parameters.values())[1:]:  # past self
            if p.kind is p.VAR_KEYWORD:
                assert has_kwargs, f"{impl.__name__}.{name} lacks **{p.name}"
            elif p.kind is p.VAR_POSITIONAL:
                assert any(q.kind is q.VAR_POSITIONAL for q in params.values()), f"{impl.__name__}.{name}"
            elif p.name in params:
                q = params[p.name]
                if p.kind is p.POSITIONAL_OR_KEYWORD:
                    assert q.kind is q.POSITIONAL_OR_KEYWORD, f"{impl.__name__}.{name}({p.name}) kind"
                if p.default is not p.empty:
                    assert q.default is not q.empty, f"{impl.__name__}.{name}({p.name}) must be optional"
            else:
                assert p.kind is p.KEYWORD_ONLY and has_kwargs, f"{impl.__name__}.{name} lacks {p.name}"


# ---------------------------------------------------------------------------------------------- Embedder

EMBEDDERS = ["sentence-transformers", "micro-batcher", "memo (tuning)", "encode-every-query (bench)"]


@pytest.fixture(params=EMBEDDERS)
def any_embedder(request, embedder):
    kind = request.param
    if kind == "sentence-transformers":
        yield embedder
    elif kind == "micro-batcher":
        mb = MicroBatcher(embedder, max_batch=4, max_wait_ms=0)
        yield mb
        mb.close()
    elif kind == "memo (tuning)":
        yield _MemoEmbedder(embedder)
    else:
        yield _EncodeEveryQuery(embedder)


def test_embedder_protocol_dim_is_read_only():
    for member in ("dim", "model_id"):
        assert isinstance(inspect.getattr_static(Embedder, member), property)
        assert inspect.getattr_static(Embedder, member).fset is None


def test_every_embedder_conforms(any_embedder):
    e = any_embedder
    assert isinstance(e, Embedder)
    _signatures_fit(type(e), Embedder)
    assert isinstance(e.model_id, str) and e.model_id and e.dim == 384
    vecs = e.embed(["a cat sat on the mat", "budgets are lent between sections"])
    assert vecs.shape == (2, e.dim) and vecs.dtype == np.float32
    q = e.embed_query("where did the cat sit?")
    assert q.shape == (e.dim,)
    assert float(vecs[0] @ q) > float(vecs[1] @ q)  # a real model: the related text is closer
    assert e.embed([]).shape == (0, e.dim)


def test_sentence_transformer_dim_cannot_be_set(embedder):
    with pytest.raises(AttributeError):
        embedder.dim = 3  # type: ignore[misc]
    assert isinstance(embedder, SentenceTransformerEmbedder)


# --------------------------------------------------------------------------------------------- Generator

@pytest.fixture(params=["extractive", "llamacpp", "openai"])
def any_generator(request, tiny_gguf):
    if request.param == "extractive":
        return ExtractiveGenerator()
    if request.param == "llamacpp":
        return LlamaCppGenerator(str(tiny_gguf), n_ctx=512, n_threads=1)
    return OpenAIGenerator("m", base_url="http://127.0.0.1:9/v1", retries=0)


def test_every_generator_conforms(any_generator):
    g = any_generator
    assert isinstance(g, Generator)
    _signatures_fit(type(g), Generator)
    assert isinstance(g.name, str) and g.name and isinstance(g.model, str) and g.model


@pytest.mark.parametrize("kind", ["extractive", "llamacpp"])  # openai: against real servers, test_openai_backend
def test_local_generators_generate_and_stream(kind, tiny_gguf):
    g = ExtractiveGenerator() if kind == "extractive" else LlamaCppGenerator(str(tiny_gguf), n_ctx=512,
                                                                               n_threads=1)
    chunk = Chunk(id="c1", doc_id="d1", text="Unused budget is lent to the retrieved section first.",
                  metadata={"source": "budgets.md"})
    ctx = [Scored(chunk=chunk, score=1.0)]
    prompt = make_prompt([("system", "Answer from the context."), ("user", "How is unused budget lent?")])
    gen = g.generate(prompt, max_tokens=4, context=ctx)
    assert isinstance(gen, Generation) and gen.text and gen.usage.completion_tokens >= 1
    stream = g.stream(prompt, max_tokens=4, context=ctx)
    events = list(stream)
    assert events and all(isinstance(ev, TokenEvent) for ev in events)
    assert stream.generation is not None and "".join(ev.text for ev in events) == stream.generation.text


# ---------------------------------------------------------------------------------------- cache backends

@pytest.fixture(params=["memory", "sqlite", "redis"])
def any_backend(request, tmp_path):
    if request.param == "memory":
        b = MemoryBackend(max_value_bytes=64)
    elif request.param == "sqlite":
        b = SQLiteBackend(tmp_path / "kv.sqlite", max_value_bytes=64)
    else:
        url = request.getfixturevalue("redis_server")
        redis.Redis.from_url(url).flushdb()
        b = RedisBackend(url, max_value_bytes=64, prefix="proto:")
    yield b
    b.close()


def test_every_cache_backend_conforms(any_backend):
    b = any_backend
    assert isinstance(b, KVBackend)
    _signatures_fit(type(b), KVBackend)
    assert b.get("k") is None
    assert b.set("k", b"v1") and b.get("k") == b"v1"
    assert b.set("k", b"v2", ttl_s=60) and b.get("k") == b"v2"
    assert b.set("big", b"x" * 65) is False and b.get("big") is None  # over max_value_bytes: refused
    assert b.stats.too_large == 1
    b.delete("k")
    assert b.get("k") is None
    b.set("a", b"1")
    b.clear()
    assert b.get("a") is None


# ------------------------------------------------------------------------------------ buckets, rerankers

@pytest.fixture(params=["memory", "redis"])
def any_buckets(request):
    if request.param == "memory":
        return MemoryBuckets()
    url = request.getfixturevalue("redis_server")
    redis.Redis.from_url(url).flushdb()
    return RedisBuckets(url, prefix="proto:")


def test_every_bucket_store_conforms(any_buckets):
    b = any_buckets
    assert isinstance(b, Buckets)
    _signatures_fit(type(b), Buckets)
    assert [b.take("k", 1, rate=0.001, burst=2)[0] for _ in range(3)] == [True, True, False]
    b.adjust("k", 1, rate=0.001, burst=2)  # give one back
    assert b.take("k", 1, rate=0.001, burst=2)[0]


def test_every_reranker_conforms(embedder):
    r = BiEncoderReranker(embedder)
    assert isinstance(r, Reranker)
    scores = r.score("how is budget lent?", ["unused budget is lent to other sections", "a cat sat on a mat"])
    assert scores.shape == (2,) and scores[0] > scores[1]
    # the cross-encoder needs a model folder that is not shipped: check the class's shape only
    _signatures_fit(BiEncoderReranker, Reranker)
    _signatures_fit(CrossEncoderReranker, Reranker)
    assert isinstance(CrossEncoderReranker.name, str)


def test_conformance_covers_every_concrete_class_in_the_package():
    """A new backend must be added above: count the classes that implement each seam."""
    import ragbudget.cache as cache_pkg
    import ragbudget.llm as llm_pkg
    backends = {n for n, c in vars(cache_pkg).items() if inspect.isclass(c) and n.endswith("Backend")
                and n != "KVBackend"}
    assert backends == {"MemoryBackend", "SQLiteBackend", "RedisBackend"}
    gens = {n for n, c in vars(llm_pkg).items() if inspect.isclass(c) and n.endswith("Generator")
            and n not in ("Generator", "BaseGenerator")}
    assert gens == {"ExtractiveGenerator", "LlamaCppGenerator", "OpenAIGenerator"}

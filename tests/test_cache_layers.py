"""Cache layers: keys that make hits correct, guarded semantic hits, retrieval/tool caches, failures."""

from __future__ import annotations

import dataclasses
import json
import uuid

import pytest
from redis_fixture import free_port

from ragbudget.cache import (CacheLayers, ExactResponseCache, MemoryBackend, RedisBackend, ResponseCache,
                             ResponseScope, RetrievalCache, SemanticResponseCache, ToolCache, answer_from_dict,
                             conversation_fingerprint, normalize_question)
from ragbudget.cache import guards
from ragbudget.config import CacheConfig, SemanticCacheConfig
from ragbudget.errors import CacheError
from ragbudget.types import Answer, Chunk, Citation, Ledger, Message, Scored, Timings, Usage

SCOPE = ResponseScope(tenant="acme", index_version="idx-v1", prompt_version="p1", model_tier="small",
                      max_tokens=128, temperature=0.0, mode="concise")


def make_answer(question: str = "How do I reset my password?") -> Answer:
    chunk = Chunk(id="c1", doc_id="faq.md", text="Open Settings, then Security, then Reset.", position=2,
                  metadata={"source": "faq.md", "title": "FAQ"})
    ledger = Ledger()
    ledger.section("retrieved", 1200).used = 12
    ledger.route = {"tier": "small"}
    return Answer(question=question, answer="Open Settings → Security → Reset [1].",
                  citations=[chunk.citation()], context=[Scored(chunk=chunk, score=0.9, dense_score=0.8)],
                  ledger=ledger, usage=Usage(prompt_tokens=300, cached_tokens=100, completion_tokens=20),
                  timings=Timings(stages={"retrieve": 5.0}, ttft_ms=40.0, itl_ms=[3.0], total_ms=250.0),
                  route="small")


@pytest.fixture
def exact() -> ExactResponseCache:
    return ExactResponseCache(MemoryBackend())


@pytest.fixture
def semantic(embedder) -> SemanticResponseCache:
    return SemanticResponseCache(MemoryBackend(), embedder, SemanticCacheConfig())


def test_normalize_question():
    assert normalize_question("  How  do I\tReset my PASSWORD?!  ") == "how do i reset my password"
    assert normalize_question("Straße？") == normalize_question("STRASSE")


def test_exact_hit_returns_original_record_and_layer(exact):
    ans = make_answer()
    assert exact.lookup(SCOPE, ans.question) is None
    assert exact.store(SCOPE, ans.question, ans.to_dict())
    hit = exact.lookup(SCOPE, "how do i reset my password")
    assert hit is not None and hit.layer == "exact"
    back = hit.answer()
    assert back.cache_layer == "exact" and back.ledger.cache_layer == "exact"
    assert back.answer == ans.answer and back.usage == ans.usage
    assert back.citations == [Citation("c1", "faq.md", "faq.md", "FAQ", 2)]
    assert back.context[0].chunk.text == ans.context[0].chunk.text
    assert back.ledger.sections["retrieved"].used == 12 and back.timings.total_ms == 250.0
    snap = exact.stats.snapshot()
    assert snap["hits"] == 1 and snap["misses"] == 1 and snap["hit_rate"] == 0.5
    assert snap["tokens_saved"] == 320 and snap["ms_saved"] == 250.0


def test_answer_roundtrip_through_json():
    ans = make_answer()
    back = answer_from_dict(json.loads(json.dumps(ans.to_dict())))
    assert {**back.to_dict(), "cache_layer": None, "ledger": None} == {**ans.to_dict(), "ledger": None}


@pytest.mark.parametrize("field,value", [
    ("tenant", "other"), ("index_version", "idx-v2"), ("prompt_version", "p2"), ("model_tier", "large"),
    ("max_tokens", 256), ("temperature", 0.7), ("mode", "detailed"),
    ("conversation", conversation_fingerprint([Message("user", "Who is Ada Lovelace?")])),
])
def test_every_scope_field_separates_answers(exact, field, value):
    exact.store(SCOPE, "How do I reset my password?", make_answer().to_dict())
    other = dataclasses.replace(SCOPE, **{field: value})
    assert other.id != SCOPE.id
    assert exact.lookup(other, "How do I reset my password?") is None
    assert exact.lookup(SCOPE, "How do I reset my password?") is not None


def test_reingest_changes_index_version_so_old_answers_are_unreachable(embedder):
    layers = CacheLayers.from_config(CacheConfig(), embedder)
    q = "How do I reset my password?"
    layers.response.store(SCOPE, q, make_answer().to_dict())
    new_scope = dataclasses.replace(SCOPE, index_version="idx-v2")  # documents changed
    assert layers.response.lookup(new_scope, q) is None
    assert layers.response.lookup(new_scope, "How can I reset my password?") is None
    assert layers.response.lookup(SCOPE, q).layer == "exact"


def test_non_serialisable_record_stores_nothing(embedder):
    backend = MemoryBackend()
    rc = ResponseCache(ExactResponseCache(backend), SemanticResponseCache(backend, embedder))
    with pytest.raises(CacheError, match="not JSON-serialisable"):
        rc.store(SCOPE, "q?", {"answer": object()})
    with pytest.raises(CacheError):
        rc.store(SCOPE, "q?", {"score": float("nan")})
    assert len(backend) == 0 and len(rc.semantic) == 0


def test_oversized_answer_is_refused_and_counted():
    backend = MemoryBackend(max_value_bytes=200)
    exact = ExactResponseCache(backend)
    assert exact.store(SCOPE, "q", {"answer": "x" * 500}) is False
    assert backend.stats.too_large == 1 and exact.stats.store_failures == 1
    assert exact.lookup(SCOPE, "q") is None


def test_semantic_paraphrase_hits(semantic):
    semantic.store(SCOPE, "How do I reset my password?", make_answer().to_dict())
    hit = semantic.lookup(SCOPE, "How can I reset my password?")
    assert hit is not None and hit.layer == "semantic" and hit.similarity >= semantic.config.threshold
    assert hit.matched_question == "How do I reset my password?"
    assert hit.answer().cache_layer == "semantic"
    assert semantic.stats.snapshot()["tokens_saved"] == 320


@pytest.mark.parametrize("stored,asked,guard", [
    ("What is the refund limit for orders over 50 dollars?",
     "What is the refund limit for orders over 500 dollars?", "numbers"),
    ("Can I cancel my subscription online?", "Can I not cancel my subscription online?", "negation"),
    ("What are the opening hours of the Berlin office?", "What are the opening hours of the Munich office?",
     "entities"),
    ("Seven Air Force Academy cadets face punishment for allegedly drinking with two high school girls.",
     "Seven Air Force Academy cadets face punishment for drinking with two high school girls in the latest "
     "incident to embarrass the academy.", "substitution"),  # MRPC train, labelled "not a paraphrase";
    # "allegedly" dropped and a clause added: the contrast verifier sees an unexplained substitution
    # (with guard_contrast off the content guard rejects it, see test_content_guard_without_contrast)
])
def test_semantic_guards_reject_close_but_different_questions(semantic, stored, asked, guard):
    semantic.store(SCOPE, stored, make_answer(stored).to_dict())
    assert semantic.candidates(SCOPE, asked), "cosine alone would have served this"
    assert guards.check(stored, asked) == guard
    assert semantic.lookup(SCOPE, asked) is None
    assert semantic.stats.rejected_by_guard == 1


def test_content_guard_without_contrast():
    stored = "Seven Air Force Academy cadets face punishment for allegedly drinking with two high school girls."
    asked = ("Seven Air Force Academy cadets face punishment for drinking with two high school girls in the "
             "latest incident to embarrass the academy.")
    assert guards.check(stored, asked, guards.GuardSettings(contrast=False)) == "content"


def test_verifier_hook_has_the_last_word(embedder):
    calls = []

    def verifier(stored: str, new: str) -> bool:
        calls.append((stored, new))
        return False

    sem = SemanticResponseCache(MemoryBackend(), embedder, verifier=verifier)
    sem.store(SCOPE, "How do I reset my password?", make_answer().to_dict())
    assert sem.lookup(SCOPE, "How can I reset my password?") is None
    assert calls == [("How do I reset my password?", "How can I reset my password?")]


def test_follow_up_does_not_hit_across_conversations(embedder):
    layers = CacheLayers.from_config(CacheConfig(), embedder)
    conv_a = [Message("user", "Who was Alan Turing?"), Message("assistant", "A British mathematician.")]
    conv_b = [Message("user", "Who was Grace Hopper?"), Message("assistant", "An American computer scientist.")]
    scope_a = dataclasses.replace(SCOPE, conversation=conversation_fingerprint(conv_a))
    scope_b = dataclasses.replace(SCOPE, conversation=conversation_fingerprint(conv_b))
    layers.response.store(scope_a, "And his age?", {"answer": "He died at 41."})
    assert layers.response.lookup(scope_b, "And his age?") is None
    assert layers.response.lookup(scope_b, "and what was his age") is None
    assert layers.response.lookup(scope_a, "and his age").record["answer"] == "He died at 41."
    same_history_again = dataclasses.replace(SCOPE, conversation=conversation_fingerprint(
        [{"role": m.role, "content": m.content} for m in conv_a]))
    assert layers.response.lookup(same_history_again, "And his age?") is not None


def test_semantic_entries_expire_and_are_bounded(embedder):
    class Clock:
        t = 0.0

        def __call__(self) -> float:
            return self.t

    clock = Clock()
    backend = MemoryBackend(clock=clock)
    sem = SemanticResponseCache(backend, embedder, SemanticCacheConfig(max_entries=2), ttl_s=60, clock=clock)
    for q in ("How do I reset my password?", "Where is my invoice?", "How do I delete my account?"):
        sem.store(SCOPE, q, {"answer": q})
    assert len(sem) == 2  # the oldest entry was evicted
    assert sem.lookup(SCOPE, "How can I reset my password?") is None
    assert sem.lookup(SCOPE, "Where can I find my invoice?") is not None
    clock.t += 61
    assert sem.lookup(SCOPE, "Where can I find my invoice?") is None


def test_retrieval_cache_keys_on_version_settings_and_query():
    rc = RetrievalCache(MemoryBackend())
    settings = {"mode": "hybrid", "top_k": 5}
    rc.set("v1", settings, "What is BM25?", [("c1", 0.9), ("c2", 0.5)], elapsed_ms=12.0)
    assert rc.get("v1", settings, "what is bm25") == [("c1", 0.9), ("c2", 0.5)]
    assert rc.get("v2", settings, "What is BM25?") is None
    assert rc.get("v1", {"mode": "hybrid", "top_k": 10}, "What is BM25?") is None
    assert rc.stats.snapshot()["ms_saved"] == 12.0


def test_tool_cache_calls_once_until_ttl_expires():
    class Clock:
        t = 0.0

        def __call__(self) -> float:
            return self.t

    clock = Clock()
    tc = ToolCache(MemoryBackend(clock=clock), ttl_s=30)
    calls = []

    def weather(city: str) -> dict:
        calls.append(city)
        return {"city": city, "temp_c": 21}

    assert tc.call("weather", {"city": "Oslo"}, weather) == {"city": "Oslo", "temp_c": 21}
    assert tc.call("weather", {"city": "Oslo"}, weather) == {"city": "Oslo", "temp_c": 21}
    assert tc.call("weather", {"city": "Rome"}, weather)["city"] == "Rome"
    assert calls == ["Oslo", "Rome"]
    clock.t += 31
    tc.call("weather", {"city": "Oslo"}, weather)
    assert calls == ["Oslo", "Rome", "Oslo"]
    assert tc.get("weather", {"city": "Oslo"}, version="2")[0] is False
    with pytest.raises(CacheError):
        tc.set("weather", {"city": "X"}, {1, 2})


def test_redis_down_serves_without_the_layer(embedder):
    backend = RedisBackend(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.1, cooldown_s=0)
    layers = CacheLayers.from_config(CacheConfig(backend="redis"), embedder, backend=backend)
    assert layers.response.store(SCOPE, "How do I reset my password?", make_answer().to_dict()) is False
    assert layers.response.lookup(SCOPE, "How do I reset my password?") is None
    assert layers.retrieval.get("v1", {}, "q") is None
    snap = layers.snapshot()
    assert snap["backend"]["errors"] >= 3 and snap["layers"]["exact"]["misses"] == 1


def test_layers_over_shared_redis(redis_server, embedder):  # noqa: F811
    be1 = RedisBackend(redis_server, prefix=f"s{uuid.uuid4().hex[:6]}:")
    be2 = RedisBackend(redis_server, prefix=be1.prefix)  # a second replica
    a = CacheLayers.from_config(CacheConfig(backend="redis"), embedder, backend=be1)
    b = CacheLayers.from_config(CacheConfig(backend="redis"), embedder, backend=be2)
    a.response.store(SCOPE, "How do I reset my password?", make_answer().to_dict())
    hit = b.response.lookup(SCOPE, "how do I reset my password")
    assert hit is not None and hit.layer == "exact"

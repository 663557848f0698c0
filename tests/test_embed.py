import json

import numpy as np
import pytest

from ragbudget.config import EmbeddingConfig
from ragbudget.embed.encoder import EmbeddingCache, SentenceTransformerEmbedder, bundled_model_path, text_key
from ragbudget.errors import ModelNotFoundError

from fixtures_retrieval import CRANFIELD


def test_bundled_model_is_a_local_folder():
    assert (bundled_model_path() / "config.json").is_file()


def test_missing_model_path_is_clear(tmp_path):
    with pytest.raises(ModelNotFoundError, match=str(tmp_path)):
        SentenceTransformerEmbedder(EmbeddingConfig(model=str(tmp_path / "absent")))


def test_embeddings_are_normalised_and_meaningful(embedder):
    v = embedder.embed(["How do I change my email address?", "Can I update my account email?",
                        "The boundary layer separates at high angles of attack."])
    assert v.shape == (3, embedder.dim) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-4)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.3


def test_few_texts_match_sentence_transformers_encode(embedder):
    texts = ["What is the boundary layer?", "supersonic flow over a wedge " * 40]  # one long: truncated
    got = embedder.embed(texts)
    ref = embedder._model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
    assert np.allclose(got, ref, atol=1e-5)


def test_memory_then_persistent_cache_skip_the_model(tmp_path, embedder):
    cache = EmbeddingCache(tmp_path / "emb.sqlite")
    emb = SentenceTransformerEmbedder(EmbeddingConfig(cache=True), cache=cache)
    emb._model, emb._dim = embedder._model, embedder._dim
    seen: list[str] = []
    real = emb._encode
    emb._encode = lambda texts: (seen.extend(texts), real(texts))[1]
    a = emb.embed(["alpha text", "beta text"])
    assert seen == ["alpha text", "beta text"] and cache.misses == 2
    b = emb.embed(["beta text", "alpha text", "gamma text"])
    assert seen[2:] == ["gamma text"]            # alpha/beta from memory, not the model
    assert cache.hits == 0 and cache.misses == 3  # ... and not even from SQLite
    assert np.allclose(a[0], b[1]) and np.allclose(a[1], b[0])
    cache.close()
    # a new process (new embedder, same file) gets them from the persistent cache
    cache2 = EmbeddingCache(tmp_path / "emb.sqlite")
    emb2 = SentenceTransformerEmbedder(EmbeddingConfig(cache=True), cache=cache2)
    emb2._model, emb2._dim = embedder._model, embedder._dim
    emb2._encode = lambda texts: (_ for _ in ()).throw(AssertionError(f"model called for {texts}"))
    c = emb2.embed(["gamma text", "alpha text"])
    assert cache2.hits == 2 and np.allclose(c[1], a[0])
    assert len(cache2.get_many(emb.model_id, [text_key("gamma text")])) == 1


def test_query_vectors_are_memoised_read_only(embedder):
    v1 = embedder.embed_query("what is a budget?")
    v2 = embedder.embed_query("what is a budget?")
    assert v1 is v2 and not v1.flags.writeable


def test_corrupt_cache_file_is_recreated(tmp_path):
    p = tmp_path / "emb.sqlite"
    p.write_bytes(b"this is not a database" * 100)
    cache = EmbeddingCache(p)
    cache.put_many("m", {"k": np.ones(3, np.float32)})
    assert "k" in cache.get_many("m", ["k"])
    assert (tmp_path / "emb.corrupt").exists()


def test_bulk_precision_keeps_vectors_and_bulk_threads_are_restored() -> None:
    import torch

    from ragbudget.config import EmbeddingConfig
    from ragbudget.embed.encoder import BULK_MIN_TEXTS, SentenceTransformerEmbedder, native_bf16

    texts = [f"Boundary layer transition on a swept wing at Mach {m / 10:.1f} with suction slot {m}." for m in
             range(BULK_MIN_TEXTS * 2)]
    f32 = SentenceTransformerEmbedder(EmbeddingConfig(cache=False, bulk_precision="float32"))
    auto = SentenceTransformerEmbedder(EmbeddingConfig(cache=False, bulk_precision="auto"))
    assert f32.bulk_dtype == "float32"
    assert auto.bulk_dtype == ("bfloat16" if native_bf16() else "float32")
    a, b = f32.embed(texts), auto.embed(texts)
    assert a.dtype == b.dtype == np.float32 and float((a * b).sum(1).min()) > 0.999
    assert np.allclose(auto.embed_query(texts[0]), f32.embed_query(texts[0]), atol=1e-5)  # queries: float32
    before = torch.get_num_threads()
    with auto.bulk(1):
        assert torch.get_num_threads() == 1
    with auto.bulk(None):
        assert torch.get_num_threads() == before
    assert torch.get_num_threads() == before


def test_token_batches_respect_the_budget_and_keep_every_item_once() -> None:
    from ragbudget.embed.encoder import token_batches

    lengths = [3, 250, 40, 40, 7, 600, 41, 12, 256, 5]
    batches = token_batches(lengths, budget=300)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert batches[0] == [5]  # longer than the budget alone: a batch of its own, first
    for b in batches:  # padded width = the batch's longest item, and it comes first
        assert lengths[b[0]] == max(lengths[i] for i in b)
        assert len(b) == 1 or len(b) * lengths[b[0]] <= 300
    assert [len(b) for b in token_batches([10] * 9, budget=30, max_items=2)] == [2, 2, 2, 2, 1]


def test_bulk_workers_return_the_same_vectors_in_input_order() -> None:
    """Side-by-side workers and token-budget batches change how texts are grouped, not their vectors."""
    import torch
    from sentence_transformers import SentenceTransformer

    from ragbudget.config import EmbeddingConfig
    from ragbudget.embed.encoder import SentenceTransformerEmbedder

    rows = [json.loads(line) for line in open(CRANFIELD / "corpus.jsonl", encoding="utf-8")][:40]
    texts = [r["text"] for r in rows] + [r["title"] for r in rows]  # long and short, interleaved lengths
    emb = SentenceTransformerEmbedder(EmbeddingConfig(cache=False, bulk_precision="float32", bulk_batch_tokens=1024,
                                                      memory_cache_entries=0))
    before = torch.get_num_threads()
    with emb.bulk(2):
        assert torch.get_num_threads() == 1
        got = emb.embed(texts)
    assert torch.get_num_threads() == before
    ref = SentenceTransformer(str(emb.path), device="cpu", local_files_only=True).encode(
        texts, batch_size=8, normalize_embeddings=True)
    assert got.shape == ref.shape
    assert float((got * ref).sum(1).min()) > 0.9999


def test_queries_encode_while_a_bulk_ingest_runs(embedder) -> None:
    """A serving process embeds questions while an ingest job bulk-embeds: neither may break the other
    (one shared fast tokenizer; the bulk path counts tokens with its own copy)."""
    import threading

    rows = [json.loads(line) for line in open(CRANFIELD / "corpus.jsonl", encoding="utf-8")][:48]
    texts = [r["text"] + " (bulk probe)" for r in rows]  # not in the session embedder's memory yet
    errors: list[BaseException] = []
    stop = threading.Event()

    def ask() -> None:
        i = 0
        try:
            while not stop.is_set():
                v = embedder.embed_query(f"what is the pressure distribution on wing number {i}?")
                assert abs(float(np.linalg.norm(v)) - 1.0) < 1e-3
                i += 1
        except BaseException as err:  # surfaced below
            errors.append(err)

    t = threading.Thread(target=ask)
    t.start()
    try:
        with embedder.bulk(2):
            got = embedder.embed(texts)
    finally:
        stop.set()
        t.join()
    assert not errors, errors
    assert got.shape == (len(texts), embedder.dim)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-3)

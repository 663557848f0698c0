import numpy as np
import pytest

from ragbudget.config import EmbeddingConfig
from ragbudget.embed import EmbeddingCache, SentenceTransformerEmbedder, bundled_model_path, text_key
from ragbudget.errors import ModelNotFoundError


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


def test_cache_hits_skip_the_model(tmp_path, embedder):
    cache = EmbeddingCache(tmp_path / "emb.sqlite")
    emb = SentenceTransformerEmbedder(EmbeddingConfig(cache=True), cache=cache)
    emb._model, emb._dim = embedder._model, embedder._dim  # share the loaded weights
    a = emb.embed(["alpha text", "beta text"])
    assert cache.misses == 2 and cache.hits == 0
    b = emb.embed(["beta text", "alpha text", "gamma text"])
    assert cache.hits == 2 and cache.misses == 3
    assert np.allclose(a[0], b[1]) and np.allclose(a[1], b[0])
    cache.close()
    # persisted across processes/opens
    cache2 = EmbeddingCache(tmp_path / "emb.sqlite")
    assert len(cache2.get_many(emb.model_id, [text_key("gamma text")])) == 1


def test_corrupt_cache_file_is_recreated(tmp_path):
    p = tmp_path / "emb.sqlite"
    p.write_bytes(b"this is not a database" * 100)
    cache = EmbeddingCache(p)
    cache.put_many("m", {"k": np.ones(3, np.float32)})
    assert "k" in cache.get_many("m", ["k"])
    assert (tmp_path / "emb.corrupt").exists()

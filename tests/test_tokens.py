import json
import os
import socket
from pathlib import Path

import pytest

from ragbudget.errors import ConfigError
from ragbudget.kernels.tokens import BUNDLED_TIKTOKEN_CACHE, Tokenizer

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "eval"


def test_bundled_encodings_ship_with_llama_index():
    assert BUNDLED_TIKTOKEN_CACHE.is_dir()
    assert len(list(BUNDLED_TIKTOKEN_CACHE.iterdir())) >= 2


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_count_encode_decode_roundtrip(name):
    tok = Tokenizer(name)
    text = "Budgets keep prompts small. Ünïcödé — and emoji 🚀 too."
    ids = tok.encode(text)
    assert tok.count(text) == len(ids) > 5
    assert tok.decode(ids) == text
    assert tok.count("") == 0


def test_truncate_prefix_and_suffix():
    tok = Tokenizer()
    text = " ".join(f"word{i}" for i in range(100))
    head = tok.truncate(text, 10)
    tail = tok.truncate(text, 10, from_end=True)
    assert tok.count(head) <= 10 and text.startswith(head)
    assert tok.count(tail) <= 10 and text.endswith(tail)
    assert tok.truncate(text, 0) == ""
    assert tok.truncate("short", 10) == "short"


def test_truncate_never_leaves_broken_characters():
    tok = Tokenizer()
    text = "🚀" * 20
    for n in range(1, 12):
        assert "\ufffd" not in tok.truncate(text, n)


def test_special_token_text_is_counted_not_rejected():
    assert Tokenizer().count("<|endoftext|> is just text here") > 3


def test_no_network_needed(monkeypatch):
    """Loading an encoding must not open a socket (files come from llama-index-core)."""
    def refuse(*a, **k):
        raise AssertionError("network access attempted")
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    from ragbudget.kernels import tokens
    tokens.get_encoding.cache_clear()
    assert Tokenizer("o200k_base").count("hello") >= 1
    assert os.environ["TIKTOKEN_CACHE_DIR"]


def test_count_memo_matches_direct_counts_and_stays_bounded(shared_data):
    corpus = [json.loads(x)["text"] for x in
              (DATA / "squad2" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:60]]
    sentences = [s for doc in corpus for s in doc.split(". ") if s]
    memo, direct = Tokenizer(count_cache_entries=64), Tokenizer(count_cache_entries=0)
    assert direct.cache_info() is None
    expected = direct.count_many(sentences)
    assert memo.count_many(sentences) == expected
    assert memo.count_many(sentences[:10]) == expected[:10]  # second look-ups come from the memo
    hits, misses, maxsize, size = memo.cache_info()
    assert maxsize == 64 and size == 64 and misses > 64  # bounded: older texts were evicted
    assert memo.count_many(sentences) == expected  # and evicted counts are recomputed correctly
    long_text = " ".join(corpus)  # over COUNT_CACHE_MAX_CHARS: counted, never stored
    before = memo.cache_info()
    assert memo.count(long_text) == direct.count(long_text)
    assert memo.cache_info()[:2] == before[:2]
    with pytest.raises(ConfigError):
        Tokenizer(count_cache_entries=-1)

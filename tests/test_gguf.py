"""The random-weight GGUF writer: valid llama GGUF, byte vocab, the ASCII-only remedy holds on a real engine."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from fixtures_llm import TINY
from ragbudget.cli import main as cli_main
from ragbudget.errors import ConfigError
from ragbudget.llm.gguf_writer import BAN_WEIGHT, GGUFSpec, allowed_token_mask, vocabulary, write_random_gguf


def test_file_structure(tiny_gguf: Path) -> None:
    r = gguf.GGUFReader(tiny_gguf)
    names = {t.name for t in r.tensors}
    assert {"token_embd.weight", "output.weight", "output_norm.weight"} <= names
    assert {f"blk.{i}.{n}.weight" for i in range(TINY.layers) for n in
            ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")} <= names
    arch = r.fields["general.architecture"]
    assert bytes(arch.parts[arch.data[0]]).decode() == "llama"
    tokens, _, types = vocabulary()
    assert tokens[:3] == ["<unk>", "<s>", "</s>"]
    assert tokens[3 + 0x41] == "<0x41>" and types[3 + 0x41] == 6
    assert sum(1 for t in types if t == 6) == 256


def test_remedy_weights(tiny_gguf: Path) -> None:
    r = gguf.GGUFReader(tiny_gguf)
    t = {x.name: np.asarray(x.data) for x in r.tensors}
    const = TINY.dim - 1
    assert np.all(t["token_embd.weight"][:, const] == 1.0)
    for i in range(TINY.layers):
        assert np.all(t[f"blk.{i}.attn_output.weight"][const, :] == 0.0)
        assert np.all(t[f"blk.{i}.ffn_down.weight"][const, :] == 0.0)
    tokens, _, _ = vocabulary()
    mask = allowed_token_mask(tokens)
    col = t["output.weight"][:, const]
    assert np.all(col[~mask] == BAN_WEIGHT) and np.all(col[mask] == 0.0)
    assert mask[3 + ord("a")] and mask[3 + 0x0A] and not mask[3 + 0x80] and not mask[2]


def test_bad_spec_is_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="multiple of heads"):
        write_random_gguf(tmp_path / "x.gguf", GGUFSpec(dim=30, heads=4))


def test_cli_make_gguf(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.gguf"
    assert cli_main(["make-gguf", str(out), "--layers", "1", "--dim", "32", "--heads", "2", "--ff", "64",
                     "--context-length", "512"]) == 0
    r = gguf.GGUFReader(out)
    assert len([t for t in r.tensors if t.name.startswith("blk.")]) == 9
    assert "gibberish" in capsys.readouterr().out


def test_engine_emits_only_ascii_exactly_max_tokens(tiny_gguf: Path) -> None:
    llama_cpp = pytest.importorskip("llama_cpp")
    llm = llama_cpp.Llama(str(tiny_gguf), n_ctx=2048, n_threads=2, verbose=False, seed=3)
    for i, prompt in enumerate(["The capital of France is", "Ünïcödé ☃ → still ASCII out"]):
        out = llm.create_completion(prompt, max_tokens=16, temperature=1.0, seed=i)
        text = out["choices"][0]["text"]
        assert out["usage"]["completion_tokens"] == 16
        assert all(c == "\n" or 0x20 <= ord(c) <= 0x7E for c in text), repr(text)

"""Write a small random-weight llama GGUF so a real engine runs offline in tests and benchmarks.

The text such a model writes is gibberish; its timings (prefill, decode, prefix-cache reuse) are real.

Vocabulary: tokenizer model ``llama`` with ``<unk>``, ``<s>``, ``</s>``, the 256 byte tokens
``<0x00>``…``<0xFF>`` (token type 6) and word pieces: ``▁`` + a lowercase letter, every lowercase
bigram, and ``▁`` + every lowercase bigram (about 1,400 pieces). SentencePiece merges pairs only into
tokens that exist, so these pieces make English text about two characters a token instead of one, which
keeps a prompt's variable tail (question, retrieved snippet) realistically short next to its static
prefix. Everything else falls back to byte tokens.

Remedy for random weights (see DESIGN.md, "Generation backends"): naive random weights emit byte tokens
≥ 0x80 that never form valid UTF-8, and llama-cpp-python then generates past ``max_tokens`` until the
context is full. We keep one residual dimension constant (that column of ``token_embd`` = 1.0, the same row
of every ``attn_output`` and ``ffn_down`` = 0, so no layer writes to it) and give every token except
printable ASCII and newline a weight of -50 in that column of ``output.weight``: only printable ASCII and
newline can be sampled, and generation stops at exactly ``max_tokens``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from ..errors import ConfigError

WORD_PIECES = ("\u2581the", "\u2581a", "\u2581of", "\u2581and", "\u2581to", "\u2581in", "\u2581is",
               "ing", "ed", "er", "\u2581", "s")
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")
BAN_WEIGHT = -50.0


@dataclass(frozen=True)
class GGUFSpec:
    """Size options of the random model. ``dim`` must be divisible by ``heads``."""

    layers: int = 2
    dim: int = 64
    heads: int = 4
    kv_heads: int | None = None
    ff: int = 128
    context_length: int = 2048
    seed: int = 0

    def validate(self) -> None:
        if min(self.layers, self.dim, self.heads, self.ff, self.context_length) < 1:
            raise ConfigError(f"make-gguf: sizes must be positive, got {self}")
        kv = self.kv_heads or self.heads
        if self.dim % self.heads or (self.dim // self.heads) % 2 or self.heads % kv:
            raise ConfigError(
                f"make-gguf: dim={self.dim} must be a multiple of heads={self.heads} with an even head size,"
                f" and heads a multiple of kv_heads={kv}", fix="e.g. --dim 128 --heads 4")


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and token types of the byte-level vocabulary."""
    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    pieces = word_pieces()
    tokens += pieces
    types += [gguf.TokenType.NORMAL] * len(pieces)
    # SentencePiece merges the highest-scoring pair first: prefer longer pieces.
    scores = [0.0] * 259 + [float(len(p)) for p in pieces]
    return tokens, scores, [int(t) for t in types]


def word_pieces() -> list[str]:
    """``WORD_PIECES`` plus ``▁x``, every ``xy`` and every ``▁xy`` over lowercase letters, no duplicates."""
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    bigrams = [a + b for a in letters for b in letters]
    out = list(WORD_PIECES) + ["\u2581" + c for c in letters] + bigrams + ["\u2581" + bg for bg in bigrams]
    return list(dict.fromkeys(out))


def allowed_token_mask(tokens: list[str]) -> np.ndarray:
    """True for tokens that decode to printable ASCII or newline (the only ones the model may emit)."""
    mask = np.zeros(len(tokens), dtype=bool)
    for i, tok in enumerate(tokens):
        if tok.startswith("<0x") and len(tok) == 6:
            b = int(tok[3:5], 16)
            mask[i] = 0x20 <= b <= 0x7E or b == 0x0A
        elif not tok.startswith("<"):
            mask[i] = all(0x20 <= ord(c) <= 0x7E for c in tok.replace("\u2581", " "))
    return mask


def write_random_gguf(path: str | os.PathLike[str], spec: GGUFSpec = GGUFSpec()) -> Path:
    """Write a random-weight llama GGUF at ``path`` (parent folders are created) and return the path."""
    spec.validate()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(spec.seed)
    tokens, scores, types = vocabulary()
    n_vocab, d, ff = len(tokens), spec.dim, spec.ff
    kv_heads = spec.kv_heads or spec.heads
    d_kv = d // spec.heads * kv_heads
    const = d - 1  # the constant residual dimension

    def rand(*shape: int, std: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    w = gguf.GGUFWriter(str(out), "llama")
    w.add_name(f"ragbudget-random-{spec.layers}x{d}")
    w.add_description("random weights, gibberish text, real timings (ragbudget make-gguf)")
    w.add_context_length(spec.context_length)
    w.add_embedding_length(d)
    w.add_block_count(spec.layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(spec.heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(d // spec.heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)

    emb = rand(n_vocab, d, std=1.0)
    emb[:, const] = 1.0
    w.add_tensor("token_embd.weight", emb)
    for i in range(spec.layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(d, dtype=np.float32))
        w.add_tensor(f"blk.{i}.attn_q.weight", rand(d, d, std=d ** -0.5))
        w.add_tensor(f"blk.{i}.attn_k.weight", rand(d_kv, d, std=d ** -0.5))
        w.add_tensor(f"blk.{i}.attn_v.weight", rand(d_kv, d, std=d ** -0.5))
        attn_out = rand(d, d, std=d ** -0.5)
        attn_out[const, :] = 0.0
        w.add_tensor(f"blk.{i}.attn_output.weight", attn_out)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(d, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", rand(ff, d, std=d ** -0.5))
        w.add_tensor(f"blk.{i}.ffn_up.weight", rand(ff, d, std=d ** -0.5))
        down = rand(d, ff, std=ff ** -0.5)
        down[const, :] = 0.0
        w.add_tensor(f"blk.{i}.ffn_down.weight", down)
    w.add_tensor("output_norm.weight", np.ones(d, dtype=np.float32))
    head = rand(n_vocab, d, std=2 * d ** -0.5)
    head[:, const] = np.where(allowed_token_mask(tokens), 0.0, BAN_WEIGHT)
    w.add_tensor("output.weight", head)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out

"""Prompt tokens as the engine counts them: each tier is budgeted and window-checked in its own tokens.

The context builder packs in one tokenizer (``tokenizer.encoding``, tiktoken); engines count in theirs —
a llama.cpp model with a small vocabulary may need twice as many tokens for the same text, and a chat
template adds its own. A tier's :class:`PromptCounter` gives the exact count the engine will see:

- ``llamacpp``: the model's own tokenizer over the prompt rendered with the model's chat template
  (:meth:`LlamaCppGenerator.count_prompt`);
- ``openai``: ``gguf:/path/model.gguf`` for a server that serves that GGUF (exact, vocabulary-only load),
  tiktoken for OpenAI model names (``o200k_base`` for gpt-4o/4.1/o-series, ``cl100k_base`` for
  gpt-4/3.5; message framing as OpenAI documents it), a ``tokenizer.json`` file (``tier.tokenizer``), or the
  server's ``/tokenize`` endpoint (``tier.tokenizer: server``; llama.cpp server and vLLM have one);
- anything else: the builder's count scaled by the engine/builder ratio learned from the engine's reported
  usage (:class:`RatioCalibration`), marked as estimated.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable, Protocol

import httpx
import tiktoken
from tokenizers import Tokenizer as HFTokenizer  # installed with sentence-transformers

from ..errors import ConfigError
from ..kernels.tokens import ensure_offline_cache
from ..types import Prompt
from .llamacpp_backend import chat_formatter, count_llama_prompt, llama_cpp

# OpenAI chat framing: every message costs 3 tokens beyond its content and role; the reply is primed with 3.
PER_MESSAGE, REPLY_PRIMING = 3, 3


class PromptCounter(Protocol):
    """Exact engine tokens of a prompt, or None when this counter cannot tell."""

    name: str

    def count_prompt(self, prompt: Prompt) -> int | None: ...


class TiktokenCounter:
    """OpenAI models: tiktoken's encoding for the model name plus the chat framing."""

    def __init__(self, encoding: str) -> None:
        ensure_offline_cache()
        self.name = f"tiktoken:{encoding}"
        self._enc = tiktoken.get_encoding(encoding)

    @classmethod
    def for_model(cls, model: str) -> "TiktokenCounter | None":
        try:
            enc = tiktoken.encoding_name_for_model(model)
        except KeyError:
            return None
        return cls(enc) if enc in ("cl100k_base", "o200k_base") else None

    def count_prompt(self, prompt: Prompt) -> int | None:
        n = REPLY_PRIMING
        for m in prompt.messages:
            n += PER_MESSAGE + len(self._enc.encode(m.role, disallowed_special=())) + \
                len(self._enc.encode(m.content, disallowed_special=()))
        return n


class TokenizerFileCounter:
    """A Hugging Face ``tokenizer.json`` (the ``tokenizers`` package), content of every message summed."""

    def __init__(self, path: str) -> None:
        p = Path(path).expanduser()
        if not p.is_file():
            raise ConfigError(f"tier tokenizer file not found: {p}",
                              fix="point tokenizer at the model's tokenizer.json, or use 'server' or 'auto'")
        self._tok = HFTokenizer.from_file(str(p))
        self.name = f"file:{p.name}"

    def count_prompt(self, prompt: Prompt) -> int | None:
        return sum(len(self._tok.encode(m.content, add_special_tokens=False).ids) + PER_MESSAGE
                   for m in prompt.messages) + REPLY_PRIMING


class GGUFCounter:
    """The tokenizer and chat template of a GGUF file (loaded vocabulary-only: no weights): exact for an
    OpenAI-compatible server that serves that GGUF (llama.cpp server, llama-cpp-python, Ollama)."""

    def __init__(self, path: str) -> None:
        p = Path(path).expanduser()
        if llama_cpp is None:
            raise ConfigError("tokenizer: gguf:… needs llama-cpp-python", fix="pip install 'ragbudget[llamacpp]'")
        if not p.is_file():
            raise ConfigError(f"tier tokenizer GGUF not found: {p}", fix="point tokenizer at gguf:/path/model.gguf")
        self._llm = llama_cpp.Llama(str(p), vocab_only=True, verbose=False)
        self._fmt = chat_formatter(self._llm)
        self.name = f"gguf:{p.name}"

    def count_prompt(self, prompt: Prompt) -> int | None:
        return count_llama_prompt(self._llm, prompt, chat=True, formatter=self._fmt)


class ServerCounter:
    """POST the rendered prompt to the server's ``/tokenize`` (llama.cpp server, vLLM). One short request
    per count; None (and the estimate) when the server has no such endpoint."""

    def __init__(self, base_url: str, model: str, timeout_s: float = 2.0) -> None:
        root = base_url.rstrip("/")
        self.url = (root[:-3] if root.endswith("/v1") else root) + "/tokenize"
        self.model = model
        self.name = "server"
        self._client = httpx.Client(timeout=timeout_s)
        self._broken = False

    def count_prompt(self, prompt: Prompt) -> int | None:
        if self._broken:
            return None
        try:
            r = self._client.post(self.url, json={"model": self.model, "messages": prompt.openai_messages(),
                                                  "content": prompt.text, "add_special": True})
            r.raise_for_status()
            body = r.json()
        except (httpx.HTTPError, ValueError):
            self._broken = True  # no endpoint: fall back to the calibrated estimate from now on
            return None
        if isinstance(body.get("count"), int):
            return int(body["count"])
        toks = body.get("tokens")
        return len(toks) if isinstance(toks, list) else None


class RatioCalibration:
    """Engine tokens ÷ builder tokens, learned from the prompt tokens engines report (EMA per tier)."""

    def __init__(self, alpha: float = 0.2) -> None:
        self.alpha = alpha
        self._ratio: dict[str, float] = {}
        self._lock = threading.Lock()

    def observe(self, tier: str, counted: int, reported: int) -> None:
        if counted <= 0 or reported <= 0:
            return
        r = reported / counted
        with self._lock:
            old = self._ratio.get(tier)
            self._ratio[tier] = r if old is None else (1 - self.alpha) * old + self.alpha * r

    def estimate(self, tier: str, counted: int) -> int:
        with self._lock:
            return int(round(counted * self._ratio.get(tier, 1.0)))


def make_counter(spec: str | None, *, backend: str, model: str, base_url: str | None,
                 engine: Callable[[Prompt], int | None] | None = None) -> PromptCounter | None:
    """The counter a tier's ``tokenizer`` setting names (``auto``/None: the engine's own when it has one,
    tiktoken for OpenAI model names); None means "estimate from the builder's count"."""
    spec = spec or "auto"
    if spec.startswith("tiktoken:"):
        return TiktokenCounter(spec.split(":", 1)[1])
    if spec.startswith("gguf:"):
        return GGUFCounter(spec.split(":", 1)[1])
    if spec == "server":
        if not base_url:
            raise ConfigError("tokenizer: server needs the tier's base_url", fix="set base_url or tokenizer: auto")
        return ServerCounter(base_url, model)
    if spec not in ("auto", "estimate"):
        return TokenizerFileCounter(spec)
    if spec == "estimate":
        return None
    if engine is not None:
        return _EngineCounter(engine)
    if backend == "openai":
        return TiktokenCounter.for_model(model)
    return None


class _EngineCounter:
    name = "engine"

    def __init__(self, fn: Callable[[Prompt], int | None]) -> None:
        self._fn = fn

    def count_prompt(self, prompt: Prompt) -> int | None:
        return self._fn(prompt)


__all__ = ["PromptCounter", "RatioCalibration", "ServerCounter", "TiktokenCounter", "TokenizerFileCounter",
           "make_counter"]

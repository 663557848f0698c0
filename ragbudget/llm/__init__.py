"""Generation backends behind one protocol, chosen by a string (``extractive``, ``openai``, ``llamacpp``).

Public names: :class:`Generator` (protocol), :class:`GenerationStream`, :class:`TokenClock`,
:func:`make_generator` (a tier config → backend), :func:`make_prompt`.
"""

from __future__ import annotations

from ..config import TierConfig
from ..errors import ConfigError
from ..kernels.tokens import Tokenizer
from .base import (AsyncGenerationStream, BaseGenerator, GenerationStream, Generator, StreamState,
                   TokenClock, make_prompt)
from .extractive import ExtractiveGenerator
from .llamacpp_backend import LlamaCppGenerator
from .openai_backend import OpenAIGenerator

__all__ = ["AsyncGenerationStream", "BaseGenerator", "ExtractiveGenerator", "GenerationStream", "Generator",
           "LlamaCppGenerator", "OpenAIGenerator", "StreamState", "TokenClock", "make_generator",
           "make_prompt"]


def make_generator(tier: TierConfig, *, tokenizer: Tokenizer | None = None) -> Generator:
    """The backend a tier names. Heavy loading (llama.cpp) happens on first use, not here."""
    if tier.backend == "extractive":
        return ExtractiveGenerator(tokenizer=tokenizer)
    if tier.backend == "openai":
        return OpenAIGenerator.from_tier(tier)
    if tier.backend == "llamacpp":
        o = tier.llamacpp
        return LlamaCppGenerator(tier.model, n_ctx=tier.n_ctx or tier.context_window, n_threads=tier.n_threads,
                                 chat=o.chat, seed=o.seed, lock_timeout_s=o.lock_timeout_s, **o.engine_kwargs())
    raise ConfigError(f"llm.tiers[{tier.name!r}].backend={tier.backend!r} has no built-in generator",
                      fix="pass a Generator for this tier explicitly (Router(generators={...}))")

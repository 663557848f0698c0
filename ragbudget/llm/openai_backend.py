"""Any OpenAI-compatible server (OpenAI, vLLM, llama.cpp server, Ollama, LiteLLM) through the openai SDK.

Streams with ``stream_options={"include_usage": True}`` and reads
``usage.prompt_tokens_details.cached_tokens`` into :class:`~ragbudget.types.Usage`. Servers that send no
usage get an estimate (prompt tokens from the assembled prompt, completion = streamed chunks) flagged in
``extra["usage_estimated"]``. Every request has a connect/read timeout (the read timeout bounds the wait for
the first token) and SDK retries for connection errors. Errors map onto :mod:`ragbudget.errors`:
unreachable, auth or unknown model → :class:`BackendUnavailableError`; timeout →
:class:`GenerationTimeoutError`; a stream that closes mid-answer or sends a malformed chunk →
:class:`PartialGenerationError` carrying the text so far.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterator, Sequence

import httpx
import openai

from ..config import TierConfig
from ..errors import (BackendUnavailableError, GenerationError, GenerationTimeoutError,
                      PartialGenerationError)
from ..types import Prompt, Scored
from .base import BaseGenerator, StreamState

NO_KEY = "not-needed"


class OpenAIGenerator(BaseGenerator):
    """Chat completions against ``base_url`` with ``model``."""

    name = "openai"

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
                 timeout_s: float = 30.0, first_token_timeout_s: float = 20.0, retries: int = 1) -> None:
        super().__init__(model=model)
        self.base_url = base_url
        self.timeout = httpx.Timeout(timeout_s, connect=min(5.0, timeout_s), read=first_token_timeout_s)
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key or NO_KEY, timeout=self.timeout,
                                    max_retries=retries)

    @classmethod
    def from_tier(cls, tier: TierConfig) -> "OpenAIGenerator":
        key = None
        if tier.api_key_env:
            key = os.environ.get(tier.api_key_env)
            if not key:
                raise BackendUnavailableError(
                    f"tier {tier.name!r}: environment variable {tier.api_key_env} is not set",
                    fix=f"export {tier.api_key_env}=<key> or remove api_key_env for a keyless local server")
        return cls(tier.model, base_url=tier.base_url, api_key=key, timeout_s=tier.timeout_s,
                   first_token_timeout_s=tier.first_token_timeout_s, retries=tier.retries)

    def _where(self) -> str:
        return f"model {self.model!r} at {self.base_url or 'api.openai.com'}"

    def check(self) -> list[str]:
        """The server's model ids; :class:`BackendUnavailableError` when ours is not among them."""
        try:
            ids = [m.id for m in self.client.models.list()]
        except openai.APIError as err:
            raise self._map(err, emitted="") from err
        if self.model not in ids:
            raise BackendUnavailableError(f"{self._where()}: unknown model; the server offers {ids}",
                                          fix="set the tier's model to one of those ids")
        return ids

    def _map(self, err: Exception, *, emitted: str) -> GenerationError:
        where = self._where()
        if emitted:
            return PartialGenerationError(f"{where}: stream broke mid-answer ({type(err).__name__}: {err})",
                                          partial_text=emitted, fix="retry, or fall back to another tier")
        if isinstance(err, openai.APITimeoutError):
            return GenerationTimeoutError(f"{where}: no response within {self.timeout.read}s",
                                          fix="raise first_token_timeout_s or use a faster tier")
        if isinstance(err, openai.APIConnectionError):
            return BackendUnavailableError(f"{where}: server unreachable ({err})",
                                           fix="start the server or correct the tier's base_url")
        if isinstance(err, openai.NotFoundError):
            return BackendUnavailableError(f"{where}: not found (HTTP 404) — wrong model name or base_url",
                                           fix="check the tier's model against GET /v1/models")
        if isinstance(err, (openai.AuthenticationError, openai.PermissionDeniedError)):
            return BackendUnavailableError(f"{where}: authentication failed ({err.status_code})",
                                           fix="set the API key in the env var named by api_key_env")
        if isinstance(err, openai.BadRequestError):
            return GenerationError(f"{where}: request rejected (HTTP 400): {err.message}",
                                   fix="lower max_tokens or the prompt size to the model's limits")
        if isinstance(err, openai.APIStatusError):
            return BackendUnavailableError(f"{where}: server error HTTP {err.status_code}: {err.message}",
                                           fix="retry later or fall back to another tier")
        return GenerationError(f"{where}: {type(err).__name__}: {err}")

    def _pieces(self, prompt: Prompt, state: StreamState, *, max_tokens: int, temperature: float,
                stop: Sequence[str] | None, context: Sequence[Scored] | None, top_p: float | None = None,
                seed: int | None = None) -> Iterator[str]:
        text: list[str] = []
        optional = {k: v for k, v in (("top_p", top_p), ("seed", seed)) if v is not None}
        usage: Any = None
        finish: str | None = None
        try:
            stream = self.client.chat.completions.create(  # type: ignore[call-overload]  # messages are plain dicts
                model=self.model, messages=prompt.openai_messages(),  # type: ignore[arg-type]
                max_tokens=max_tokens, temperature=temperature, stop=list(stop) if stop else None,
                stream=True, stream_options={"include_usage": True}, **optional)
            with stream:
                for chunk in stream:
                    if getattr(chunk, "usage", None) is not None:
                        usage = chunk.usage
                    if chunk.model:
                        state.model = chunk.model
                    for choice in chunk.choices or []:
                        if choice.finish_reason:
                            finish = choice.finish_reason
                        piece = choice.delta.content if choice.delta else None
                        if piece:
                            text.append(piece)
                            yield piece
        except (openai.APIError, httpx.HTTPError) as err:
            raise self._map(err, emitted="".join(text)) from err
        except (json.JSONDecodeError, ValueError, KeyError, TypeError) as err:
            raise PartialGenerationError(f"{self._where()}: malformed stream chunk ({err})",
                                         partial_text="".join(text),
                                         fix="the server sent invalid SSE; check its version") from err
        if finish is None:
            raise PartialGenerationError(f"{self._where()}: stream closed before a finish_reason",
                                         partial_text="".join(text), fix="retry, or fall back to another tier")
        state.finish_reason = finish
        if usage is not None:
            state.prompt_tokens = usage.prompt_tokens or 0
            state.completion_tokens = usage.completion_tokens
            details = getattr(usage, "prompt_tokens_details", None)
            state.cached_tokens = (getattr(details, "cached_tokens", 0) or 0) if details else 0
        else:
            state.prompt_tokens = prompt.total_tokens
            state.extra["usage_estimated"] = True

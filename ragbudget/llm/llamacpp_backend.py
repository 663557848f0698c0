"""In-process GGUF generation through llama-cpp-python (optional extra ``ragbudget[llamacpp]``).

One :class:`llama_cpp.Llama` object per backend keeps the tokens it evaluated last; a request whose prompt
starts with the same tokens (the static prefix of a cache-friendly prompt) only evaluates the rest.
``Usage.cached_tokens`` reports that reused prefix. A decode failure ("llama_decode returned 1") before
the first token resets the context and is retried once; otherwise it is a :class:`GenerationError` —
the backend stays usable.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Iterator, Sequence

from ..errors import (BackendUnavailableError, GenerationError, ModelNotFoundError,
                      PartialGenerationError)
from ..types import Prompt, Scored
from .base import BaseGenerator, StreamState

try:  # optional extra
    import llama_cpp
    from llama_cpp import llama_chat_format
except ImportError:  # pragma: no cover - exercised only without the extra
    llama_cpp = None  # type: ignore[assignment]
    llama_chat_format = None  # type: ignore[assignment]

INSTALL_HINT = "pip install 'ragbudget[llamacpp]'"


def chat_formatter(llm: Any) -> Any:
    """The Jinja chat formatter llama-cpp-python builds from the model's ``tokenizer.chat_template``
    (False when the model has none, or uses a named built-in format or a custom handler)."""
    template = llm.metadata.get("tokenizer.chat_template")
    if llm.chat_handler is not None or not template or llm.chat_format != "chat_template.default":
        return False
    eos, bos = llm.token_eos(), llm.token_bos()
    return llama_chat_format.Jinja2ChatFormatter(
        template=template, eos_token=llm._model.token_get_text(eos) if eos != -1 else "",
        bos_token=llm._model.token_get_text(bos) if bos != -1 else "", stop_token_ids=[eos])


def count_llama_prompt(llm: Any, prompt: Prompt, *, chat: bool, formatter: Any) -> int | None:
    """Tokens llama.cpp evaluates for ``prompt``: the model's tokenizer over the prompt rendered by its
    chat template, tokenized the way ``create_chat_completion`` does (or the raw text for completions).
    None when the model's chat format cannot be rendered here (``formatter`` False)."""
    if not chat:
        return len(llm.tokenize(prompt.text.encode("utf-8"), add_bos=True, special=True))
    if formatter is False:
        return None
    res = formatter(messages=prompt.openai_messages())
    return len(llm.tokenize(res.prompt.encode("utf-8"), add_bos=not res.added_special, special=True))


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class LlamaCppGenerator(BaseGenerator):
    """A local GGUF model. ``chat=True`` applies the model's chat template to ``prompt.messages``;
    ``chat=False`` sends ``prompt.text`` as a raw completion prompt."""

    name = "llamacpp"

    def __init__(self, model_path: str, *, n_ctx: int = 2048, n_threads: int | None = None,
                 chat: bool = True, seed: int = 0, lock_timeout_s: float = 60.0, **llama_kwargs: Any) -> None:
        super().__init__(model=Path(model_path).name)
        self.model_path = Path(model_path)
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.chat = chat
        self.seed = seed
        self.lock_timeout_s = lock_timeout_s
        self._llama_kwargs = llama_kwargs
        self._llm: Any = None
        self._lock = threading.Lock()
        self._formatter: Any = None  # the model's chat template, built on the first count

    def load(self) -> Any:
        """Load the model (done on first use; call it to warm up)."""
        if self._llm is not None:
            return self._llm
        if llama_cpp is None:
            raise BackendUnavailableError("the llamacpp backend needs llama-cpp-python, which is not installed",
                                          fix=INSTALL_HINT)
        if not self.model_path.is_file():
            raise ModelNotFoundError(f"GGUF model not found: {self.model_path}",
                                     fix="point the tier's model at an existing .gguf file "
                                         "(ragbudget make-gguf OUT.gguf writes a small random one)")
        try:
            self._llm = llama_cpp.Llama(str(self.model_path), n_ctx=self.n_ctx, n_threads=self.n_threads,
                                        seed=self.seed, verbose=False, **self._llama_kwargs)
        except (ValueError, RuntimeError) as err:
            raise BackendUnavailableError(f"llama.cpp could not load {self.model_path}: {err}",
                                          fix="check that the file is a valid GGUF") from err
        return self._llm

    def count_prompt(self, prompt: Prompt) -> int | None:
        """Prompt tokens exactly as llama.cpp will evaluate them (see :func:`count_llama_prompt`)."""
        llm = self.load()
        if self._formatter is None:
            self._formatter = chat_formatter(llm)
        return count_llama_prompt(llm, prompt, chat=self.chat, formatter=self._formatter)

    def reset(self) -> None:
        """Forget the evaluated tokens (the next prompt is evaluated in full)."""
        if self._llm is not None:
            self._llm.reset()

    def _call(self, prompt: Prompt, max_tokens: int, temperature: float,
              stop: Sequence[str] | None, top_p: float | None = None, seed: int | None = None) -> Iterator[Any]:
        llm = self._llm
        kw = dict(max_tokens=max_tokens, temperature=temperature, stop=list(stop or []) or None,
                  stream=True, seed=self.seed if seed is None else seed)
        if top_p is not None:
            kw["top_p"] = top_p
        if self.chat:
            return iter(llm.create_chat_completion(messages=prompt.openai_messages(), **kw))
        return iter(llm.create_completion(prompt.text, **kw))

    def _pieces(self, prompt: Prompt, state: StreamState, *, max_tokens: int, temperature: float,
                stop: Sequence[str] | None, context: Sequence[Scored] | None, top_p: float | None = None,
                seed: int | None = None) -> Iterator[str]:
        llm = self.load()
        if not self._lock.acquire(timeout=self.lock_timeout_s):
            raise BackendUnavailableError(f"llamacpp model {self.model} busy for {self.lock_timeout_s}s",
                                          fix="add a tier or raise the timeout")
        try:
            emitted = 0
            for attempt in (1, 2):
                before = list(llm._input_ids)
                try:
                    chunks = self._call(prompt, max_tokens, temperature, stop, top_p, seed)
                    for chunk in chunks:
                        choice = chunk["choices"][0]
                        piece = (choice.get("delta") or {}).get("content") if self.chat else choice.get("text")
                        if choice.get("finish_reason"):
                            state.finish_reason = choice["finish_reason"]
                        if piece:
                            emitted += 1
                            yield piece
                    break
                except (RuntimeError, ValueError) as err:
                    msg = str(err)
                    if "exceed context window" in msg or "Requested tokens" in msg:
                        raise GenerationError(f"llamacpp: {msg}",
                                              fix="fit the prompt to the tier's n_ctx (lower budget) "
                                                  "or raise n_ctx") from err
                    llm.reset()
                    if emitted:
                        raise PartialGenerationError(f"llamacpp decode failed mid-answer: {msg}",
                                                     fix="the context was reset; retry the request") from err
                    if attempt == 2:
                        raise GenerationError(f"llamacpp decode failed twice: {msg}",
                                              fix="lower max_tokens or the prompt size, or raise n_ctx") from err
            after = list(llm._input_ids)
            completion = max(0, min(emitted, len(after)))
            # the last sampled token is never evaluated, so n_tokens = prompt + completion - 1
            n_prompt = max(0, len(after) - completion + (1 if completion else 0))
            state.completion_tokens = completion
            state.prompt_tokens = n_prompt
            # llama.cpp re-evaluates at least the last prompt token
            state.cached_tokens = min(_common_prefix(before, after[:n_prompt]), max(0, n_prompt - 1))
            state.model = self.model
        finally:
            self._lock.release()

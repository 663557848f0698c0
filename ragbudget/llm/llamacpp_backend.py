"""In-process GGUF generation through llama-cpp-python (optional extra ``ragbudget[llamacpp]``).

The backend renders the prompt with the model's own chat template, tokenizes it the way llama.cpp does,
and runs llama.cpp's token loop itself (``Llama.generate``), so every count in ``Usage`` is the engine's:
prompt tokens are the tokens evaluated for the prompt, completion tokens the tokens sampled (an end-of-
generation token is not part of the answer), cached tokens the prefix of the prompt whose KV entries were
kept from the previous request (the static prefix of a cache-friendly prompt). Text is decoded with an
incremental UTF-8 decoder, so a character split across tokens is emitted once, whole, and generation stops
at exactly ``max_tokens``.

A decode failure ("llama_decode returned 1") before the first token resets the context and is retried once;
otherwise it is a :class:`GenerationError` — the backend stays usable. :meth:`LlamaCppGenerator.close` stops a
generation in flight (llama.cpp's abort callback ends a decode between graph steps; the token loop checks too),
waits for it, then frees the model: a process that gives up on a slow answer (a tier timeout) and exits no longer
frees the model under a thread still decoding with it. Models without a usable chat template
(a named built-in format, a custom handler) go through ``create_chat_completion``; their usage is then
marked estimated.
"""

from __future__ import annotations

import codecs
import ctypes
import logging
import os
import threading
from pathlib import Path
from typing import Any, Iterator, Sequence

from ..errors import (BackendUnavailableError, GenerationError, ModelNotFoundError,
                      PartialGenerationError)
from ..types import Prompt, Scored
from .base import BaseGenerator, StreamState
from .llamacpp_guard import check_cpu_support

try:  # optional extra
    import llama_cpp
    from llama_cpp import llama_chat_format
except ImportError:  # pragma: no cover - exercised only without the extra
    llama_cpp = None  # type: ignore[assignment]
    llama_chat_format = None  # type: ignore[assignment]

INSTALL_HINT = "pip install 'ragbudget[llamacpp]'"
log = logging.getLogger("ragbudget")
# llama-cpp-python's create_chat_completion sampling defaults, kept so answers match its chat API
SAMPLING_DEFAULTS = {"top_k": 40, "top_p": 0.95, "min_p": 0.05, "repeat_penalty": 1.0}


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


def render_prompt(llm: Any, prompt: Prompt, *, chat: bool, formatter: Any) -> tuple[list[int], list[str]] | None:
    """(the prompt's tokens as llama.cpp evaluates them, the stop strings its chat template adds): the
    prompt rendered by the model's chat template and tokenized the way ``create_chat_completion`` does
    (or the raw text for completions). None when the chat format cannot be rendered here."""
    if not chat:
        return llm.tokenize(prompt.text.encode("utf-8"), add_bos=True, special=True), []
    if formatter is False:
        return None
    res = formatter(messages=prompt.openai_messages())
    stops = [res.stop] if isinstance(res.stop, str) else list(res.stop or [])
    tokens = llm.tokenize(res.prompt.encode("utf-8"), add_bos=not res.added_special, special=True)
    return tokens, stops


def count_llama_prompt(llm: Any, prompt: Prompt, *, chat: bool, formatter: Any) -> int | None:
    """Tokens llama.cpp evaluates for ``prompt`` (see :func:`render_prompt`); None when unknown."""
    rendered = render_prompt(llm, prompt, chat=chat, formatter=formatter)
    return None if rendered is None else len(rendered[0])


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def token_bytes(vocab: Any, token: int) -> bytes:
    """The exact bytes of one token (llama-cpp-python's ``token_to_piece`` returns its whole 32-byte buffer,
    NUL padding included)."""
    buf = ctypes.create_string_buffer(64)
    n = llama_cpp.llama_token_to_piece(vocab, token, buf, len(buf), 0, False)
    if n < 0:  # longer than the buffer: -n is the size it needs
        buf = ctypes.create_string_buffer(-n)
        n = llama_cpp.llama_token_to_piece(vocab, token, buf, len(buf), 0, False)
    return buf.raw[:max(n, 0)]


def _held_back(text: str, stops: Sequence[str]) -> int:
    """How many trailing characters of ``text`` could still grow into a stop string (not yet emitted)."""
    keep = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), keep, -1):
            if text.endswith(s[:k]):
                keep = k
                break
    return keep


class LlamaCppGenerator(BaseGenerator):
    """A local GGUF model. ``chat=True`` applies the model's chat template to ``prompt.messages``;
    ``chat=False`` sends ``prompt.text`` as a raw completion prompt. ``llama_kwargs`` go to
    :class:`llama_cpp.Llama` as they are (validated engine options come from the tier config)."""

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
        self._load_lock = threading.Lock()
        self._formatter: Any = None  # the model's chat template, built on load
        self._abort = threading.Event()  # set by close(): the decode in flight stops
        self._abort_cb: Any = None  # the ctypes callback llama.cpp polls (kept referenced while the model lives)

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
        with self._load_lock:
            if self._llm is None:
                check_cpu_support(self.model_path)
                cores = os.cpu_count() or 1
                if self.n_threads is not None and self.n_threads >= cores > 1:
                    # measured (benchmarks/llamacpp_threads.py): with every core decoding and one other busy
                    # process, llama.cpp's threads wait on each other at every barrier
                    log.warning("llamacpp tier %s: n_threads=%d uses all %d cores; decoding slows several-fold "
                                "whenever anything else runs (leave a core free, or n_threads: null)",
                                self.model, self.n_threads, cores)
                try:
                    llm = llama_cpp.Llama(str(self.model_path), n_ctx=self.n_ctx, n_threads=self.n_threads,
                                          seed=self.seed, verbose=False, **self._llama_kwargs)
                except (ValueError, RuntimeError) as err:
                    raise BackendUnavailableError(f"llama.cpp could not load {self.model_path}: {err}",
                                                  fix="check that the file is a valid GGUF and the tier's "
                                                      "llamacpp options suit it") from err
                self._formatter = chat_formatter(llm)
                self._abort.clear()
                self._abort_cb = llama_cpp.ggml_abort_callback(lambda _data: self._abort.is_set())
                llama_cpp.llama_set_abort_callback(llm._ctx.ctx, self._abort_cb, None)
                self._llm = llm
        return self._llm

    def count_prompt(self, prompt: Prompt) -> int | None:
        """Prompt tokens exactly as llama.cpp will evaluate them (see :func:`render_prompt`)."""
        llm = self.load()
        return count_llama_prompt(llm, prompt, chat=self.chat, formatter=self._formatter)

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop the generation in flight (if any), wait up to ``timeout_s`` for it to let go of the model, and free
        the model. A later request loads it again."""
        if self._llm is None:
            return
        self._abort.set()
        got = self._lock.acquire(timeout=timeout_s)
        try:
            if not got:
                log.warning("llamacpp tier %s: a generation did not stop within %.0fs; the model is left loaded",
                            self.model, timeout_s)
                return
            llm, self._llm = self._llm, None
            if llm is not None:
                llm.close()
        finally:
            if got:
                self._lock.release()

    def reset(self) -> None:
        """Forget the evaluated tokens (the next prompt is evaluated in full)."""
        if self._llm is not None:
            self._llm.reset()

    def _pieces(self, prompt: Prompt, state: StreamState, *, max_tokens: int, temperature: float,
                stop: Sequence[str] | None, context: Sequence[Scored] | None, top_p: float | None = None,
                seed: int | None = None) -> Iterator[str]:
        llm = self.load()
        if not self._lock.acquire(timeout=self.lock_timeout_s):
            raise BackendUnavailableError(f"llamacpp model {self.model} busy for {self.lock_timeout_s}s",
                                          fix="add a tier or raise the timeout")
        try:
            rendered = render_prompt(llm, prompt, chat=self.chat, formatter=self._formatter)
            if rendered is None:
                yield from self._chat_completion(llm, prompt, state, max_tokens=max_tokens,
                                                 temperature=temperature, stop=stop, top_p=top_p, seed=seed)
                return
            tokens, template_stops = rendered
            n_ctx = llm.n_ctx()
            if len(tokens) >= n_ctx:
                raise GenerationError(f"llamacpp: prompt of {len(tokens)} tokens does not fit n_ctx {n_ctx}",
                                      fix="fit the prompt to the tier's n_ctx (lower budget) or raise n_ctx")
            stops = [s for s in [*(stop or []), *template_stops] if s]
            sampling = dict(SAMPLING_DEFAULTS, temp=temperature)
            if top_p is not None:
                sampling["top_p"] = top_p
            for attempt in (1, 2):
                emitted: list[str] = []
                try:
                    yield from self._run(llm, tokens, state, max_tokens, stops, sampling,
                                         self.seed if seed is None else seed, emitted)
                    return
                except (RuntimeError, ValueError) as err:
                    msg = str(err)
                    llm.reset()
                    if self._abort.is_set():
                        raise GenerationError("llamacpp: the generator was closed mid-request",
                                              fix="the application is shutting down; retry on a running one") from err
                    if emitted:
                        raise PartialGenerationError(f"llamacpp decode failed mid-answer: {msg}",
                                                     fix="the context was reset; retry the request") from err
                    if attempt == 2:
                        raise GenerationError(f"llamacpp decode failed twice: {msg}",
                                              fix="lower max_tokens or the prompt size, or raise n_ctx") from err
        finally:
            self._lock.release()

    def _run(self, llm: Any, tokens: list[int], state: StreamState, max_tokens: int, stops: list[str],
             sampling: dict[str, Any], seed: int, emitted: list[str]) -> Iterator[str]:
        """llama.cpp's token loop for one request; fills ``state`` with the engine's own counts."""
        before = list(llm._input_ids)
        n_prompt = len(tokens)
        # llama.cpp keeps the KV entries of the longest common prefix and re-evaluates at least one token
        state.prompt_tokens = n_prompt
        state.cached_tokens = min(_common_prefix(before, tokens), n_prompt - 1)
        state.completion_tokens = 0
        state.model = self.model
        state.finish_reason = "length"
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pending = ""
        n_ctx = llm.n_ctx()
        vocab = llm._model.vocab
        llm.set_seed(seed)
        gen = llm.generate(tokens, reset=True, **sampling)
        try:
            for token in gen:
                if self._abort.is_set():
                    raise GenerationError("llamacpp: the generator was closed mid-answer",
                                          fix="the application is shutting down; retry on a running one")
                if llama_cpp.llama_vocab_is_eog(vocab, token):
                    state.finish_reason = "stop"
                    break
                state.completion_tokens += 1
                pending += decoder.decode(token_bytes(vocab, token))
                hits = [pending.find(s) for s in stops if s in pending]
                if hits:
                    pending = pending[:min(hits)]
                    state.finish_reason = "stop"
                    break
                if state.completion_tokens >= max_tokens or n_prompt + state.completion_tokens >= n_ctx:
                    break
                ready = len(pending) - _held_back(pending, stops)
                if ready > 0:
                    piece, pending = pending[:ready], pending[ready:]
                    emitted.append(piece)
                    yield piece
        finally:
            gen.close()
        if state.finish_reason == "length":
            pending += decoder.decode(b"", final=True)
        if pending:
            emitted.append(pending)
            yield pending

    def _chat_completion(self, llm: Any, prompt: Prompt, state: StreamState, *, max_tokens: int,
                         temperature: float, stop: Sequence[str] | None, top_p: float | None,
                         seed: int | None) -> Iterator[str]:
        """Models whose chat format only llama-cpp-python renders (named formats, custom handlers): its own
        chat API; the usage it does not stream is estimated from the evaluated tokens."""
        before = list(llm._input_ids)
        kw: dict[str, Any] = dict(max_tokens=max_tokens, temperature=temperature, stop=list(stop or []) or None,
                                  stream=True, seed=self.seed if seed is None else seed)
        if top_p is not None:
            kw["top_p"] = top_p
        pieces = 0
        for chunk in llm.create_chat_completion(messages=prompt.openai_messages(), **kw):
            choice = chunk["choices"][0]
            piece = (choice.get("delta") or {}).get("content")
            if choice.get("finish_reason"):
                state.finish_reason = choice["finish_reason"]
            if piece:
                pieces += 1
                yield piece
        after = list(llm._input_ids)
        state.completion_tokens = pieces
        state.prompt_tokens = max(0, len(after) - pieces)
        state.cached_tokens = min(_common_prefix(before, after[:state.prompt_tokens]),
                                  max(0, state.prompt_tokens - 1))
        state.extra["usage_estimated"] = True

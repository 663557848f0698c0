"""Generator protocol, token-level timing, and the stream object every backend returns.

A backend implements one method, :meth:`BaseGenerator._pieces`, a sync iterator of text pieces that fills a
:class:`StreamState` (usage, finish reason, model). :class:`BaseGenerator` derives ``generate``, ``stream``
and the async twins from it, and measures TTFT and inter-token latencies at the token.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import time
from dataclasses import dataclass, field
from typing import Any, AsyncGenerator, Callable, Iterator, Protocol, Sequence, runtime_checkable

from ..kernels.async_bridge import iterate_in_thread
from ..errors import GenerationError, PartialGenerationError
from ..types import Generation, Message, Prompt, Scored, Timings, TokenEvent, Usage


class TokenClock:
    """Measures time to first token, inter-token latencies and total time (milliseconds)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self.start = clock()
        self._last: float | None = None
        self.ttft_ms: float | None = None
        self.itl_ms: list[float] = []

    def tick(self) -> None:
        """Call once per token as it arrives."""
        now = self._clock()
        if self._last is None:
            self.ttft_ms = (now - self.start) * 1000.0
        else:
            self.itl_ms.append((now - self._last) * 1000.0)
        self._last = now

    def timings(self, stage: str = "generate") -> Timings:
        total = (self._clock() - self.start) * 1000.0
        return Timings(stages={stage: total}, ttft_ms=self.ttft_ms, itl_ms=list(self.itl_ms), total_ms=total)


@dataclass
class StreamState:
    """What a backend learns while streaming; read when the stream ends."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int | None = None  # None: count the pieces
    finish_reason: str = "stop"
    model: str = ""
    extra: dict[str, object] = field(default_factory=dict)


class GenerationStream(Iterator[TokenEvent]):
    """Iterates :class:`TokenEvent`s; afterwards ``.generation`` holds text, usage and timings.

    A backend error mid-answer raises :class:`PartialGenerationError` carrying the text so far; the
    partial :class:`Generation` (``partial=True``) is then available as ``.generation`` too.
    """

    def __init__(self, pieces: Iterator[str], state: StreamState, backend: str, model: str) -> None:
        self._pieces = pieces
        self._state = state
        self._backend = backend
        self._model = model
        self._clock = TokenClock()
        self._text: list[str] = []
        self._index = 0
        self.generation: Generation | None = None

    def __iter__(self) -> "GenerationStream":
        return self

    def __next__(self) -> TokenEvent:
        if self.generation is not None:
            raise StopIteration
        try:
            piece = next(self._pieces)
        except StopIteration:
            self._finish(partial=False)
            raise
        except PartialGenerationError as err:
            err.partial_text = "".join(self._text) or err.partial_text
            self._finish(partial=True)
            raise
        except GenerationError:
            if self._text:
                self._finish(partial=True)
                raise PartialGenerationError(
                    f"{self._backend} stream broke after {self._index} tokens",
                    partial_text="".join(self._text)) from None
            raise
        self._clock.tick()
        self._text.append(piece)
        ev = TokenEvent(text=piece, index=self._index)
        self._index += 1
        return ev

    def _finish(self, *, partial: bool) -> None:
        s = self._state
        completion = s.completion_tokens if s.completion_tokens is not None else self._index
        self.generation = Generation(
            text="".join(self._text),
            usage=Usage(prompt_tokens=s.prompt_tokens, cached_tokens=s.cached_tokens,
                        completion_tokens=completion),
            timings=self._clock.timings(), model=s.model or self._model, backend=self._backend,
            finish_reason="error" if partial else s.finish_reason, partial=partial,
            usage_estimated=bool(s.extra.get("usage_estimated")))

    def close(self) -> None:
        """Stop early (e.g. the client went away); the generation so far is kept, marked partial."""
        close = getattr(self._pieces, "close", None)
        if close:
            close()
        if self.generation is None:
            self._finish(partial=True)

    def consume(self) -> Generation:
        """Drain the stream and return the final Generation."""
        for _ in self:
            pass
        assert self.generation is not None
        return self.generation


@runtime_checkable
class Generator(Protocol):
    """What the router and pipeline call. ``name`` is the backend label (``extractive``, ``openai``…).

    ``sampling`` holds the optional sampling keywords ``top_p`` and ``seed`` (see
    :meth:`ragbudget.types.Sampling.engine_kwargs`); callers pass them only when a request sets them."""

    name: str
    model: str

    def generate(self, prompt: Prompt, *, max_tokens: int, temperature: float = 0.0,
                 stop: Sequence[str] | None = None, context: Sequence[Scored] | None = None,
                 **sampling: Any) -> Generation: ...

    def stream(self, prompt: Prompt, *, max_tokens: int, temperature: float = 0.0,
               stop: Sequence[str] | None = None,
               context: Sequence[Scored] | None = None, **sampling: Any) -> GenerationStream: ...

    async def agenerate(self, prompt: Prompt, *, max_tokens: int, temperature: float = 0.0,
                        stop: Sequence[str] | None = None,
                        context: Sequence[Scored] | None = None, **sampling: Any) -> Generation: ...

    def astream(self, prompt: Prompt, *, max_tokens: int, temperature: float = 0.0,
                stop: Sequence[str] | None = None,
                context: Sequence[Scored] | None = None, **sampling: Any) -> "AsyncGenerationStream": ...


class AsyncGenerationStream:
    """Async iterator over a sync token stream (a :class:`GenerationStream`, or anything iterating
    TokenEvents with a ``.generation`` attribute) run in a worker thread (:mod:`ragbudget.kernels.async_bridge`)."""

    def __init__(self, stream: Iterator[TokenEvent]) -> None:
        self._stream = stream
        self._batches: AsyncGenerator[list[TokenEvent], None] | None = None
        self._ready: collections.deque[TokenEvent] = collections.deque()

    @property
    def stream(self) -> Iterator[TokenEvent]:
        return self._stream

    @property
    def generation(self) -> Generation | None:
        return getattr(self._stream, "generation", None)

    def __aiter__(self) -> "AsyncGenerationStream":
        return self

    async def __anext__(self) -> TokenEvent:
        if self._batches is None:
            self._batches = iterate_in_thread(lambda _cancel: self._stream, name="ragbudget-astream")
        if not self._ready:
            self._ready.extend(await self._batches.__anext__())  # StopAsyncIteration at the end
        return self._ready.popleft()

    async def aclose(self) -> None:
        """Stop the generation between tokens (the worker closes the stream)."""
        if self._batches is not None:
            await self._batches.aclose()

    async def consume(self) -> Generation:
        async for _ in self:
            pass
        assert self.generation is not None
        return self.generation


class BaseGenerator:
    """Derives generate / stream / agenerate / astream from :meth:`_pieces`.

    ``_pieces`` receives ``top_p`` and ``seed`` as keywords only when the request set them, so a backend
    that does not sample (or predates them) needs no change; one that samples declares them."""

    name = "base"

    def __init__(self, model: str) -> None:
        self.model = model

    def _pieces(self, prompt: Prompt, state: StreamState, *, max_tokens: int, temperature: float,
                stop: Sequence[str] | None, context: Sequence[Scored] | None, top_p: float | None = None,
                seed: int | None = None) -> Iterator[str]:
        raise NotImplementedError

    def stream(self, prompt: Prompt, *, max_tokens: int, temperature: float = 0.0,
               stop: Sequence[str] | None = None,
               context: Sequence[Scored] | None = None, **sampling: Any) -> GenerationStream:
        if max_tokens < 1:
            raise GenerationError(f"max_tokens must be at least 1, got {max_tokens}")
        state = StreamState(model=self.model)
        extra = {k: v for k, v in sampling.items() if v is not None}
        pieces = self._pieces(prompt, state, max_tokens=max_tokens, temperature=temperature, stop=stop,
                              context=context, **extra)
        return GenerationStream(pieces, state, self.name, self.model)

    def generate(self, prompt: Prompt, *, max_tokens: int, temperature: float = 0.0,
                 stop: Sequence[str] | None = None, context: Sequence[Scored] | None = None,
                 **sampling: Any) -> Generation:
        return self.stream(prompt, max_tokens=max_tokens, temperature=temperature, stop=stop,
                           context=context, **sampling).consume()

    async def agenerate(self, prompt: Prompt, *, max_tokens: int, temperature: float = 0.0,
                        stop: Sequence[str] | None = None,
                        context: Sequence[Scored] | None = None, **sampling: Any) -> Generation:
        return await asyncio.to_thread(self.generate, prompt, max_tokens=max_tokens,
                                       temperature=temperature, stop=stop, context=context, **sampling)

    def astream(self, prompt: Prompt, *, max_tokens: int, temperature: float = 0.0,
                stop: Sequence[str] | None = None,
                context: Sequence[Scored] | None = None, **sampling: Any) -> AsyncGenerationStream:
        return AsyncGenerationStream(self.stream(prompt, max_tokens=max_tokens, temperature=temperature,
                                                 stop=stop, context=context, **sampling))


def make_prompt(messages: Sequence[tuple[str, str]], *, static_prefix: str = "",
                count: Callable[[str], int] | None = None) -> Prompt:
    """A :class:`Prompt` from ``(role, content)`` pairs, for callers without the prompt assembler
    (benchmarks, tests, the OpenAI-compatible endpoint). ``count`` counts tokens (default: words)."""
    counter = count or (lambda t: len(t.split()))
    msgs = tuple(Message(role, content) for role, content in messages)  # type: ignore[arg-type]
    text = "\n".join(f"{m.role}: {m.content}" for m in msgs)
    fp = hashlib.sha256(static_prefix.encode("utf-8")).hexdigest()[:16]
    return Prompt(messages=msgs, text=text, static_prefix=static_prefix,
                  static_prefix_tokens=counter(static_prefix), prefix_fingerprint=fp,
                  total_tokens=counter(text))

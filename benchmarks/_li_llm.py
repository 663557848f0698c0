"""A ragbudget generator (e.g. a llama.cpp engine) as a LlamaIndex chat LLM (a helper of ``real_headline.py``).

LlamaIndex's query engine then does what it does by default with a chat model: its own QA template
(``CHAT_TEXT_QA_PROMPT``: its system message, then context and query as one user turn), rendered by the
model's chat template inside the engine. The wrapper keeps the last :class:`~ragbudget.types.Generation`, so a
benchmark reads the engine's own usage (prompt, cached, completion tokens) for each answer.
"""

from __future__ import annotations

from typing import Any, Sequence

from llama_index.core.base.llms.types import (ChatMessage, ChatResponse, ChatResponseGen, CompletionResponse,
                                              CompletionResponseGen, LLMMetadata, MessageRole)
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from pydantic import PrivateAttr

import _common  # noqa: F401 - puts the checkout first on sys.path
from ragbudget.llm import Generator, make_prompt
from ragbudget.types import Generation


class GeneratorLLM(CustomLLM):
    """``gen`` answering LlamaIndex's chat calls, at temperature 0 with at most ``max_tokens`` tokens."""

    context_window: int = 8192
    num_output: int = 256
    model_name: str = "ragbudget-generator"
    _gen: Any = PrivateAttr()
    _last: Generation | None = PrivateAttr(default=None)
    _calls: list[Generation] = PrivateAttr(default_factory=list)

    def __init__(self, gen: Generator, **kw: Any) -> None:
        super().__init__(**kw)
        self._gen = gen

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(context_window=self.context_window, num_output=self.num_output, is_chat_model=True,
                           model_name=self.model_name)

    @property
    def calls(self) -> list[Generation]:
        """Every generation since the last :meth:`take_calls` (a chat engine may call the model twice)."""
        return self._calls

    def take_calls(self) -> list[Generation]:
        out, self._calls = self._calls, []
        return out

    def _stream(self, messages: Sequence[ChatMessage]) -> Any:
        pairs = [(m.role.value if isinstance(m.role, MessageRole) else str(m.role), str(m.content or ""))
                 for m in messages]
        return self._gen.stream(make_prompt(pairs), max_tokens=self.num_output, temperature=0.0)

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        s = self._stream(messages)
        g = s.consume()
        self._calls.append(g)
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=g.text))

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        def gen() -> ChatResponseGen:
            s = self._stream(messages)
            text = ""
            for ev in s:
                text += ev.text
                yield ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text), delta=ev.text)
            assert s.generation is not None
            self._calls.append(s.generation)
        return gen()

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        r = self.chat([ChatMessage(role=MessageRole.USER, content=prompt)])
        return CompletionResponse(text=str(r.message.content or ""))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        def gen() -> CompletionResponseGen:
            text = ""
            for r in self.stream_chat([ChatMessage(role=MessageRole.USER, content=prompt)]):
                text += r.delta or ""
                yield CompletionResponse(text=text, delta=r.delta)
        return gen()

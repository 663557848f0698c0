"""LangChain's ChatOpenAI and LlamaIndex's OpenAILike pointed at a real ``ragbudget serve`` app on loopback
(issue 15): plain calls, streaming, and a refused parameter surfacing as the client's error."""

from __future__ import annotations

from typing import Iterator

import pytest
from service_fixtures import KEYS

from ragbudget.service.app import BackgroundServer, create_app

langchain_openai = pytest.importorskip("langchain_openai")
openai_like = pytest.importorskip("llama_index.llms.openai_like")

QUESTION = "what are the structural and aerodynamic problems of flutter in high speed aircraft"


@pytest.fixture(scope="module")
def base_url(cranfield_rag, service_config) -> Iterator[str]:
    with BackgroundServer(create_app(cranfield_rag, service_config)) as srv:
        yield srv.url + "/v1"


def test_langchain_chat_openai_invoke_and_stream(base_url):
    llm = langchain_openai.ChatOpenAI(base_url=base_url, api_key=KEYS["acme"], model="ragbudget", max_retries=0,
                                      timeout=60, temperature=0)
    msg = llm.invoke(QUESTION)
    assert isinstance(msg.content, str) and msg.content.strip()
    assert msg.response_metadata["finish_reason"] == "stop"
    assert msg.usage_metadata and msg.usage_metadata["output_tokens"] > 0
    streamed = "".join(chunk.content for chunk in llm.stream(QUESTION))
    assert streamed == msg.content  # same request: the same answer, token by token
    # a model naming an index and a mode
    concise = langchain_openai.ChatOpenAI(base_url=base_url, api_key=KEYS["acme"], model="default:concise",
                                          max_retries=0, timeout=60).invoke(QUESTION + "?")
    assert concise.content.strip()


def test_langchain_tools_are_refused_not_ignored(base_url):
    import openai
    llm = langchain_openai.ChatOpenAI(base_url=base_url, api_key=KEYS["acme"], model="ragbudget", max_retries=0,
                                      timeout=60)

    def lookup(city: str) -> str:
        """Look a city up."""
        return city

    with pytest.raises(openai.BadRequestError) as err:
        llm.bind_tools([lookup]).invoke(QUESTION)
    assert "tools" in str(err.value)


def test_llamaindex_openai_like_chat_complete_and_stream(base_url):
    from llama_index.core.llms import ChatMessage
    llm = openai_like.OpenAILike(api_base=base_url, api_key=KEYS["acme"], model="ragbudget", is_chat_model=True,
                                 context_window=4096, max_retries=0, timeout=60)
    resp = llm.chat([ChatMessage(role="user", content=QUESTION)])
    assert resp.message.content and resp.message.content.strip()
    streamed = "".join(r.delta or "" for r in llm.stream_chat([ChatMessage(role="user", content=QUESTION)]))
    assert streamed == resp.message.content
    done = llm.complete(QUESTION)  # completion API on a chat model: sent as one user message
    assert done.text.strip()

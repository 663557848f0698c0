"""The OpenAI-compatible surface of ``ragbudget serve`` through the real ``openai`` SDK, on loopback:
chat (stream and not), /v1/models, /v1/embeddings, sampling parameters reaching the engine and the cache
key, and every refusal (a 400/404 naming the parameter, in OpenAI's error shape)."""

from __future__ import annotations

import threading
from typing import Any, Iterator

import httpx
import numpy as np
import openai
import pytest
from service_fixtures import KEYS

from ragbudget.llm.base import BaseGenerator
from ragbudget.pipeline import RAG
from ragbudget.service.app import BackgroundServer, create_app

QUESTION = "what is the spanwise distribution of lift increase due to slipstream"
FRESH_QUESTION = "what problems of heat conduction in composite slabs have been solved so far?"


@pytest.fixture(scope="module")
def server(cranfield_rag, service_config) -> Iterator[BackgroundServer]:
    with BackgroundServer(create_app(cranfield_rag, service_config)) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEYS["acme"], max_retries=0, timeout=60)


class RecordingGenerator(BaseGenerator):
    """The generator seam: answers with a fixed sentence and records the sampling it was given."""

    name = "scripted"

    def __init__(self) -> None:
        super().__init__("recorder")
        self.calls: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def _pieces(self, prompt, state, *, max_tokens, temperature, stop, context, top_p=None, seed=None):
        with self.lock:
            self.calls.append({"temperature": temperature, "stop": stop, "top_p": top_p, "seed": seed,
                               "max_tokens": max_tokens})
        state.prompt_tokens, state.completion_tokens = prompt.total_tokens, 4  # "the engine reported"
        yield from ["The ", "slipstream ", "raises ", "lift."]


@pytest.fixture(scope="module")
def scripted(cranfield_rag, service_config) -> Iterator[tuple[openai.OpenAI, RecordingGenerator]]:
    cfg = service_config.with_overrides({"llm.tiers": [{"name": "rec", "backend": "scripted", "model": "recorder"}]})
    gen = RecordingGenerator()
    rag = RAG(cfg, generators={"rec": gen}, embedder=cranfield_rag.embedder)
    with BackgroundServer(create_app(rag, cfg)) as srv:
        yield openai.OpenAI(base_url=srv.url + "/v1", api_key=KEYS["acme"], max_retries=0, timeout=60), gen


def _ask(content: str = QUESTION) -> list[dict[str, Any]]:
    return [{"role": "user", "content": content}]


def test_chat_non_streaming_and_streaming_agree(client):
    # a question no other test asks: a response-cache hit (from another module's test) reports no usage
    resp = client.chat.completions.create(model="ragbudget", messages=_ask(FRESH_QUESTION))
    text = resp.choices[0].message.content
    assert text and resp.object == "chat.completion" and resp.choices[0].finish_reason == "stop"
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens
    assert resp.usage.model_extra["estimated"] is True  # extractive: no engine counted these tokens
    chunks = list(client.chat.completions.create(model="ragbudget", messages=_ask(FRESH_QUESTION), stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert chunks[-1].choices[0].finish_reason == "stop" and chunks[-1].usage is not None


def test_models_lists_indexes_modes_and_the_embedder(client):
    ids = [m.id for m in client.models.list()]
    assert ids[0] == "ragbudget" and "default" in ids and "concise" in ids and "default:concise" in ids
    assert "all-MiniLM-L6-v2" in ids
    assert "globex" not in ids  # another tenant's index is not listed
    # a listed index name is a model: it selects that index
    resp = client.chat.completions.create(model="default", messages=_ask())
    assert resp.model_extra["ragbudget"]["index"] == "default"


def test_embeddings_string_list_float_and_base64(client, cranfield_rag):
    one = client.embeddings.create(model="all-MiniLM-L6-v2", input="boundary layer transition")  # SDK: base64
    assert len(one.data) == 1 and len(one.data[0].embedding) == 384 and one.usage.prompt_tokens > 0
    expected = cranfield_rag.embedder.embed(["boundary layer transition"])[0]
    assert np.allclose(one.data[0].embedding, expected, atol=1e-5)
    many = client.embeddings.create(model="all-MiniLM-L6-v2", input=["lift", "drag"], encoding_format="float")
    assert [d.index for d in many.data] == [0, 1] and many.usage.model_extra["estimated"] is True
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="text-embedding-3-small", input="x")
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model="all-MiniLM-L6-v2", input=[[1, 2, 3]])
    assert e.value.body["param"] == "input"


def test_sampling_parameters_reach_the_engine(scripted):
    client, gen = scripted
    gen.calls.clear()
    resp = client.chat.completions.create(model="ragbudget", messages=_ask("sampling reaches the engine"),
                                          temperature=0.7, top_p=0.9, stop=["\n\n"], seed=42, max_tokens=50)
    assert resp.choices[0].message.content == "The slipstream raises lift."
    assert gen.calls[-1]["temperature"] == 0.7 and gen.calls[-1]["top_p"] == 0.9
    assert gen.calls[-1]["stop"] == ["\n\n"] and gen.calls[-1]["seed"] == 42 and gen.calls[-1]["max_tokens"] <= 50
    assert resp.usage.model_extra["estimated"] is False  # the engine reported its usage
    stream = client.chat.completions.create(model="ragbudget", messages=_ask("sampling in a stream"),
                                            temperature=0.3, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "The slipstream raises lift."
    assert gen.calls[-1]["temperature"] == 0.3 and gen.calls[-1]["top_p"] is None


def test_cache_key_differs_by_temperature_and_stop(scripted):
    client, gen = scripted
    q = _ask("cache keys by sampling")

    def ask(**kw: Any) -> str | None:
        return client.chat.completions.create(model="ragbudget", messages=q, **kw).model_extra["ragbudget"][
            "cache_layer"]

    n = len(gen.calls)
    assert ask(temperature=0.0) is None and ask(temperature=0.0) == "exact"  # same sampling: a cache hit
    assert len(gen.calls) == n + 1
    assert ask(temperature=0.8) is None  # another temperature never gets the first answer
    assert ask(temperature=0.0, stop=["lift"]) is None  # nor another stop
    assert ask(temperature=0.0, seed=7) is None
    assert len(gen.calls) == n + 4


@pytest.mark.parametrize("kw,param", [
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]}, "tools"),
    ({"tool_choice": "auto"}, "tool_choice"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"n": 2}, "n"),
    ({"logprobs": True}, "logprobs"),
    ({"top_logprobs": 3, "logprobs": False}, "top_logprobs"),
    ({"functions": [{"name": "f", "parameters": {}}]}, "functions"),
    ({"presence_penalty": 0.5}, "presence_penalty"),
    ({"extra_body": {"colour": "red"}}, "colour"),
])
def test_unsupported_parameters_are_refused_naming_them(client, kw, param):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="ragbudget", messages=_ask(), **kw)
    assert e.value.status_code == 400
    err = e.value.body
    assert err["param"] == param and param in err["message"] and err["fix"]


def test_default_values_of_unsupported_parameters_are_accepted(client):
    resp = client.chat.completions.create(model="ragbudget", messages=_ask(), n=1, logprobs=False,
                                          response_format={"type": "text"}, presence_penalty=0)
    assert resp.choices[0].message.content


def test_bad_input_unknown_model_empty_messages_and_images(client, server):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-4o", messages=_ask())
    assert e.value.body["param"] == "model" and "gpt-4o" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="ragbudget", messages=[])
    assert e.value.body["param"] == "messages"
    image = [{"role": "user", "content": [{"type": "text", "text": QUESTION},
                                          {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]}]
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="ragbudget", messages=image)
    assert e.value.body["param"] == "messages[0].content[1]" and "image_url" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:  # a model pinning one index, the extension another
        client.chat.completions.create(model="default", messages=_ask(), extra_body={"index": "acme-extra"})
    assert e.value.body["param"] == "index"
    r = httpx.get(server.url + "/v1/models", headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401 and r.json()["error"]["type"] == "unauthorized"


def test_serve_without_index_uses_the_only_built_index(embedder, tmp_path):
    """The README's first path: after `ragbudget quickstart` only `quickstart` exists, and a request
    naming no index (curl, the SDK with model='ragbudget') answers from it."""
    from ragbudget.cli.query_cmds import next_steps
    from ragbudget.config import Config

    cfg = Config().with_overrides({"index.dir": str(tmp_path / "indexes")})
    rag = RAG(cfg, embedder=embedder)
    rag.ingest([{"id": "q1", "title": "budgets", "text": "Unused budget is lent to the retrieved context."}],
               index="quickstart")
    with BackgroundServer(create_app(rag, cfg)) as srv:
        r = httpx.post(srv.url + "/v1/query", json={"question": "How is unused budget lent?"}, timeout=60)
        assert r.status_code == 200 and r.json()["index"] == "quickstart", r.text
        c = openai.OpenAI(base_url=srv.url + "/v1", api_key="-", max_retries=0, timeout=60)
        for model in ("ragbudget", "quickstart"):
            reply = c.chat.completions.create(model=model, messages=_ask("How is unused budget lent?"))
            assert "lent" in reply.choices[0].message.content
    steps = next_steps("quickstart", cfg)
    assert "ragbudget serve" in steps and '"index": "quickstart"' in steps and 'model="quickstart"' in steps
    assert str(tmp_path / "indexes") in steps


def test_quickstart_prints_next_commands_that_copy_paste_on_a_narrow_terminal(tmp_path):
    """`ragbudget quickstart` (the README's first command) on a 60-column terminal: the serve and curl
    lines stay whole and the SDK snippet is valid Python (rich must not wrap them)."""
    import ast
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGBUDGET_")}
    env.update(COLUMNS="60", RAGBUDGET_EMBEDDING__CACHE="false")
    done = subprocess.run([sys.executable, "-m", "ragbudget", "quickstart", "--index-dir", str(tmp_path / "ix")],
                          capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    serve = next(line for line in out.splitlines() if "ragbudget serve" in line)
    assert "--port 8000" in serve and str(tmp_path / "ix") in serve
    snippet = out.split("python - <<'PY'\n", 1)[1].split("\nPY", 1)[0]
    ast.parse(snippet)
    assert 'model="quickstart"' in snippet

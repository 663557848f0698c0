"""The OpenAI-compatible surface over a :class:`~ragbudget.pipeline.RAG`, free of HTTP.

What ``ragbudget serve`` answers on ``/v1/chat/completions``, ``/v1/models`` and ``/v1/embeddings`` is
decided here; the routes only parse, call and serialise.

* **Models**: ``ragbudget`` (the default index and mode), each response mode (``concise``…), each index
  the caller may query, and ``INDEX:MODE`` / ``ragbudget:MODE``; anything else is :class:`UnknownModelError`.
* **Sampling**: ``temperature``, ``top_p``, ``stop``, ``seed``, ``max_tokens`` go to the engine and into the
  response-cache key (:class:`~ragbudget.types.Sampling`).
* **Refused** (:class:`UnsupportedParameterError`, naming the parameter): ``tools``, ``tool_choice``,
  ``functions``, ``function_call``, ``response_format`` other than text, ``n`` > 1, ``logprobs``,
  ``top_logprobs``, ``logit_bias``, non-zero ``presence_penalty``/``frequency_penalty``, ``audio``, and any
  other field this surface does not know. Image (or any non-text) content parts are refused too.
* **Usage**: ``usage.estimated`` is true when no engine reported the counts (ragbudget counted them).
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..errors import QueryError
from ..types import Answer, Message, Sampling

DEFAULT_MODEL = "ragbudget"
OWNER = "ragbudget"

#: fields the chat route reads (the ragbudget extensions index, mode and filters included)
CHAT_FIELDS = frozenset({"model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens",
                         "temperature", "top_p", "stop", "seed", "n", "user", "parallel_tool_calls",
                         "index", "mode", "filters"})


def _off(value: Any) -> bool:
    return value is None or value is False or value == [] or value == {} or value == 0


#: OpenAI parameters ragbudget does not implement: accepted only at their "off" value, refused otherwise
UNSUPPORTED: dict[str, tuple[Any, str]] = {
    "tools": (_off, "ragbudget answers from its index and calls no tools; remove tools"),
    "tool_choice": (lambda v: v is None or v == "none", "remove tool_choice (no tools are supported)"),
    "functions": (_off, "remove functions (no tools are supported)"),
    "function_call": (lambda v: v is None or v == "none", "remove function_call (no tools are supported)"),
    "response_format": (lambda v: v is None or (isinstance(v, Mapping) and v.get("type") == "text"),
                        "only {\"type\": \"text\"} is supported; remove response_format"),
    "logprobs": (_off, "token log-probabilities are not available; remove logprobs"),
    "top_logprobs": (_off, "token log-probabilities are not available; remove top_logprobs"),
    "logit_bias": (_off, "remove logit_bias"),
    "presence_penalty": (_off, "remove presence_penalty (or send 0)"),
    "frequency_penalty": (_off, "remove frequency_penalty (or send 0)"),
    "audio": (_off, "only text output is supported; remove audio"),
    "modalities": (lambda v: v is None or list(v) == ["text"], "only [\"text\"] is supported"),
}


class UnsupportedParameterError(QueryError):
    """A request parameter this surface does not implement (HTTP 400, ``param`` names it)."""

    def __init__(self, param: str, message: str, fix: str = "") -> None:
        super().__init__(message, fix=fix)
        self.param = param


class UnknownModelError(QueryError):
    """A model name that names no index or mode (HTTP 404, ``param`` = ``model``)."""

    def __init__(self, model: str, known: Sequence[str]) -> None:
        super().__init__(f"the model {model!r} does not exist",
                         fix=f"GET /v1/models lists the models; use one of {list(known)[:20]}")
        self.param = "model"


def check_chat_parameters(body: Mapping[str, Any]) -> None:
    """Refuse what is not implemented, naming the parameter; never ignore it."""
    for name, (accepted, fix) in UNSUPPORTED.items():
        if name in body and not accepted(body[name]):
            raise UnsupportedParameterError(name, f"parameter {name!r} is not supported by ragbudget", fix)
    n = body.get("n")
    if n is not None and n != 1:
        raise UnsupportedParameterError("n", f"n={n!r}: ragbudget returns one choice", "send n=1 or omit it")
    unknown = sorted(k for k in body if k not in CHAT_FIELDS and k not in UNSUPPORTED)
    if unknown:
        raise UnsupportedParameterError(unknown[0], f"parameter {unknown[0]!r} is not supported by ragbudget",
                                        f"remove it; supported: {sorted(CHAT_FIELDS)}")


def sampling_from(body: Mapping[str, Any]) -> Sampling:
    """The request's sampling parameters (temperature defaults to 0: answers are reproducible)."""
    stop = body.get("stop")
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    if len(stops) > 4 or not all(isinstance(s, str) and s for s in stops):
        raise UnsupportedParameterError("stop", "stop must be a non-empty string or up to 4 of them",
                                        "send e.g. \"stop\": [\"\\n\\n\"]")
    temperature = body.get("temperature")
    return Sampling(temperature=0.0 if temperature is None else float(temperature), top_p=body.get("top_p"),
                    stop=stops, seed=body.get("seed"))


def _text_of(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
        if kind != "text":
            raise UnsupportedParameterError(f"{where}.content[{j}]",
                                            f"{where}.content[{j}] is a {kind!r} part; only text parts are supported",
                                            "send the content as text (no images, audio or files)")
        parts.append(str(part.get("text", "")))
    return "".join(parts)


def split_messages(messages: Sequence[Mapping[str, Any]]) -> tuple[str, list[Message]]:
    """(question, history) from OpenAI messages: the last user message is the question; earlier user,
    assistant and system (and developer, as system) messages are the history; tool messages are not."""
    if not messages:
        raise UnsupportedParameterError("messages", "messages is empty", "send at least one message with role 'user'")
    texts = [_text_of(m.get("content"), f"messages[{i}]") for i, m in enumerate(messages)]
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=None)
    if last_user is None:
        raise UnsupportedParameterError("messages", "no user message in messages", "add a message with role 'user'")
    history = []
    for m, text in zip(messages[:last_user], texts):
        role = "system" if m.get("role") == "developer" else m.get("role")
        if role in ("user", "assistant", "system") and text:
            history.append(Message(role, text))  # type: ignore[arg-type]
    return texts[last_user], history


def model_ids(modes: Iterable[str], indexes: Iterable[str], embedding_model: str) -> list[str]:
    """Every model name a caller may send (its visible indexes only), ``ragbudget`` first."""
    modes, indexes = sorted(modes), sorted(indexes)
    ids = [DEFAULT_MODEL, *modes, *[i for i in indexes if i not in modes and i != DEFAULT_MODEL]]
    ids += [f"{DEFAULT_MODEL}:{m}" for m in modes] + [f"{i}:{m}" for i in indexes for m in modes]
    return ids + [embedding_model]


def models_response(ids: Sequence[str]) -> dict[str, Any]:
    """OpenAI's list format."""
    return {"object": "list", "data": [{"id": i, "object": "model", "created": 0, "owned_by": OWNER} for i in ids]}


def resolve_model(model: str, *, modes: Sequence[str], indexes: Sequence[str], index: str | None = None,
                  mode: str | None = None) -> tuple[str | None, str | None]:
    """(index, mode) a chat model name selects (None: the default); the ``index``/``mode`` extension fields
    win over a model that names none, and conflict with one that names another."""
    name, _, suffix = model.partition(":")
    m_index: str | None = None
    m_mode: str | None = None
    if suffix:
        if suffix not in modes or (name != DEFAULT_MODEL and name not in indexes):
            raise UnknownModelError(model, model_ids(modes, indexes, "")[:-1])
        m_index, m_mode = (None if name == DEFAULT_MODEL else name), suffix
    elif model in modes:
        m_mode = model
    elif model in indexes:
        m_index = model
    elif model != DEFAULT_MODEL:
        raise UnknownModelError(model, model_ids(modes, indexes, "")[:-1])
    for param, pinned, asked in (("index", m_index, index), ("mode", m_mode, mode)):
        if pinned is not None and asked is not None and pinned != asked:
            raise UnsupportedParameterError(param, f"model {model!r} selects {param} {pinned!r} but {param}="
                                                   f"{asked!r} was sent", "send one of them, or model='ragbudget'")
    return index or m_index, mode or m_mode


def default_index(preferred: str, built: Sequence[str]) -> str:
    """The index a request that names none uses: ``preferred`` (``index.name``) when it is built, else the
    only index the caller can see (e.g. ``quickstart`` after ``ragbudget quickstart``)."""
    if preferred in built or len(built) != 1:
        return preferred
    return built[0]


def usage(answer: Answer) -> dict[str, Any]:
    """OpenAI's usage object; ``estimated`` is true when no engine reported these counts."""
    u = answer.usage
    estimated = bool(answer.ledger.route.get("usage_estimated")) and not answer.cache_layer
    return {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
            "total_tokens": u.total_tokens, "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
            "estimated": estimated}


def finish_reason(answer: Answer) -> str:
    """"length" when the output hit its token cap (or broke off), else "stop"."""
    return "length" if answer.finish_reason == "length" or answer.partial else "stop"


def embedding_model_id(configured: str) -> str:
    return "all-MiniLM-L6-v2" if configured == "bundled" else Path(configured).name


def embedding_inputs(body: Mapping[str, Any], model_id: str) -> list[str]:
    """Validate an embeddings request; the texts to embed."""
    for name in body:
        if name not in ("input", "model", "encoding_format", "user", "dimensions"):
            raise UnsupportedParameterError(name, f"parameter {name!r} is not supported by ragbudget",
                                            "send input, model and optionally encoding_format")
    model = body.get("model")
    if model not in (None, model_id, DEFAULT_MODEL):
        raise UnknownModelError(str(model), [model_id])
    if body.get("encoding_format", "float") not in ("float", "base64"):
        raise UnsupportedParameterError("encoding_format", "encoding_format must be 'float' or 'base64'")
    raw = body.get("input")
    texts = [raw] if isinstance(raw, str) else raw
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t for t in texts):
        raise UnsupportedParameterError("input", "input must be a non-empty string or a list of them "
                                                 "(token arrays are not supported)", "send text")
    return texts


def embeddings_response(vectors: np.ndarray, texts: Sequence[str], model_id: str, count: Any,
                        encoding_format: str = "float", dimensions: int | None = None) -> dict[str, Any]:
    """OpenAI's embeddings list; ``usage`` counted by ragbudget's tokenizer, hence ``estimated``."""
    if dimensions is not None and dimensions != vectors.shape[1]:
        raise UnsupportedParameterError("dimensions", f"{model_id} embeds into {vectors.shape[1]} dimensions, "
                                                      f"not {dimensions}", "omit dimensions")
    data = []
    for i, v in enumerate(np.asarray(vectors, dtype=np.float32)):
        emb: Any = base64.b64encode(v.astype("<f4").tobytes()).decode() if encoding_format == "base64" else v.tolist()
        data.append({"object": "embedding", "index": i, "embedding": emb})
    n = sum(count(t) for t in texts)
    return {"object": "list", "data": data, "model": model_id,
            "usage": {"prompt_tokens": n, "total_tokens": n, "estimated": True}}

"""Request bodies (pydantic; unknown fields are refused except on the OpenAI-compatible route)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class HistoryMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["user", "assistant", "system"]
    content: str = Field(max_length=100_000)


class QueryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    question: str = Field(min_length=1, max_length=100_000)
    history: list[HistoryMessage] = Field(default_factory=list, max_length=10_000)
    mode: str | None = Field(None, max_length=100)
    index: str | None = Field(None, min_length=1, max_length=200)
    priority: Literal["interactive", "batch"] = "interactive"
    stream: bool = False
    max_tokens: int | None = Field(None, ge=1, le=1_000_000)
    # metadata filters applied inside the index: {"source": "...", "year": {"gte": 2020}, "lang": ["en"]}
    filters: dict[str, Any] | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[dict[str, Any]] | None = None


class ChatCompletionRequest(BaseModel):
    """The OpenAI chat API as ragbudget serves it. Other fields are kept (``extra="allow"``) so that
    :func:`ragbudget.service.openai_surface.check_chat_parameters` refuses them by name rather than ignoring them."""

    model_config = ConfigDict(extra="allow")
    model: str = Field("ragbudget", max_length=200)
    messages: list[ChatMessage] = Field(max_length=10_000)  # empty: a 400 naming messages, not a 422
    stream: bool = False
    max_tokens: int | None = Field(None, ge=1, le=1_000_000)
    max_completion_tokens: int | None = Field(None, ge=1, le=1_000_000)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=-(2**63), le=2**63 - 1)
    n: int | None = None
    index: str | None = Field(None, min_length=1, max_length=200)
    mode: str | None = Field(None, max_length=100)
    filters: dict[str, Any] | None = None  # ragbudget extension (extra_body={"filters": ...} in the openai SDK)


class EmbeddingRequest(BaseModel):
    """``POST /v1/embeddings``; validated further by :func:`ragbudget.service.openai_surface.embedding_inputs`."""

    model_config = ConfigDict(extra="allow")
    input: str | list[Any]
    model: str | None = Field(None, max_length=200)
    encoding_format: str | None = Field(None, max_length=20)
    dimensions: int | None = None
    user: str | None = Field(None, max_length=200)


class DeleteRequest(BaseModel):
    """``POST /v1/documents/delete``: documents by id and/or by source path."""
    model_config = ConfigDict(extra="forbid")
    index: str | None = Field(None, min_length=1, max_length=200)
    doc_ids: list[str] = Field(default_factory=list, max_length=100_000)
    sources: list[str] = Field(default_factory=list, max_length=100_000)


class IngestRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=1000)
    title: str | None = Field(None, max_length=10_000)
    text: str = Field(min_length=1)
    metadata: dict[str, Any] = Field(default_factory=dict)


class IngestRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    index: str | None = Field(None, min_length=1, max_length=200)
    path: str | None = Field(None, min_length=1, max_length=4096)
    records: list[IngestRecord] | None = Field(None, min_length=1, max_length=100_000)

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
    """The subset of the OpenAI chat API ragbudget uses; other OpenAI fields are accepted and ignored."""

    model_config = ConfigDict(extra="allow")
    model: str = Field("ragbudget", max_length=200)
    messages: list[ChatMessage] = Field(min_length=1, max_length=10_000)
    stream: bool = False
    max_tokens: int | None = Field(None, ge=1, le=1_000_000)
    max_completion_tokens: int | None = Field(None, ge=1, le=1_000_000)
    index: str | None = Field(None, min_length=1, max_length=200)
    mode: str | None = Field(None, max_length=100)
    filters: dict[str, Any] | None = None  # ragbudget extension (extra_body={"filters": ...} in the openai SDK)


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

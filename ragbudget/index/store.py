"""Chunk store: chunk id → :class:`~ragbudget.types.Chunk`, in insertion order, persisted as JSONL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Iterator

from ..types import Chunk


class ChunkStore:
    """Ordered mapping of chunks; row ``i`` of the dense and sparse indexes is ``ids[i]``."""

    def __init__(self, chunks: Iterable[Chunk] = ()) -> None:
        self._chunks: dict[str, Chunk] = {}
        for c in chunks:
            self._chunks[c.id] = c

    def __len__(self) -> int:
        return len(self._chunks)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self._chunks

    def __iter__(self) -> Iterator[Chunk]:
        return iter(self._chunks.values())

    def get(self, chunk_id: str) -> Chunk:
        return self._chunks[chunk_id]

    @property
    def ids(self) -> list[str]:
        return list(self._chunks)

    def doc_ids(self) -> set[str]:
        return {c.doc_id for c in self._chunks.values()}

    def save(self, path: Path) -> None:
        with open(path, "w", encoding="utf-8") as f:
            for c in self._chunks.values():
                f.write(json.dumps({"id": c.id, "doc_id": c.doc_id, "text": c.text, "position": c.position,
                                    "n_tokens": c.n_tokens, "metadata": dict(c.metadata)},
                                   ensure_ascii=False, default=str))
                f.write("\n")

    @classmethod
    def load(cls, path: Path) -> "ChunkStore":
        chunks = []
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    d = json.loads(line)
                    chunks.append(Chunk(id=d["id"], doc_id=d["doc_id"], text=d["text"], position=d["position"],
                                        n_tokens=d["n_tokens"], metadata=d["metadata"]))
        return cls(chunks)

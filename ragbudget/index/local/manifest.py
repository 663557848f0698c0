"""Index manifest: what an index was built with, checked on load."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from ...errors import IndexError_, IndexMismatchError

FORMAT_VERSION = 2  # 2: segments (ragbudget/index/local/segments.py); 1: one set of files, still read
READABLE_FORMATS = (1, 2)
MANIFEST_FILE = "manifest.json"


def content_version(chunk_ids: Iterable[str], revision: int = 0) -> str:
    """Hash of the sorted chunk ids and the write ``revision`` (bumped by every committed change, metadata
    included): caches key entries by it, so none made from an older version is served."""
    h = hashlib.sha256()
    if revision:
        h.update(f"r{revision}\n".encode())
    for cid in sorted(chunk_ids):
        h.update(cid.encode())
        h.update(b"\n")
    return h.hexdigest()[:16]


def next_content_version(previous: str, revision: int, removed: Iterable[str],
                         added: Iterable[tuple[str, str, Mapping[str, Any]]]) -> str:
    """The version after one committed write: a hash chained from ``previous`` over the revision, the ids
    removed and each chunk added with its document and metadata (a metadata-only change is a new version,
    and two indexes with the same ids but other metadata never share one). Costs the write, not the index."""
    h = hashlib.sha256(f"{previous}\nr{revision}\n".encode())
    for cid in sorted(removed):
        h.update(b"-" + cid.encode("utf-8", "surrogatepass") + b"\n")
    for cid, doc_id, meta in added:
        body = json.dumps([cid, doc_id, meta], sort_keys=True, default=str, ensure_ascii=True)
        h.update(b"+" + body.encode() + b"\n")
    return h.hexdigest()[:16]


@dataclass
class Manifest:
    name: str
    embedding_model: str
    embedding_dim: int
    chunker: dict[str, Any]
    analyzer: dict[str, Any]
    faiss_kind: str
    format_version: int = FORMAT_VERSION
    n_chunks: int = 0
    n_documents: int = 0
    content_version: str = ""
    revision: int = 0  # committed writes so far
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    notes: list[str] = field(default_factory=list)
    files: dict[str, Any] = field(default_factory=dict)  # format 2: the files of this version

    def save(self, folder: Path) -> None:
        (folder / MANIFEST_FILE).write_text(json.dumps(self.to_dict(), indent=2), encoding="utf-8")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def load(cls, folder: Path) -> "Manifest":
        path = folder / MANIFEST_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as err:
            raise IndexError_(f"index manifest unreadable: {path} ({err})",
                              fix="re-ingest with --rebuild to recreate the index") from None
        if data.get("format_version") not in READABLE_FORMATS:
            raise IndexMismatchError(
                f"index {folder.name!r} has format version {data.get('format_version')}, this ragbudget reads "
                f"version {FORMAT_VERSION}", fix="re-ingest with --rebuild")
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})

    def check_model(self, model_id: str, dim: int | None = None) -> None:
        """Raise :class:`IndexMismatchError` if the index was built with another embedding model."""
        if model_id != self.embedding_model or (dim is not None and dim != self.embedding_dim):
            raise IndexMismatchError(
                f"index {self.name!r} was built with embedding model {self.embedding_model!r} "
                f"(dim {self.embedding_dim}), but the configured model is {model_id!r}"
                + (f" (dim {dim})" if dim is not None else ""),
                fix=f"re-ingest with --rebuild (ragbudget ingest PATH --index {self.name} --rebuild), "
                    f"or set embedding.model back to the index's model")

"""On-disk layout of a local index (format 2): immutable segments and a manifest that names them.

::

    <index.dir>/<name>/
      manifest.json             the commit point: names every file of this version (replaced atomically)
      seg-<tag>.chunks.jsonl    the chunks one write added; never rewritten (until a compaction)
      seg-<tag>.vectors.npy     their vectors (memory-mapped on load)
      seg-<tag>.terms.json      their analysed BM25 terms (read only by a writer, to rebuild BM25)
      dead-<tag>.npy            rows deleted since the last compaction
      bm25-<tag>/               BM25 score matrix over the live rows (bm25s, memory-mapped)
      dense-<tag>.faiss         the HNSW graph / IVF lists (a flat index is rebuilt from the vectors)
      sources-<tag>.json        which documents each ingested root holds

A write adds files, then replaces ``manifest.json``. Files that neither the new nor the previous manifest
names are removed after the commit, so a process still loading the previous version finds its files; a
crash before the commit leaves files no manifest names, removed by the next write.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from ...types import Chunk
from .manifest import MANIFEST_FILE

log = logging.getLogger(__name__)

OWNED = re.compile(r"^(seg-[\w-]+\.(chunks\.jsonl|vectors\.npy|terms\.json)|dead-[\w-]+\.npy|bm25-[\w-]+|"
                   r"dense-[\w-]+\.faiss|sources-[\w-]+\.json|\.manifest\.json\.tmp-[\w-]+|"
                   r"chunks\.jsonl|vectors\.npy|bm25_tokens\.json|sources\.json)$")  # last line: format 1


def new_tag(revision: int) -> str:
    return f"{revision:06d}-{secrets.token_hex(3)}"


def fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, ensure_ascii=False, default=str), encoding="utf-8")
    fsync_file(path)


def write_npy(path: Path, arr: np.ndarray) -> None:
    np.save(path, arr)
    fsync_file(path)


def chunk_record(c: Chunk) -> dict[str, Any]:
    return {"id": c.id, "doc_id": c.doc_id, "text": c.text, "position": c.position, "n_tokens": c.n_tokens,
            "metadata": dict(c.metadata)}


def read_chunks(path: Path) -> list[Chunk]:
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                d = json.loads(line)
                out.append(Chunk(id=d["id"], doc_id=d["doc_id"], text=d["text"], position=d["position"],
                                 n_tokens=d["n_tokens"], metadata=d["metadata"]))
    return out


@dataclass
class Segment:
    """Rows one write added: chunks, vectors and BM25 terms, row-aligned. Immutable once written."""

    name: str
    chunks: list[Chunk]
    vectors: np.ndarray
    folder: Path | None = None  # None: not written yet
    _terms: list[list[str]] | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.chunks)

    def terms(self) -> list[list[str]]:
        if self._terms is None:
            assert self.folder is not None
            self._terms = json.loads((self.folder / f"{self.name}.terms.json").read_text(encoding="utf-8"))
        return self._terms

    def files(self) -> list[str]:
        return [f"{self.name}.chunks.jsonl", f"{self.name}.vectors.npy", f"{self.name}.terms.json"]

    def write(self, folder: Path) -> None:
        path = folder / f"{self.name}.chunks.jsonl"
        with open(path, "w", encoding="utf-8") as f:
            for c in self.chunks:
                f.write(json.dumps(chunk_record(c), ensure_ascii=False, default=str))
                f.write("\n")
        fsync_file(path)
        write_npy(folder / f"{self.name}.vectors.npy", np.ascontiguousarray(self.vectors, np.float32))
        write_json(folder / f"{self.name}.terms.json", self.terms())
        self.folder = folder

    @classmethod
    def read(cls, folder: Path, name: str, dim: int) -> "Segment":
        chunks = read_chunks(folder / f"{name}.chunks.jsonl")
        vectors = np.load(folder / f"{name}.vectors.npy", mmap_mode="r")
        if vectors.ndim != 2 or vectors.shape != (len(chunks), dim):
            raise ValueError(f"segment {name}: {len(chunks)} chunks but vectors of shape {vectors.shape}")
        return cls(name, chunks, vectors, folder)


def manifest_files(files: dict[str, Any]) -> set[str]:
    """Every file (or folder) a format-2 manifest's ``files`` entry names."""
    out: set[str] = set()
    for seg in files.get("segments", []):
        out.update(Segment(seg, [], np.zeros((0, 1))).files())
    out.update(v for k, v in files.items() if k != "segments" and v)
    return out


def read_manifest_files(folder: Path) -> set[str]:
    try:
        data = json.loads((folder / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    return manifest_files(data.get("files") or {})


def commit(folder: Path, manifest: dict[str, Any]) -> None:
    """Replace ``manifest.json`` atomically (temp file, fsync, rename, fsync of the folder)."""
    tmp = folder / f".manifest.json.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    fsync_file(tmp)
    os.replace(tmp, folder / MANIFEST_FILE)
    fsync_dir(folder)


def remove(folder: Path, names: Iterable[str]) -> None:
    for n in names:
        p = folder / n
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


def collect_garbage(folder: Path, keep: set[str]) -> list[str]:
    """Remove this layout's files that ``keep`` does not name (a crash's leftovers, superseded versions)."""
    gone = [p.name for p in folder.iterdir() if OWNED.match(p.name) and p.name not in keep]
    remove(folder, gone)
    if gone:
        log.debug("index %s: removed %d superseded files", folder.name, len(gone))
    return gone

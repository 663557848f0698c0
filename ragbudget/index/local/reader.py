"""Reading one committed version of a local index: format 2 (segments, see :mod:`.segments`) or format 1
(one set of files, read as a single segment and written as format 2 by the next write)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import MutableMapping

import numpy as np

from ...config import Config
from ...types import Chunk
from .dense import DenseIndex
from .manifest import Manifest
from .segments import Segment, read_chunks
from ..sparse import SparseIndex

SegmentCache = MutableMapping[tuple[str, str], Segment]


@dataclass
class Version:
    segments: list[Segment]
    dead: np.ndarray
    dense: DenseIndex
    sparse: SparseIndex
    sources: dict[str, list[str]]
    legacy: bool = False  # format 1: nothing of it is on disk as segments yet


def read_version(folder: Path, manifest: Manifest, cfg: Config, cache: SegmentCache | None = None) -> Version:
    """The files ``manifest`` names; segments already in ``cache`` (immutable) are not read again.
    Raises OSError / ValueError / KeyError / EOFError on damaged or missing files."""
    if manifest.format_version == 1:
        return _read_v1(folder, manifest, cfg)
    files, dim = manifest.files, manifest.embedding_dim
    segments = []
    for name in files.get("segments", []):
        key = (str(folder), name)
        seg = cache.get(key) if cache is not None else None
        if seg is None:
            seg = Segment.read(folder, name, dim)
            if cache is not None:
                cache[key] = seg
        segments.append(seg)
    dead = np.load(folder / files["dead"]) if files.get("dead") else np.zeros(0, np.int64)
    structure = folder / files["dense"] if files.get("dense") else None
    dense = DenseIndex.open(dim, cfg.retrieval.faiss, [s.vectors for s in segments], dead, structure)
    sparse = SparseIndex.load(folder / files["bm25"], cfg.retrieval.bm25)
    sources = json.loads((folder / files["sources"]).read_text(encoding="utf-8"))
    rows = sum(len(s) for s in segments)
    if len(sparse) != rows - len(dead) or len(dense) != rows:
        raise ValueError(f"{rows} chunks, {len(dense)} vectors, {len(sparse)} BM25 rows, {len(dead)} deleted")
    return Version(segments, dead, dense, sparse, sources)


def _read_v1(folder: Path, manifest: Manifest, cfg: Config) -> Version:
    chunks: list[Chunk] = read_chunks(folder / "chunks.jsonl")
    vectors = np.load(folder / "vectors.npy")
    terms = json.loads((folder / "bm25_tokens.json").read_text(encoding="utf-8"))
    if not (len(chunks) == len(vectors) == len(terms)):
        raise ValueError(f"{len(chunks)} chunks, {len(vectors)} vectors, {len(terms)} BM25 rows")
    seg = Segment("seg-v1", chunks, vectors.reshape(-1, manifest.embedding_dim), None, terms)
    sparse = SparseIndex(cfg.retrieval.bm25, terms)
    dense = DenseIndex(manifest.embedding_dim, cfg.retrieval.faiss, seg.vectors)
    sources = json.loads((folder / "sources.json").read_text(encoding="utf-8"))
    return Version([seg], np.zeros(0, np.int64), dense, sparse, sources, legacy=True)

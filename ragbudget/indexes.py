"""Named indexes of one configuration, loaded once and swapped atomically after an ingest.

The :class:`IndexRegistry` is what the ``RAG`` facade queries: ``get(name)`` gives the loaded index and
its retriever; ``ingest`` upserts a folder, file or records and replaces the loaded copy only when the
new one is saved, so concurrent queries see either the old index or the new one, never a half.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from .config import Config
from .embed import Embedder
from .errors import IngestError
from .index import HybridIndex, IngestReport, ProgressFn
from .index.hybrid import wait_notice
from .index.lock import index_write_lock
from .ingest.loaders import LoadReport, check_record_ids, load_jsonl_bytes
from .ingest.paths import PathPolicy
from .retrieve import HybridRetriever
from .trim import split_sentences
from .types import Chunk, Document


@dataclass
class LoadedIndex:
    index: HybridIndex
    retriever: HybridRetriever


class IndexRegistry:
    """Loads indexes by name on first use; ingests into them. Thread-safe."""

    def __init__(self, config: Config, embedder: Embedder) -> None:
        self.config = config
        self.embedder = embedder
        self._loaded: dict[str, LoadedIndex] = {}
        self._lock = threading.RLock()
        self._ingest_lock = threading.Lock()

    def get(self, name: str) -> LoadedIndex:
        with self._lock:
            got = self._loaded.get(name)
            if got is None:
                idx = HybridIndex.load(name, self.config, model_id=self.embedder.model_id)
                got = self._loaded[name] = LoadedIndex(idx, HybridRetriever(idx, self.config.retrieval, self.embedder))
            return got

    def loaded_names(self) -> list[str]:
        """Indexes held in memory now."""
        with self._lock:
            return sorted(self._loaded)

    def info(self, name: str) -> dict[str, Any]:
        loaded = self.get(name)
        return {"name": loaded.index.name, "chunks": len(loaded.index), "content_version": loaded.index.version,
                "manifest": dataclasses.asdict(loaded.index.manifest)}

    def ingest(self, source: str | os.PathLike[str] | Iterable[Mapping[str, Any] | Document], name: str, *,
               rebuild: bool = False, progress: ProgressFn | None = None,
               policy: PathPolicy | None = None) -> IngestReport:
        """Upsert a folder/file or records into index ``name``, save it atomically, then swap it in."""
        with self._ingest_lock, index_write_lock(HybridIndex.path_for(name, self.config),
                                                 self.config.index.lock_timeout_s, on_wait=wait_notice(progress)):
            idx = HybridIndex.open_or_create(name, self.config, self.embedder, rebuild=rebuild)
            before = set(idx.store.ids)
            if isinstance(source, (str, os.PathLike)):
                if not Path(source).expanduser().exists():
                    raise IngestError(f"path not found: {source}", fix="pass an existing folder or file")
                report = idx.ingest(source, self.embedder, progress=progress, policy=policy)
            else:
                docs, load = records_to_documents(source)
                report = idx.add_documents(docs, self.embedder, progress=progress, save=False)
                report.absorb(load)
                idx.save(progress=progress)
            if self.config.embedding.warm_sentences:
                self._warm_sentences([c for c in idx.store if c.id not in before], progress)
            with self._lock:
                old = self._loaded.pop(name, None)
                self._loaded[name] = LoadedIndex(idx, HybridRetriever(idx, self.config.retrieval, self.embedder))
            if old is not None:
                old.retriever.close()
            return report

    def _warm_sentences(self, chunks: list[Chunk], progress: ProgressFn | None) -> None:
        """Embed the sentences of new chunks now (into the embedding cache), so that query-time
        sentence selection finds them cached instead of running the model on the request path."""
        sents = list(dict.fromkeys(x for c in chunks for x in split_sentences(c.text)))
        step = max(self.config.embedding.batch_size * 8, 256)
        for i in range(0, len(sents), step):
            self.embedder.embed(sents[i:i + step])
            if progress:
                progress("sentences", min(i + step, len(sents)), len(sents))

    def close(self) -> None:
        with self._lock:
            for loaded in self._loaded.values():
                loaded.retriever.close()
            self._loaded.clear()


def records_to_documents(source: Iterable[Mapping[str, Any] | Document]) -> tuple[list[Document], LoadReport]:
    """Documents pass through; mappings go through the JSONL loader (same validation, same report)."""
    docs: list[Document] = []
    lines: list[str] = []
    for i, rec in enumerate(source):
        if isinstance(rec, Document):
            docs.append(rec)
        elif isinstance(rec, Mapping):
            lines.append(json.dumps(dict(rec), default=str))
        else:
            raise IngestError(f"record {i} is a {type(rec).__name__}, not a mapping",
                              fix='pass records like {"id": "...", "title": "...", "text": "..."}')
    report = LoadReport()
    if lines:
        docs += load_jsonl_bytes("\n".join(lines).encode("utf-8"), "records", report)
    docs = check_record_ids(docs)  # repeated ids: IdCollisionError listing them, never a silent replace
    if not docs:
        raise IngestError("no record had text to ingest", fix='give each record a non-empty "text" field')
    return docs, report

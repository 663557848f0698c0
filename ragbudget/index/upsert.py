"""What an upsert changes: chunk the incoming documents and diff them against the index by chunk id."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ..types import Chunk, Document
from .base import ProgressFn
from .report import IngestReport

if TYPE_CHECKING:
    from .hybrid import HybridIndex


def plan_upsert(index: "HybridIndex", docs: Sequence[Document], root: str | None, protect_sources: set[str],
                progress: ProgressFn | None) -> tuple[IngestReport, set[str], list[Chunk]]:
    """The report so far, the chunk ids to remove and the chunks to add. With ``root``, documents previously
    ingested from it and absent from ``docs`` are removed (unless their source is in ``protect_sources``);
    ``index.sources[root]`` is updated."""
    report = IngestReport(index=index.name)
    if index.manifest.chunker != index.chunker.settings() and len(index):
        report.notes.append(f"chunking settings changed ({index.manifest.chunker} → {index.chunker.settings()}): "
                            "re-ingested documents are re-chunked and re-embedded; use --rebuild to redo all")
    by_id: dict[str, Document] = {}
    for d in docs:
        if d.id in by_id:
            report.notes.append(f"duplicate document id {d.id!r} ({d.metadata.get('source')}); the last one wins")
        by_id[d.id] = d
    docs = list(by_id.values())
    report.documents = len(docs)
    new_by_doc: dict[str, list[Chunk]] = {}
    for i, d in enumerate(docs):
        new_by_doc[d.id] = index.chunker.chunk(d)
        if not new_by_doc[d.id]:
            report.skipped.append((str(d.metadata.get("source", d.id)), "document has no text to index"))
        if progress and (i % 50 == 0 or i == len(docs) - 1):
            progress("chunk", i + 1, len(docs))
    removed_docs: set[str] = set()
    if root is not None:
        gone = set(index.sources.get(root, [])) - set(new_by_doc)
        protected = {c.doc_id for c in index.store if c.doc_id in gone and c.source in protect_sources}
        removed_docs = gone - protected
        index.sources[root] = sorted(set(new_by_doc) | protected)
    replaced = set(new_by_doc) | removed_docs
    incoming = list({c.id: c for cs in new_by_doc.values() for c in cs}.values())
    incoming_ids = {c.id for c in incoming}
    old_of_replaced = {c.id for c in index.store if c.doc_id in replaced}
    report.chunks_unchanged = len(incoming_ids & old_of_replaced)
    report.chunks_added = len(incoming_ids - old_of_replaced)
    report.chunks_removed = len(old_of_replaced - incoming_ids)
    report.documents_removed = len(removed_docs & index.store.doc_ids())
    # A chunk whose id is stored but whose record changed (metadata, position) gets a new row; its
    # vector and terms are reused.
    changed = {c.id for c in incoming if c.id in index.store and c != index.store.get(c.id)}
    remove = (old_of_replaced - incoming_ids) | changed
    add = [c for c in incoming if c.id not in index.store or c.id in changed]
    return report, remove, add

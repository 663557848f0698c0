"""What an upsert changes, for every backend: chunk the incoming documents, then diff them against what is
stored by chunk id. Pure: a backend hands in its stored chunks (as :class:`StoredChunk`) and applies the plan.

A chunk whose id is stored with the same record is kept as it is; one whose record changed (metadata,
position) is removed and added again, and the backend may reuse its stored vector and terms.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from ..types import Chunk, Document
from .base import ProgressFn
from .report import IngestReport


@dataclass(frozen=True)
class StoredChunk:
    """What the planner needs of one stored chunk. ``record`` is the backend's own form of what makes two
    versions of a chunk the same row (compared with ``==`` against ``record_of(new_chunk)``)."""

    id: str
    doc_id: str
    source: str | None
    record: object


@dataclass
class UpsertPlan:
    remove: set[str] = field(default_factory=set)  # stored chunk ids to drop: gone, or their record changed
    add: list[Chunk] = field(default_factory=list)  # chunks to write; an id in ``reusable`` has a stored vector
    reusable: set[str] = field(default_factory=set)
    removed_docs: set[str] = field(default_factory=set)
    sources: list[str] | None = None  # the doc ids now under the ingested root (None: no root given)

    @property
    def empty(self) -> bool:
        return not self.remove and not self.add


def chunk_documents(docs: Sequence[Document], chunk: Callable[[Document], list[Chunk]], report: IngestReport,
                    progress: ProgressFn | None = None) -> dict[str, list[Chunk]]:
    """Each document's chunks, by document id (a repeated id: the last one wins, with a note)."""
    unique: dict[str, Document] = {}
    for d in docs:
        if d.id in unique:
            report.notes.append(f"duplicate document id {d.id!r} ({d.metadata.get('source')}); the last one wins")
        unique[d.id] = d
    report.documents = len(unique)
    out: dict[str, list[Chunk]] = {}
    for i, d in enumerate(unique.values()):
        out[d.id] = chunk(d)
        if not out[d.id]:
            report.skipped.append((str(d.metadata.get("source", d.id)), "document has no text to index"))
        if progress and (i % 50 == 0 or i == len(unique) - 1):
            progress("chunk", i + 1, len(unique))
    return out


def plan_upsert(new_by_doc: dict[str, list[Chunk]], stored: Iterable[StoredChunk], *, before: set[str],
                root: bool, protect_sources: set[str] | frozenset[str], record_of: Callable[[Chunk], object],
                report: IngestReport) -> UpsertPlan:
    """Diff ``new_by_doc`` against ``stored`` (at least every stored chunk of the incoming documents and of
    ``before``). ``before``: the documents that may go — those last ingested from the same root, or every
    stored document when the write replaces the whole index; one absent from ``new_by_doc`` is removed
    unless its source is in ``protect_sources`` (a file that failed to load this time). Fills ``report``'s
    counts."""
    stored = list(stored)
    by_id = {s.id: s for s in stored}
    gone = before - set(new_by_doc)
    protected = {s.doc_id for s in stored if s.doc_id in gone and s.source in protect_sources}
    plan = UpsertPlan(removed_docs=gone - protected)
    if root:
        plan.sources = sorted(set(new_by_doc) | protected)
    replaced = set(new_by_doc) | plan.removed_docs
    incoming = list({c.id: c for cs in new_by_doc.values() for c in cs}.values())
    incoming_ids = {c.id for c in incoming}
    old = {s.id for s in stored if s.doc_id in replaced}
    report.chunks_unchanged = len(incoming_ids & old)
    report.chunks_added = len(incoming_ids - old)
    report.chunks_removed = len(old - incoming_ids)
    report.documents_removed = len(plan.removed_docs & {s.doc_id for s in stored})
    changed = {c.id for c in incoming if c.id in by_id and by_id[c.id].record != record_of(c)}
    plan.remove = (old - incoming_ids) | changed
    plan.add = [c for c in incoming if c.id not in by_id or c.id in changed]
    plan.reusable = changed
    return plan

"""What one ingest reports (documents, chunk counts, files read/skipped/failed, timing)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ingest import LoadReport


@dataclass
class IngestReport:
    """Outcome of one ingest: documents and chunk counts, files read/skipped/failed, timing."""

    index: str
    documents: int = 0
    chunks_added: int = 0
    chunks_unchanged: int = 0
    chunks_removed: int = 0
    documents_removed: int = 0
    embedded: int = 0
    sentences_warmed: int = 0  # distinct sentences of new chunks put in the embedding cache for trimming
    files_read: int = 0
    records_read: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    content_version: str = ""

    def absorb(self, load: LoadReport) -> None:
        self.files_read += load.files_read
        self.records_read += load.records_read
        self.skipped += load.skipped
        self.failed += load.failed
        self.notes += load.notes

"""Load documents from a folder or file: .txt, .md, .html, .pdf and JSONL records.

Bad files never stop an ingest: each is skipped and listed in :class:`LoadReport` with the reason
(binary, empty, unreadable, malformed JSONL line with ``file:line``). A missing or empty folder is an
:class:`~ragbudget.errors.IngestError` that says how to fix it.

Text that is not UTF-8 is decoded by detection (charset-normalizer when installed, else cp1252, else
Latin-1) and the encoding is noted, never replaced by U+FFFD. JSONL record ids must be unique across the
files of one load: a collision is an :class:`~ragbudget.errors.IdCollisionError` listing the ids and
their files (nothing is replaced), unless ``ids="namespace"`` prefixes every record id with its file.
With a :class:`~ragbudget.ingest.paths.PathPolicy` every file is opened through it (no links, nothing
outside the root).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
import io
from typing import Any, Iterator, Literal

from bs4 import BeautifulSoup
from pypdf import PdfReader

from ..errors import IdCollisionError, IngestError, PathRefusedError
from ..kernels.safe_values import json_too_deep, unsafe_reason
from ..types import Document
from .paths import PathPolicy, SkipFile, read_bounded

try:  # optional: better guesses for legacy encodings
    from charset_normalizer import from_bytes as _detect
except ImportError:  # pragma: no cover
    _detect = None  # type: ignore[assignment]

TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".rst"}
HTML_SUFFIXES = {".html", ".htm"}
PDF_SUFFIXES = {".pdf"}
JSONL_SUFFIXES = {".jsonl"}
SUPPORTED_SUFFIXES = TEXT_SUFFIXES | HTML_SUFFIXES | PDF_SUFFIXES | JSONL_SUFFIXES
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


@dataclass
class LoadReport:
    """What a load read, skipped (with reasons) and noted (e.g. a non-UTF-8 file decoded lossily)."""

    files_read: int = 0
    records_read: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def skip(self, where: str, reason: str) -> None:
        self.skipped.append((where, reason))

    def fail(self, where: str, reason: str) -> None:
        self.failed.append((where, reason))


def _iter_files(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if not name.startswith("."):
                yield Path(dirpath) / name


def _decode(raw: bytes, where: str, report: LoadReport) -> str | None:
    """UTF-8 text, or lossy text with a note; ``None`` (skipped) for binary content."""
    if b"\x00" in raw:  # anywhere: no backend can store a NUL in text (PostgreSQL refuses it)
        report.skip(where, "binary content (NUL bytes)")
        return None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        text, enc = decode_legacy(raw)
        report.notes.append(f"{where}: not valid UTF-8 (byte {err.start}); decoded as {enc}")
        return text


def decode_legacy(raw: bytes) -> tuple[str, str]:
    """(text, encoding) for bytes that are not UTF-8: detection, then cp1252, then Latin-1 (never fails)."""
    if _detect is not None:
        best = _detect(raw).best()
        if best is not None and best.encoding and best.encoding.replace("_", "").lower() not in ("utf8", "ascii"):
            try:
                return raw.decode(best.encoding), best.encoding
            except (UnicodeDecodeError, LookupError):
                pass
    try:
        return raw.decode("cp1252"), "cp1252"
    except UnicodeDecodeError:
        return raw.decode("latin-1"), "latin-1"


def _markdown_title(text: str, fallback: str) -> str:
    m = _HEADING.search(text)
    return m.group(1).strip() if m else fallback


def load_file(path: Path, report: LoadReport, policy: PathPolicy | None = None,
              max_bytes: int | None = None) -> list[Document]:
    """Documents from one file (several for JSONL); problems go to ``report``. Regular files only, at most
    ``max_bytes`` (a FIFO, device or an oversized file is skipped with the reason, never read whole)."""
    where = str(path)
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        report.skip(where, f"unsupported file type {suffix or '(none)'}; supported: {sorted(SUPPORTED_SUFFIXES)}")
        return []
    try:
        text_file = suffix not in PDF_SUFFIXES
        raw = policy.open_bytes(path, max_bytes, text=text_file) if policy is not None else \
            read_bounded(path, max_bytes, text=text_file)
    except PathRefusedError as err:
        report.fail(where, f"refused ({err.rule})")
        return []
    except SkipFile as err:
        report.skip(where, str(err))
        return []
    except OSError as err:
        report.fail(where, f"unreadable: {err.strerror or err}")
        return []
    if not raw.strip():
        report.skip(where, "empty file")
        return []
    if suffix in JSONL_SUFFIXES:
        return load_jsonl_bytes(raw, where, report)
    if suffix in PDF_SUFFIXES:
        text, title = _pdf_text(path, raw, report)
    else:
        decoded = _decode(raw, where, report)
        if decoded is None:
            return []
        if suffix in HTML_SUFFIXES:
            soup = BeautifulSoup(decoded, "html.parser")
            title = soup.title.get_text(" ", strip=True) if soup.title else ""
            for tag in soup(["script", "style", "noscript"]):
                tag.decompose()
            body = soup.body or soup
            text = "\n".join(line.strip() for line in body.get_text("\n").splitlines() if line.strip())
            title = title or path.stem
        else:
            text, title = decoded, _markdown_title(decoded, path.stem)
    if text is None:
        return []
    if not text.strip():
        report.skip(where, "no text after extraction (empty document)")
        return []
    why = unsafe_reason(text) or unsafe_reason(title)
    if why:  # e.g. a PDF whose extracted text holds NUL
        report.skip(where, f"extracted text {why}")
        return []
    report.files_read += 1
    return [Document(id=where, text=text, metadata={"source": where, "title": title})]


def _pdf_text(path: Path, raw: bytes, report: LoadReport) -> tuple[str | None, str]:
    try:
        reader = PdfReader(io.BytesIO(raw))
        pages = [p.extract_text() or "" for p in reader.pages]
        meta_title = (reader.metadata.title if reader.metadata else None) or ""
    except Exception as err:  # pypdf raises many types for broken files
        report.fail(str(path), f"unreadable PDF: {type(err).__name__}: {err}")
        return None, ""
    return "\n\n".join(p.strip() for p in pages if p.strip()), str(meta_title) or path.stem


def load_jsonl_bytes(raw: bytes, where: str, report: LoadReport) -> list[Document]:
    """Records ``{"_id"|"id", "title", "text", ...}``; other fields become metadata."""
    text = _decode(raw, where, report)
    if text is None:
        return []
    docs: list[Document] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        loc = f"{where}:{lineno}"
        if json_too_deep(line):
            report.skip(loc, "JSON nested too deeply")
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as err:
            report.skip(loc, f"malformed JSON line ({err.msg}, column {err.colno})")
            continue
        except RecursionError:  # one deeply nested line: that line is skipped, not the ingest
            report.skip(loc, "JSON nested too deeply")
            continue
        if not isinstance(rec, dict):
            report.skip(loc, "JSONL record is not an object")
            continue
        rid = rec.get("_id", rec.get("id"))
        body = rec.get("text")
        if rid is None or not isinstance(body, str):
            report.skip(loc, "record needs an '_id' (or 'id') and a string 'text'")
            continue
        title = str(rec.get("title") or "")
        if not body.strip() and not title.strip():
            report.skip(loc, f"record {rid!r} has empty text")
            continue
        why = unsafe_reason(rec)
        if why:  # NUL, lone surrogates, NaN, Infinity, deep nesting: the same refusal on every backend
            report.skip(loc, f"record {str(rid)[:100]!r}: a value {why}")
            continue
        extra: dict[str, Any] = {k: v for k, v in rec.items() if k not in ("_id", "id", "title", "text")}
        docs.append(Document(id=str(rid), text=body,
                             metadata={**extra, "source": where, "record_id": str(rid), "title": title}))
        report.records_read += 1
    if docs:
        report.files_read += 1
    return docs


IdMode = Literal["fail", "namespace"]


def load_path(path: str | os.PathLike[str], report: LoadReport | None = None, *,
              policy: PathPolicy | None = None, ids: IdMode = "fail",
              max_bytes: int | None = None) -> tuple[list[Document], LoadReport]:
    """Every document under ``path`` (a folder, walked recursively, or one file).

    ``policy``: refuse links and anything outside its root (checked before reading, and per file).
    ``ids``: JSONL record ids that repeat (across files or in one) fail with the list (``"fail"``), or
    every record id is prefixed with its file's path relative to ``path`` (``"namespace"``)."""
    report = report or LoadReport()
    p = Path(path).expanduser()
    if not p.exists():
        raise IngestError(f"path not found: {p}", fix="pass an existing folder or file to ingest")
    if policy is not None:
        policy.scan(p)
    if p.is_file():
        return _check_ids(load_file(p, report, policy, max_bytes), p.parent, ids), report
    files = list(_iter_files(p))
    if not files:
        raise IngestError(f"folder is empty: {p}",
                          fix=f"add {', '.join(sorted(SUPPORTED_SUFFIXES))} files to it, or point at another folder")
    docs: list[Document] = []
    for f in files:
        if is_eval_file(f):
            report.skip(str(f), "evaluation file of a BEIR/answers folder (questions, not documents): "
                                 "only corpus.jsonl is ingested from a folder that has one")
            continue
        docs.extend(load_file(f, report, policy, max_bytes))
    return _check_ids(docs, p, ids), report


# Files of the evaluation layouts (DESIGN.md) that hold questions or judgments, not documents.
EVAL_FILES = re.compile(r"^(queries|questions(_[\w-]+)?)\.jsonl$")


def is_eval_file(f: Path) -> bool:
    """Whether ``f`` is the questions/queries/qrels side of an evaluation folder: one whose ``corpus.jsonl``
    sits in ``f``'s folder (or, for ``qrels/``, its parent)."""
    if f.parent.name == "qrels" and (f.parent.parent / "corpus.jsonl").is_file():
        return True
    return bool(EVAL_FILES.match(f.name)) and (f.parent / "corpus.jsonl").is_file() and f.name != "corpus.jsonl"


def check_record_ids(docs: list[Document]) -> list[Document]:
    """``docs`` when no two share an id; else :class:`IdCollisionError` listing the ids and sources."""
    return _check_ids(docs, Path("."), "fail", records_only=False)


def _check_ids(docs: list[Document], base: Path, ids: IdMode, records_only: bool = True) -> list[Document]:
    records = [d for d in docs if "record_id" in d.metadata or not records_only]
    if ids == "namespace":
        out = []
        for d in docs:
            if "record_id" in d.metadata:
                src = Path(str(d.metadata["source"]))
                rel = src.relative_to(base) if src.is_relative_to(base) else src
                d = Document(id=f"{rel.as_posix()}:{d.metadata['record_id']}", text=d.text, metadata=d.metadata)
            out.append(d)
        return out
    seen: dict[str, list[str]] = {}
    for d in records:
        loc = d.metadata.get("source", "records")
        seen.setdefault(d.id, []).append(str(loc))
    dup = {k: v for k, v in seen.items() if len(v) > 1}
    if dup:
        listed = "; ".join(f"{k!r} in {', '.join(v)}" for k, v in list(dup.items())[:10])
        more = f" (and {len(dup) - 10} more ids)" if len(dup) > 10 else ""
        raise IdCollisionError(f"{len(dup)} record id(s) occur more than once, nothing was ingested: {listed}{more}",
                               collisions=dup, fix="give records unique ids, ingest the files into separate "
                                                   "indexes, or set index.record_ids: namespace (ids become "
                                                   "FILE:ID)")
    return docs

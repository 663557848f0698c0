"""Batch answering of a JSONL file of queries, resumable after a crash.

Input lines: ``{"id": "q1", "question": "...", "mode"?: str, "index"?: str, "history"?: [{role, content}],
"max_tokens"?: int}``. Output: one JSON line per query, ``{"id", "ok": true, ...answer}`` or
``{"id", "ok": false, "error": {type, message, fix}}``, appended and flushed line by line. A rerun skips
ids already answered (``ok: true``) and retries failed ones; a torn last line (crash mid-write) is cut off.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncContextManager, Callable, Iterable, Protocol

from ..errors import AdmissionError, QueryError, RagBudgetError
from ..kernels.safe_values import json_too_deep, unsafe_reason
from ..types import Answer, Message

Progress = Callable[[int, int], None]  # (finished so far, total)
MAX_ADMISSION_RETRIES = 50


class Answers(Protocol):
    """What a batch needs from :class:`~ragbudget.pipeline.RAG`."""

    def query(self, question: str, **kw: Any) -> Answer: ...

    async def aquery(self, question: str, **kw: Any) -> Answer: ...


@dataclass(frozen=True)
class BatchItem:
    id: str
    question: str
    mode: str | None = None
    index: str | None = None
    history: tuple[Message, ...] = ()
    max_tokens: int | None = None

    def kwargs(self) -> dict[str, Any]:
        return {"mode": self.mode, "index": self.index, "history": list(self.history) or None,
                "max_tokens": self.max_tokens}


@dataclass
class BatchReport:
    total: int
    skipped: int = 0
    answered: int = 0
    failed: int = 0
    out_path: str = ""
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"total": self.total, "skipped": self.skipped, "answered": self.answered, "failed": self.failed,
                "out_path": self.out_path, "errors": self.errors[:20]}


def parse_item(obj: Any, where: str) -> BatchItem:
    if not isinstance(obj, dict):
        raise QueryError(f"{where}: expected a JSON object", fix='write {"id": "...", "question": "..."}')
    unknown = set(obj) - {"id", "question", "mode", "index", "history", "max_tokens"}
    if unknown:
        raise QueryError(f"{where}: unknown field(s) {sorted(unknown)}",
                         fix="allowed: id, question, mode, index, history, max_tokens")
    qid, q = obj.get("id"), obj.get("question")
    if not isinstance(qid, (str, int)) or isinstance(qid, bool) or str(qid) == "":
        raise QueryError(f"{where}: 'id' must be a non-empty string", fix="give every line a unique id")
    if not isinstance(q, str) or not q.strip():
        raise QueryError(f"{where}: 'question' must be a non-empty string",
                         fix='give the line a "question" with at least one word')
    why = unsafe_reason(obj)
    if why:
        raise QueryError(f"{where}: a value {why}", fix="send plain text without NUL or unpaired surrogates")
    hist = obj.get("history") or []
    if not isinstance(hist, list) or not all(
            isinstance(h, dict) and h.get("role") in ("user", "assistant", "system")
            and isinstance(h.get("content"), str) for h in hist):
        raise QueryError(f"{where}: 'history' must be a list of {{role, content}}",
                         fix='send "history": [{"role": "user", "content": "..."}] or leave it out')
    mt = obj.get("max_tokens")
    if mt is not None and (not isinstance(mt, int) or isinstance(mt, bool) or mt < 1):
        raise QueryError(f"{where}: 'max_tokens' must be a positive integer",
                         fix="send a whole number ≥ 1, or leave max_tokens out for the mode's cap")
    for key in ("mode", "index"):
        if obj.get(key) is not None and not isinstance(obj[key], str):
            raise QueryError(f"{where}: {key!r} must be a string", fix=f"send {key} as a string, or leave it out")
    return BatchItem(str(qid), q, obj.get("mode"), obj.get("index"),
                     tuple(Message(h["role"], h["content"]) for h in hist), mt)


def parse_lines(lines: Iterable[str], source: str = "input") -> list[BatchItem]:
    """Validate every line first: a bad line or duplicate id refuses the whole file (nothing half-run)."""
    items: list[BatchItem] = []
    seen: set[str] = set()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if json_too_deep(line):
            raise QueryError(f"{source} line {n}: JSON nested too deeply", fix="one flat JSON object per line")
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise QueryError(f"{source} line {n}: not valid JSON ({err.msg})", fix="one JSON object per line") from None
        except RecursionError:
            raise QueryError(f"{source} line {n}: JSON nested too deeply", fix="one flat JSON object per line") from None
        item = parse_item(obj, f"{source} line {n}")
        if item.id in seen:
            raise QueryError(f"{source} line {n}: duplicate id {item.id!r}", fix="ids must be unique")
        seen.add(item.id)
        items.append(item)
    return items


def read_batch(path: str | os.PathLike[str]) -> list[BatchItem]:
    p = Path(path)
    if not p.is_file():
        raise QueryError(f"batch input not found: {p}", fix="pass an existing JSONL file")
    with p.open(encoding="utf-8") as fh:
        return parse_lines(fh, str(p))


def done_ids(out_path: str | os.PathLike[str]) -> set[str]:
    """Ids answered in an existing output; cuts off a torn last line left by a crash."""
    p = Path(out_path)
    if not p.exists():
        return set()
    data = p.read_bytes()
    if data and not data.endswith(b"\n"):
        keep = data.rfind(b"\n") + 1
        with p.open("r+b") as fh:
            fh.truncate(keep)
        data = data[:keep]
    done: set[str] = set()
    for line in data.decode("utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and rec.get("ok") and "id" in rec:
            done.add(str(rec["id"]))
        elif isinstance(rec, dict) and "id" in rec:
            done.discard(str(rec["id"]))
    return done


def append_record(fh: Any, record: dict[str, Any]) -> None:
    """One whole line per write, flushed and fsynced, so a crash loses at most the line in flight."""
    fh.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
    fh.flush()
    os.fsync(fh.fileno())


def answer_record(item: BatchItem, answer: Answer) -> dict[str, Any]:
    d = answer.to_dict()
    d.pop("context", None)  # the chunks' full text; citations say where the answer came from
    return {"id": item.id, "ok": True, **d}


def error_record(item: BatchItem, err: Exception) -> dict[str, Any]:
    """A failed query's line (unexpected exceptions are recorded too: they are bugs, not lost lines)."""
    msg = str(err).split("\n  fix:")[0]
    fix = err.fix or "" if isinstance(err, RagBudgetError) else "unexpected error; please report it"
    return {"id": item.id, "ok": False, "question": item.question,
            "error": {"type": type(err).__name__, "message": msg, "fix": fix}}


def run_batch(rag: Answers, in_path: str | os.PathLike[str], out_path: str | os.PathLike[str],
              progress: Progress | None = None, *, tenant: str = "default") -> BatchReport:
    """Answer every query of ``in_path`` not already answered in ``out_path`` (appending to it)."""
    items = read_batch(in_path)
    done = done_ids(out_path)
    report = BatchReport(total=len(items), out_path=str(out_path))
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    with open(out_path, "a", encoding="utf-8") as fh:
        for item in items:
            if item.id in done:
                report.skipped += 1
            else:
                try:
                    append_record(fh, answer_record(item, rag.query(item.question, tenant=tenant, **item.kwargs())))
                    report.answered += 1
                except Exception as err:  # noqa: BLE001 - one bad query must not lose the rest of the batch
                    append_record(fh, error_record(item, err))
                    report.failed += 1
                    report.errors.append(f"{item.id}: {err}")
            if progress:
                progress(report.skipped + report.answered + report.failed, report.total)
    return report


async def arun_batch(rag: Answers, items: list[BatchItem], out_path: str | os.PathLike[str], *,
                     tenant: str = "default", admit: Callable[[BatchItem], AsyncContextManager[Any]] | None = None,
                     progress: Progress | None = None) -> BatchReport:
    """Async :func:`run_batch` over parsed items; ``admit(item)`` wraps each call (e.g. batch-priority
    admission). A shed request (:class:`AdmissionError`) waits its ``retry_after_s`` and tries again."""
    done = done_ids(out_path)
    report = BatchReport(total=len(items), out_path=str(out_path))
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    with open(out_path, "a", encoding="utf-8") as fh:
        for item in items:
            if item.id in done:
                report.skipped += 1
            else:
                for attempt in range(MAX_ADMISSION_RETRIES + 1):
                    try:
                        async with (admit(item) if admit else contextlib.nullcontext()) as ticket:
                            kw = item.kwargs()
                            if ticket is not None and hasattr(ticket, "degrade_level"):
                                kw["degrade_level"] = ticket.degrade_level
                            answer = await rag.aquery(item.question, tenant=tenant, **kw)
                        append_record(fh, answer_record(item, answer))
                        report.answered += 1
                        break
                    except AdmissionError as err:
                        if attempt == MAX_ADMISSION_RETRIES:
                            append_record(fh, error_record(item, err))
                            report.failed += 1
                            break
                        await asyncio.sleep(min(max(err.retry_after_s, 0.05), 5.0))
                    except Exception as err:  # noqa: BLE001 - recorded per query; the batch goes on
                        append_record(fh, error_record(item, err))
                        report.failed += 1
                        report.errors.append(f"{item.id}: {err}")
                        break
            if progress:
                progress(report.skipped + report.answered + report.failed, report.total)
    return report

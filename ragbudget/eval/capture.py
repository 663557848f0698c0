"""Traffic capture: one JSONL line per served request, in the traffic format ``ragbudget bench replay`` reads.

Opt in with ``service.capture.path``; ``service.capture.redact`` says what happens to the question:

* ``none``: the question as asked;
* ``hash``: ``"question": "sha256:<hex>"`` (and ``question_sha256``): the text cannot be read back, but
  a repeated question is still a repeat, so a replay still measures the response cache;
* ``drop``: ``"question": "[redacted <id>]"``: nothing of the text is kept (``question_tokens`` keeps its
  length); every request is distinct on replay.

Each line (see :mod:`ragbudget.eval.traffic` for the fields replay uses, :data:`CAPTURE_FIELDS` for the
rest)::

    {"id": "c1a2b3-0", "ts": 1764823000.12, "t": 0.0, "tenant": "acme", "index": "docs", "mode": "concise",
     "priority": "interactive", "question": "...", "history_len": 1, "max_tokens": 128, "stream": true,
     "redact": "none", "question_tokens": 9, "tokens": {"system": 40, "retrieved": 380, ...},
     "usage": {...}, "cache_layer": null, "route": "small", "ttft_ms": 41.2, "e2e_ms": 120.3,
     "queue_wait_ms": 0.0, "degrade_level": 0, "status": 200}

A request refused by admission is captured with ``"status": 429`` (no tokens, route or cache layer): it
is part of the load, so a replay sends it again.

Lines are written by a background thread (the request path only enqueues), one ``write`` per batch on a
file opened for appending, so several workers may share one file; :meth:`TrafficCapture.close` (app
shutdown, or interpreter exit) writes every line still queued before it returns.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import queue
import threading
import uuid
from pathlib import Path
from typing import Any, Literal

from ..types import Answer

log = logging.getLogger(__name__)
Redact = Literal["none", "hash", "drop"]
REDACT_MODES = ("none", "hash", "drop")
_STOP = object()


def redacted_question(question: str, redact: str, request_id: str) -> dict[str, Any]:
    """The question fields of a captured line under ``redact``."""
    if redact == "none":
        return {"question": question}
    digest = hashlib.sha256(question.encode("utf-8")).hexdigest()
    if redact == "hash":
        return {"question": f"sha256:{digest}", "question_sha256": digest}
    if redact == "drop":
        return {"question": f"[redacted {request_id}]"}
    raise ValueError(f"unknown redaction {redact!r}; use one of {REDACT_MODES}")


def capture_line(answer: Answer | None, *, request_id: str, ts: float, t: float, tenant: str,
                 index: str | None, mode: str | None, priority: str, history_len: int, max_tokens: int | None,
                 stream: bool, redact: str, question_tokens: int, ttft_ms: float | None, e2e_ms: float,
                 queue_wait_ms: float = 0.0, degrade_level: int = 0, question: str | None = None,
                 status: int = 200) -> dict[str, Any]:
    """The captured record of one request (a valid traffic line); ``question`` as asked (default: the
    answer's). A request refused by admission (``status`` 429, no answer) is captured too: it is part of
    the arrivals a replay must reproduce."""
    if question is None:
        if answer is None:
            raise ValueError("capture_line needs the question or the answer")
        question = answer.question
    line: dict[str, Any] = {"id": request_id, "ts": round(ts, 6), "t": round(max(0.0, t), 6), "tenant": tenant}
    if index:
        line["index"] = index
    if mode:
        line["mode"] = mode
    line.update({"priority": priority, **redacted_question(question, redact, request_id),
                 "history_len": history_len})
    if max_tokens is not None:
        line["max_tokens"] = max_tokens
    line.update({"stream": stream, "redact": redact, "question_tokens": question_tokens, "status": status})
    if answer is not None:
        u = answer.usage
        line.update({
            "tokens": {name: s.used for name, s in answer.ledger.sections.items()},
            "usage": {"prompt_tokens": u.prompt_tokens, "cached_tokens": u.cached_tokens,
                      "completion_tokens": u.completion_tokens},
            "cache_layer": answer.cache_layer, "route": answer.route})
    line.update({"ttft_ms": round(ttft_ms, 3) if ttft_ms is not None else None, "e2e_ms": round(e2e_ms, 3),
                 "queue_wait_ms": round(queue_wait_ms, 3), "degrade_level": degrade_level})
    return line


class TrafficCapture:
    """Append captured requests to ``path`` from a background thread; :meth:`record` never blocks on I/O."""

    def __init__(self, path: str | os.PathLike[str], redact: str = "none") -> None:
        if redact not in REDACT_MODES:
            raise ValueError(f"unknown redaction {redact!r}; use one of {REDACT_MODES}")
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.redact = redact
        self.written = 0
        self.dropped = 0  # lines lost to a write error (logged)
        self._prefix = uuid.uuid4().hex[:6]  # ids stay unique when several processes share the file
        self._n = 0
        self._id_lock = threading.Lock()
        self._t0: float | None = None
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._closed = False
        self._pending = 0  # queued, not yet written
        self._done = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True, name="ragbudget-capture")
        self._thread.start()
        atexit.register(self.close)

    def next_id(self) -> str:
        with self._id_lock:
            self._n += 1
            return f"{self._prefix}-{self._n - 1}"

    def record(self, answer: Answer | None, *, arrival: float, tenant: str, index: str | None = None,
               mode: str | None = None, priority: str = "interactive", history_len: int = 0,
               max_tokens: int | None = None, stream: bool = False, question_tokens: int = 0,
               ttft_ms: float | None = None, e2e_ms: float = 0.0, queue_wait_ms: float = 0.0,
               degrade_level: int = 0, question: str | None = None, status: int = 200) -> None:
        """Queue the line of a request that arrived at ``arrival`` (Unix seconds); ``answer`` None for a
        request that was refused (``status``)."""
        if self._closed:
            return
        with self._id_lock:
            if self._t0 is None:
                self._t0 = arrival
            t0 = self._t0
        line = capture_line(answer, request_id=self.next_id(), ts=arrival, t=arrival - t0, tenant=tenant,
                            index=index, mode=mode, priority=priority, history_len=history_len,
                            max_tokens=max_tokens, stream=stream, redact=self.redact,
                            question_tokens=question_tokens, ttft_ms=ttft_ms, e2e_ms=e2e_ms,
                            queue_wait_ms=queue_wait_ms, degrade_level=degrade_level, question=question,
                            status=status)
        with self._done:
            self._pending += 1
        self._queue.put(json.dumps(line, ensure_ascii=False, default=str) + "\n")

    def _run(self) -> None:
        stop = False
        while not stop:
            batch = [self._queue.get()]
            while True:  # everything already queued goes out in one write
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if _STOP in batch:
                stop = True
                batch = [b for b in batch if b is not _STOP]
            if batch:
                self._write(batch)

    def _write(self, lines: list[str]) -> None:
        data = "".join(lines).encode("utf-8")
        try:
            view = memoryview(data)
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
            self.written += len(lines)
        except OSError as err:
            self.dropped += len(lines)
            log.error("traffic capture: %d line(s) not written to %s: %s", len(lines), self.path, err)
        with self._done:
            self._pending -= len(lines)
            self._done.notify_all()

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until every line queued so far is written; False on timeout."""
        with self._done:
            return self._done.wait_for(lambda: self._pending == 0, timeout_s)

    def close(self, timeout_s: float = 10.0) -> None:
        """Write every queued line, stop the writer and close the file (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join(timeout_s)
        try:
            os.close(self._fd)
        except OSError:
            pass
        atexit.unregister(self.close)


def open_capture(path: str | None, redact: str = "none") -> TrafficCapture | None:
    """A capture for ``service.capture`` (None when no path is set)."""
    return TrafficCapture(path, redact) if path else None


__all__ = ["TrafficCapture", "capture_line", "redacted_question", "open_capture", "REDACT_MODES"]

"""Traffic files (JSONL) and a synthetic traffic generator.

One request per line::

    {"id": "r0", "t": 0.0, "tenant": "default", "priority": "interactive", "question": "...",
     "history_len": 0, "max_tokens": 128, "kind": "fresh"}

``t`` is the arrival time in seconds from the start. Lines without ``t`` get arrivals from a rate (a
``{"rate": 5}`` line anywhere in the file, or the ``rate`` argument): evenly spaced at ``1/rate``.
``history_len`` = number of earlier chat turns sent with the question (synthesised from earlier
questions of the same tenant). ``kind`` (fresh / repeat / paraphrase) is informational. ``index``, when
present, is the index the request is sent to (``bench replay --index`` overrides it); ``mode``, the
response mode it asks for.

Captured traffic (``service.capture``, :mod:`ragbudget.eval.capture`) is this format plus informational
fields the reader accepts and ignores (:data:`CAPTURE_FIELDS`: ``ts``, ``tokens``, ``cache_layer``,
``route``, ``ttft_ms``, …). When every line has ``ts`` (Unix seconds), arrivals are ``ts`` minus the first
``ts``, so files appended by several workers or server runs replay in the order they were served.

The generator draws questions from a dataset (an answers or BEIR folder, a questions JSONL or a text
file with one question per line), repeats earlier questions at ``repeat`` rate, sends paraphrases of
earlier questions at ``paraphrase`` rate (template rewrites, or label-1 MRPC pairs with ``pairs``), with
Poisson arrivals at ``rate`` per second.
"""

from __future__ import annotations

import csv
import json
import random
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..errors import IngestError
from ..types import Message

PRIORITIES = ("interactive", "batch")
KINDS = ("fresh", "repeat", "paraphrase")

# Rewrites that keep the meaning (and, on purpose, most content words).
TEMPLATES = (
    "{low}",
    "Could you tell me {low}",
    "Please, {low}",
    "{q} Thanks!",
    "Hi! {q}",
    "{bare}",
)


@dataclass(frozen=True)
class TrafficRecord:
    id: str
    t: float
    question: str
    tenant: str = "default"
    priority: str = "interactive"
    history_len: int = 0
    max_tokens: int | None = None
    kind: str = "fresh"
    index: str | None = None
    mode: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


FIELDS = ("id", "t", "question", "tenant", "priority", "history_len", "max_tokens", "kind", "index",
          "mode")
# written by the traffic capture (ragbudget.eval.capture); read, never required, and not replayed
CAPTURE_FIELDS = ("ts", "stream", "redact", "question_sha256", "question_tokens", "tokens",
                  "usage", "cache_layer", "route", "ttft_ms", "e2e_ms", "queue_wait_ms", "degrade_level", "status")


def _err(src: str, n: int, msg: str) -> IngestError:
    return IngestError(f"{src}:{n}: {msg}", fix='each line: {"t": seconds, "question": "...", '
                                                '"tenant": "...", "priority": "interactive"|"batch", '
                                                '"history_len": int, "max_tokens": int}')


def parse_record(d: Any, n: int, src: str = "traffic") -> TrafficRecord | None:
    """A validated record (None for a ``{"rate": …}`` line). ``t`` may be missing (-1 = assign later)."""
    if not isinstance(d, dict):
        raise _err(src, n, f"expected a JSON object, got {type(d).__name__}")
    if set(d) == {"rate"}:
        return None
    unknown = set(d) - set(FIELDS) - set(CAPTURE_FIELDS)
    if unknown:
        raise _err(src, n, f"unknown field(s) {sorted(unknown)}")
    q = d.get("question")
    if not isinstance(q, str) or not q.strip():
        raise _err(src, n, "missing or empty 'question'")
    t = d.get("t", -1.0)
    if not isinstance(t, (int, float)) or isinstance(t, bool) or ("t" in d and t < 0):
        raise _err(src, n, f"'t' must be seconds ≥ 0, got {t!r}")
    prio = d.get("priority", "interactive")
    if prio not in PRIORITIES:
        raise _err(src, n, f"'priority' must be one of {PRIORITIES}, got {prio!r}")
    hl = d.get("history_len", 0)
    if not isinstance(hl, int) or isinstance(hl, bool) or hl < 0:
        raise _err(src, n, f"'history_len' must be an integer ≥ 0, got {hl!r}")
    mt = d.get("max_tokens")
    if mt is not None and (not isinstance(mt, int) or isinstance(mt, bool) or mt < 1):
        raise _err(src, n, f"'max_tokens' must be an integer ≥ 1, got {mt!r}")
    kind = d.get("kind", "fresh")
    if kind not in KINDS:
        raise _err(src, n, f"'kind' must be one of {KINDS}, got {kind!r}")
    tenant = d.get("tenant", "default")
    if not isinstance(tenant, str) or not tenant:
        raise _err(src, n, f"'tenant' must be a non-empty string, got {tenant!r}")
    index = d.get("index")
    if index is not None and (not isinstance(index, str) or not index):
        raise _err(src, n, f"'index' must be a non-empty string, got {index!r}")
    mode = d.get("mode")
    if mode is not None and (not isinstance(mode, str) or not mode):
        raise _err(src, n, f"'mode' must be a non-empty string, got {mode!r}")
    ts = d.get("ts")
    if ts is not None and (not isinstance(ts, (int, float)) or isinstance(ts, bool) or ts < 0):
        raise _err(src, n, f"'ts' must be Unix seconds ≥ 0, got {ts!r}")
    return TrafficRecord(id=str(d.get("id", f"r{n}")), t=float(t), question=q, tenant=tenant, priority=prio,
                         history_len=hl, max_tokens=mt, kind=kind, index=index,
                         mode=mode)


def parse_lines(lines: Iterable[str], src: str = "traffic", rate: float | None = None) -> list[TrafficRecord]:
    recs: list[TrafficRecord] = []
    stamps: list[float | None] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError as err:
            raise _err(src, n, f"not JSON ({err.msg})") from None
        rec = parse_record(d, n, src)
        if rec is None:
            r = d["rate"]
            if not isinstance(r, (int, float)) or r <= 0:
                raise _err(src, n, f"'rate' must be a positive number, got {r!r}")
            rate = rate or float(r)
            continue
        recs.append(rec)
        stamps.append(d.get("ts"))
    if not recs:
        raise IngestError(f"{src}: no requests in the traffic file", fix="generate one: ragbudget bench traffic")
    if all(ts is not None for ts in stamps):  # captured traffic: arrivals from the wall clock
        t0 = min(stamps)  # type: ignore[type-var]
        recs = [replace(r, t=round(float(ts) - t0, 6)) for r, ts in zip(recs, stamps)]  # type: ignore[operator,arg-type]
    if any(r.t < 0 for r in recs):
        if not rate:
            raise IngestError(f"{src}: some lines have no 't' and no rate is given",
                              fix='add "t" to every line, a {"rate": N} line, or pass --rate')
        recs = [r if r.t >= 0 else TrafficRecord(**{**asdict(r), "t": i / rate}) for i, r in enumerate(recs)]
    return sorted(recs, key=lambda r: r.t)


def load_traffic(path: str | Path, rate: float | None = None) -> list[TrafficRecord]:
    """Read and validate a traffic file, ordered by arrival time."""
    p = Path(path)
    if not p.is_file():
        raise IngestError(f"traffic file not found: {p}", fix="generate one: ragbudget bench traffic DATASET --out T")
    with p.open(encoding="utf-8") as f:
        return parse_lines(f, str(p), rate)


def save_traffic(records: Sequence[TrafficRecord], path: str | Path) -> None:
    Path(path).write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records), encoding="utf-8")


def load_questions(source: str | Path) -> list[str]:
    """Questions from an answers folder, a BEIR folder, a JSONL file (``text``/``question``) or a text file."""
    p = Path(source)
    if p.is_dir():
        for name in ("questions.jsonl", "queries.jsonl"):
            if (p / name).is_file():
                return load_questions(p / name)
        raise IngestError(f"{p}: no questions.jsonl or queries.jsonl", fix="point at an answers or BEIR folder")
    if not p.is_file():
        raise IngestError(f"dataset not found: {p}", fix="pass a folder or a questions file")
    out: list[str] = []
    lines = p.read_text(encoding="utf-8").splitlines()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if p.suffix == ".jsonl":
            try:
                d = json.loads(line)
            except json.JSONDecodeError as err:
                raise IngestError(f"{p}:{n}: not JSON ({err.msg})") from None
            q = d.get("text") or d.get("question") if isinstance(d, dict) else None
            if isinstance(q, str) and q.strip():
                out.append(q.strip())
        else:
            out.append(line.strip())
    if not out:
        raise IngestError(f"{p}: no questions found")
    return out


def load_pairs(path: str | Path) -> list[tuple[str, str]]:
    """Label-1 (same meaning) pairs of a ``label text_a text_b`` TSV (MRPC)."""
    out = []
    with open(path, encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            if row.get("label") == "1" and row.get("text_a") and row.get("text_b"):
                out.append((row["text_a"].strip(), row["text_b"].strip()))
    if not out:
        raise IngestError(f"{path}: no label-1 pairs", fix="expects a TSV with header 'label text_a text_b'")
    return out


def paraphrase(q: str, rng: random.Random) -> str:
    """A template rewrite of ``q`` that keeps its meaning (and is a different string)."""
    low = q[:1].lower() + q[1:]
    bare = q.rstrip(" ?.!").lower()
    for _ in range(10):
        out = rng.choice(TEMPLATES).format(q=q, low=low, bare=bare)
        if out != q:
            return out
    return q + " Thanks!"


def generate(questions: Sequence[str], n: int, *, rate: float = 2.0, repeat: float = 0.2,
             paraphrase_rate: float = 0.1, seed: int = 0, tenants: Sequence[str] = ("default",),
             batch_share: float = 0.0, history_max: int = 0, max_tokens: int | None = None,
             pairs: Sequence[tuple[str, str]] | None = None) -> list[TrafficRecord]:
    """``n`` requests with Poisson arrivals at ``rate``/s; each is a repeat of an earlier question with
    probability ``repeat``, a paraphrase of one with ``paraphrase_rate``, else a fresh question (in a
    seeded random order; with ``pairs`` fresh questions are text_a and paraphrases their text_b)."""
    if n < 1 or rate <= 0:
        raise IngestError(f"need n ≥ 1 and rate > 0 (got n={n}, rate={rate})")
    if not (0 <= repeat <= 1 and 0 <= paraphrase_rate <= 1 and repeat + paraphrase_rate <= 1):
        raise IngestError(f"repeat ({repeat}) and paraphrase ({paraphrase_rate}) rates must be in [0, 1] "
                          "and add up to at most 1")
    rng = random.Random(seed)
    pool = [a for a, _ in pairs] if pairs else list(questions)
    if not pool:
        raise IngestError("no questions to draw traffic from")
    twin = dict(pairs) if pairs else {}
    rng.shuffle(pool)
    fresh = iter(pool)
    seen: list[str] = []
    out: list[TrafficRecord] = []
    t = 0.0
    for i in range(n):
        t += rng.expovariate(rate)
        u = rng.random()
        kind = "repeat" if seen and u < repeat else "paraphrase" if seen and u < repeat + paraphrase_rate else "fresh"
        if kind == "fresh":
            q = next(fresh, None)
            if q is None:  # pool exhausted: everything else is a repeat
                kind, q = "repeat", rng.choice(seen)
            else:
                seen.append(q)
        elif kind == "repeat":
            q = rng.choice(seen)
        else:
            src = rng.choice(seen)
            q = twin.get(src) or paraphrase(src, rng)
        out.append(TrafficRecord(
            id=f"r{i}", t=round(t, 4), question=q, tenant=tenants[i % len(tenants)],
            priority="batch" if rng.random() < batch_share else "interactive",
            history_len=rng.randint(0, history_max) if history_max else 0, max_tokens=max_tokens, kind=kind))
    return out


def history_for(records: Sequence[TrafficRecord], i: int) -> list[Message]:
    """``history_len`` earlier turns for request ``i``: earlier questions of its tenant with short replies."""
    rec = records[i]
    if rec.history_len == 0:
        return []
    earlier = [r.question for r in records[:i] if r.tenant == rec.tenant][-rec.history_len:]
    while len(earlier) < rec.history_len:  # not enough past: reuse the question's own words
        earlier.insert(0, f"Earlier: {rec.question}")
    msgs: list[Message] = []
    for q in earlier:
        msgs += [Message("user", q), Message("assistant", "Noted; see the cited documents.")]
    return msgs


__all__ = ["TrafficRecord", "FIELDS", "CAPTURE_FIELDS",
           "load_traffic", "save_traffic", "parse_lines", "load_questions", "load_pairs",
           "paraphrase", "generate", "history_for", "TEMPLATES"]

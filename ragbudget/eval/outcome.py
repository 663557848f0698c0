"""Whether a replay or an A/B run did its work: the causes of failed requests, an early stop when every
request fails, and a check, before any model loads, that the indexes the traffic names exist.

A load test may legitimately be refused (429, admission) or cut at its deadline (408); any other failed
request means the run did not measure what it was asked to, so the command exits non-zero naming why."""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Protocol, Sequence

from ..errors import IndexNotFoundError

# statuses that are load outcomes rather than failures of the run
LOAD_STATUSES = frozenset({429, 408})
# stop scheduling after this many answered-or-failed requests when none succeeded
ABORT_AFTER = 20


class _Result(Protocol):
    status: int
    error: str | None

    @property
    def ok(self) -> bool: ...


class _Lister(Protocol):
    index_name: str

    def list_indexes(self) -> list[str]: ...


def failures(results: Iterable[_Result]) -> list[_Result]:
    """Requests that failed for a reason other than load (admission 429, replay deadline 408)."""
    return [r for r in results if not r.ok and r.status not in LOAD_STATUSES]


def error_causes(results: Iterable[_Result], top: int = 5) -> list[dict[str, Any]]:
    """The most frequent distinct errors, ``[{"status", "count", "error"}]``, most frequent first."""
    c = Counter((r.status, (r.error or "").strip()[:300]) for r in results if not r.ok)
    return [{"status": s, "count": n, "error": e} for (s, e), n in c.most_common(top)]


def all_failing(results: Sequence[_Result], after: int = ABORT_AFTER) -> bool:
    """True once ``after`` requests have finished and every one failed (not a load refusal): the run
    cannot measure anything, so it stops rather than send the rest of its schedule."""
    return len(results) >= after and not any(r.ok or r.status in LOAD_STATUSES for r in results)


def check_indexes(rag: _Lister, names: Iterable[str | None]) -> None:
    """:class:`IndexNotFoundError` naming the indexes that requests would go to and that do not exist
    (``None`` is the RAG's default index)."""
    wanted = sorted({n or rag.index_name for n in names})
    have = set(rag.list_indexes())
    missing = [n for n in wanted if n not in have]
    if missing:
        listed = ", ".join(sorted(have)) or "none"
        raise IndexNotFoundError(
            f"the traffic goes to index {', '.join(map(repr, missing))}, which does not exist "
            f"(indexes here: {listed})",
            fix="build it first (`ragbudget ingest DOCS --index NAME`), pass `--index NAME` to send every "
                "request to an existing index, or (bench compare) `--ingest DOCS` to build a fresh one per config")


__all__ = ["ABORT_AFTER", "LOAD_STATUSES", "all_failing", "check_indexes", "error_causes", "failures"]

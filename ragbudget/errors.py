"""One exception tree for ragbudget.

::

    RagBudgetError                      base; every error ragbudget raises on purpose
    ├── ConfigError                     a bad configuration value (names the key)
    │   └── BudgetConfigError           impossible budget settings, caught at config time
    ├── ModelNotFoundError              a configured local model path that does not exist
    ├── IngestError                     a document or folder that cannot be ingested
    │   ├── PathRefusedError            a path outside the allowed root, or a symlink (HTTP 403)
    │   └── IdCollisionError            records of several files share ids (nothing replaced)
    ├── IndexError_                     index problems (exported as ``IndexError`` is avoided)
    │   ├── IndexNotFoundError          no index of that name
    │   ├── IndexMismatchError          built with another embedding model / format
    │   ├── IndexBusyError              another process is writing the index (waited too long)
    │   └── IndexUnavailableError       the index's database cannot be reached (HTTP 503 + Retry-After)
    ├── QueryError                      an empty or unusable query
    ├── BudgetError                     a request that cannot fit its budget (strict mode)
    │   └── QuestionTooLongError        a question over the one question limit (HTTP 413)
    ├── GenerationError                 a generation backend failed
    │   ├── BackendUnavailableError     unreachable, circuit open, wrong model name
    │   ├── GenerationTimeoutError      no token within the timeout
    │   └── PartialGenerationError      the stream broke mid-answer
    ├── RoutingError                    no tier can take the request (e.g. prompt over every window)
    ├── CacheError                      a cache backend failed (callers degrade, never crash)
    └── AdmissionError                  rejected by rate limits / load shedding (HTTP 429)

Every error carries a human message that says what went wrong, where, and the fix.
"""

from __future__ import annotations


class RagBudgetError(Exception):
    """Base class of all ragbudget errors."""

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        self.fix = fix
        super().__init__(message if not fix else f"{message}\n  fix: {fix}")


class ConfigError(RagBudgetError):
    """A configuration value is invalid; the message names the key."""


class BudgetConfigError(ConfigError):
    """Budget sections cannot fit the window, or a cap is impossible."""


class ModelNotFoundError(RagBudgetError):
    """A configured model path is not present locally (nothing is downloaded)."""


class IngestError(RagBudgetError):
    """A path or record cannot be ingested."""


class PathRefusedError(IngestError):
    """A path the ingest may not read: outside the allowed root, or a symbolic link. ``rule`` names it."""

    def __init__(self, message: str, *, rule: str, fix: str | None = None) -> None:
        self.rule = rule
        super().__init__(message, fix=fix)


class IdCollisionError(IngestError):
    """Records from different files (or one file) share an id; ``collisions`` maps id → sources."""

    def __init__(self, message: str, *, collisions: dict[str, list[str]], fix: str | None = None) -> None:
        self.collisions = collisions
        super().__init__(message, fix=fix)


class IndexError_(RagBudgetError):
    """Base of index errors (trailing underscore: do not shadow the builtin)."""


class IndexNotFoundError(IndexError_):
    """No index with that name exists."""


class IndexMismatchError(IndexError_):
    """The index on disk was built with other settings (embedding model, format)."""


class IndexBusyError(IndexError_):
    """Another process holds the index's writer lock (an ingest in progress)."""


class IndexUnavailableError(IndexError_):
    """The index's store cannot be reached right now (database down, connection lost, timeout, disk full).
    Transient: the service answers 503 with ``Retry-After: retry_after_s``; nothing half-written is served."""

    def __init__(self, message: str, *, retry_after_s: float = 5.0, fix: str | None = None) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message, fix=fix)


class QueryError(RagBudgetError):
    """A query is empty or cannot be searched."""


class BudgetError(RagBudgetError):
    """A request does not fit its budget and strict mode forbids truncation."""


class QuestionTooLongError(BudgetError):
    """The question is over the question limit (:func:`ragbudget.config.question_limit`); never cut."""

    def __init__(self, message: str, *, limit: int, tokens: int, setting: str, fix: str | None = None) -> None:
        self.limit, self.tokens, self.setting = limit, tokens, setting
        super().__init__(message, fix=fix)


class GenerationError(RagBudgetError):
    """A generation backend failed."""


class BackendUnavailableError(GenerationError):
    """The backend cannot be reached, its circuit is open, or the model is unknown."""


class GenerationTimeoutError(GenerationError):
    """The backend produced nothing within its timeout."""


class PartialGenerationError(GenerationError):
    """The stream ended before the answer was complete."""

    def __init__(self, message: str, *, partial_text: str = "", fix: str | None = None) -> None:
        self.partial_text = partial_text
        super().__init__(message, fix=fix)


class RoutingError(RagBudgetError):
    """No configured tier can serve the request."""


class CacheError(RagBudgetError):
    """A cache backend failed; callers serve without that layer."""


class AdmissionError(RagBudgetError):
    """The request was rejected by admission control."""

    def __init__(self, message: str, *, retry_after_s: float = 1.0, fix: str | None = None) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message, fix=fix)

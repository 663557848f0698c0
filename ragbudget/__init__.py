"""ragbudget: RAG with explicit token budgets, layered caches, prefix-friendly prompts and routing.

``from ragbudget import RAG`` is the way in; the names below are the curated public API.
"""

from typing import TYPE_CHECKING, Any

from .config import Config, dump_config, load_config
from .errors import (AdmissionError, BackendUnavailableError, BudgetConfigError, BudgetError, CacheError,
                     ConfigError, GenerationError, IndexBusyError, IndexMismatchError, IndexNotFoundError,
                     IngestError,
                     ModelNotFoundError, PartialGenerationError, QueryError, RagBudgetError, RoutingError)
from .types import (Allocation, Answer, Chunk, Citation, Document, FinalEvent, Generation, Ledger, Message,
                    ProgressEvent, Prompt, Scored, SectionLedger, Timings, TokenEvent, Usage)

__all__ = [
    "RAG", "Config", "load_config", "dump_config",
    "Allocation", "Answer", "Chunk", "Citation", "Document", "FinalEvent", "Generation", "Ledger", "Message",
    "ProgressEvent", "Prompt", "Scored", "SectionLedger", "Timings", "TokenEvent", "Usage",
    "RagBudgetError", "ConfigError", "BudgetConfigError", "ModelNotFoundError", "IngestError",
    "IndexNotFoundError", "IndexMismatchError", "IndexBusyError", "QueryError", "BudgetError", "GenerationError",
    "BackendUnavailableError", "PartialGenerationError", "RoutingError", "CacheError", "AdmissionError",
]
__version__ = "0.1.0"

if TYPE_CHECKING:
    from .pipeline import RAG


def __getattr__(name: str) -> Any:
    """``RAG`` is imported on first use, so ``import ragbudget.config`` (and ``ragbudget --help``) does not
    load the whole pipeline (torch, llama-index, faiss)."""
    if name == "RAG":
        from .pipeline import RAG

        return RAG
    raise AttributeError(f"module 'ragbudget' has no attribute {name!r}")

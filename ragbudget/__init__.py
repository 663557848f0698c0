"""ragbudget: RAG with explicit token budgets, layered caches, prefix-friendly prompts and routing.

``from ragbudget import RAG`` is the way in; the names below are the curated public API.
"""

from .config import Config, dump_config, load_config
from .errors import (AdmissionError, BackendUnavailableError, BudgetConfigError, BudgetError, CacheError,
                     ConfigError, GenerationError, IndexBusyError, IndexMismatchError, IndexNotFoundError,
                     IngestError,
                     ModelNotFoundError, PartialGenerationError, QueryError, RagBudgetError, RoutingError)
from .pipeline import RAG
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

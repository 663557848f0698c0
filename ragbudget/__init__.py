"""ragbudget: RAG with explicit token budgets, layered caches, prefix-friendly prompts and routing."""

from .config import Config, load_config
from .errors import RagBudgetError
from .types import Answer, Chunk, Citation, Document, Ledger, Message, Scored, Usage

__all__ = ["Answer", "Chunk", "Citation", "Config", "Document", "Ledger", "Message", "RagBudgetError",
           "Scored", "Usage", "load_config"]
__version__ = "0.1.0"

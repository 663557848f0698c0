"""Index: chunk store, FAISS dense, BM25 sparse, manifest, and the atomically saved HybridIndex."""

from .local.dense import DenseIndex
from .local.backend import ingest_path
from .local.hybrid import HybridIndex, IngestReport, ProgressFn, default_embedder, list_indexes
from .local.manifest import FORMAT_VERSION, Manifest, content_version
from .sparse import Analyzer, SparseIndex
from .store import ChunkStore

__all__ = ["Analyzer", "ChunkStore", "DenseIndex", "FORMAT_VERSION", "HybridIndex", "IngestReport", "Manifest",
           "ProgressFn", "SparseIndex", "content_version", "default_embedder", "ingest_path", "list_indexes"]

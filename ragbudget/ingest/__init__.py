"""Ingestion: loaders (files, JSONL records) and token-aware chunking with content-hash ids."""

from .chunking import Chunker, chunk_id, document_text
from .loaders import SUPPORTED_SUFFIXES, LoadReport, load_file, load_path

__all__ = ["Chunker", "LoadReport", "SUPPORTED_SUFFIXES", "chunk_id", "document_text", "load_file", "load_path"]

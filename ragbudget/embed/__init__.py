"""Embedding models: the sentence-transformers encoder with its cache, and query micro-batching."""

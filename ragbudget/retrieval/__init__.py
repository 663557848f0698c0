"""Retrieval mechanisms: hybrid search, score fusion, reranking, the registry of loaded indexes."""

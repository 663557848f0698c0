"""The local index backend: FAISS + BM25 segments on disk, saved atomically."""

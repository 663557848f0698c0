"""The PostgreSQL backend: pgvector + full-text search, snapshot reads, versioned writes."""

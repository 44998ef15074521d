"""The vector tables: one pgvector table per embedding model, their ANN indexes (HNSW or IVFFlat) kept fit for
their size, and the dense leg."""

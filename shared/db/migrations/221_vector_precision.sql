-- Vector precision (issue 14): each vector index records how its vectors are stored, `single` (pgvector
-- `vector`, 4 bytes a dimension) or `half` (`halfvec`, 2 bytes a dimension). Every index from before this
-- migration was built as `vector(dim)`: `single`. New indexes take EVIDENTIA_DATABASE_VECTOR_PRECISION
-- (services.retriever.store.create_index); `evidentia reindex` moves a store to the configured precision.
ALTER TABLE vector_indexes ADD COLUMN IF NOT EXISTS precision text NOT NULL DEFAULT 'single'
    CHECK (precision IN ('half', 'single'));

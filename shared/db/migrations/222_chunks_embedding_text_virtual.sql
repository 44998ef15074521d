-- chunks.embedding_text ("Document: {title}\nSection: {section}\n\n{content}", what is embedded and what a
-- reranker reads) is computed from the row instead of stored (issue 14: ~0.6-1 KB a chunk, the same text
-- twice). A PostgreSQL 18 VIRTUAL generated column: readers select it as before, writers no longer send it.
-- The layout is services/parser/chunking.py's embedding_text(), which the chunker uses to count the prefix's
-- tokens; tests/integration/test_embedding_text_column.py holds the two to the same text.
ALTER TABLE chunks DROP COLUMN embedding_text;
ALTER TABLE chunks ADD COLUMN embedding_text text GENERATED ALWAYS AS (
    'Document: ' || doc_title
    || CASE WHEN section IS NULL THEN '' ELSE E'\nSection: ' || section END
    || E'\n\n' || content) VIRTUAL;

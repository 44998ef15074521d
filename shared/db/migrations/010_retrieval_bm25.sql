-- Okapi BM25 in the store (the retriever's lexical search), as plain SQL over term statistics.
--
-- The embedded PostgreSQL carries no BM25 extension (no pg_search / pg_textsearch / vchord_bm25), and
-- ts_rank_cd is not BM25 (no IDF, no length normalisation worth the name). So each chunk's terms are kept
-- as postings: the lexemes of the chunk's weighted tsvector (the same 'english' analysis as chunks.tsv:
-- Snowball stemming, stop words removed), with the term frequency split by field (A title, B section,
-- C text) so the retriever can weight fields at query time (BM25F-style) without re-indexing. Document
-- frequencies are counted from the postings at query time; N and the average length come from
-- bm25_chunk_len. Triggers keep both tables in step with chunks; deleting a chunk cascades.
-- (Numbered 010 to stay clear of migrations other services add concurrently; numbers may have gaps.)

CREATE TABLE bm25_postings (
    term      text NOT NULL,
    chunk_id  text NOT NULL REFERENCES chunks (chunk_id) ON DELETE CASCADE,
    tf_title    smallint NOT NULL DEFAULT 0,
    tf_section  smallint NOT NULL DEFAULT 0,
    tf_text     smallint NOT NULL DEFAULT 0,
    PRIMARY KEY (term, chunk_id)
);
CREATE INDEX bm25_postings_chunk_idx ON bm25_postings (chunk_id);

CREATE TABLE bm25_chunk_len (
    chunk_id     text PRIMARY KEY REFERENCES chunks (chunk_id) ON DELETE CASCADE,
    len_title    integer NOT NULL,
    len_section  integer NOT NULL,
    len_text     integer NOT NULL
);

CREATE FUNCTION bm25_index_chunk(p_chunk_id text, p_tsv tsvector) RETURNS void
LANGUAGE sql AS $$
    DELETE FROM bm25_postings WHERE chunk_id = p_chunk_id;
    DELETE FROM bm25_chunk_len WHERE chunk_id = p_chunk_id;
    INSERT INTO bm25_postings (term, chunk_id, tf_title, tf_section, tf_text)
    SELECT t.lexeme, p_chunk_id,
           count(*) FILTER (WHERE w = 'A'), count(*) FILTER (WHERE w = 'B'),
           count(*) FILTER (WHERE w NOT IN ('A', 'B'))
    FROM unnest(p_tsv) AS t, unnest(t.weights) AS w
    GROUP BY t.lexeme;
    INSERT INTO bm25_chunk_len (chunk_id, len_title, len_section, len_text)
    SELECT p_chunk_id,
           count(*) FILTER (WHERE w = 'A'), count(*) FILTER (WHERE w = 'B'),
           count(*) FILTER (WHERE w NOT IN ('A', 'B'))
    FROM unnest(p_tsv) AS t, unnest(t.weights) AS w;
$$;

CREATE FUNCTION bm25_chunks_trigger() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM bm25_index_chunk(NEW.chunk_id, NEW.tsv);
    RETURN NULL;
END
$$;

CREATE TRIGGER chunks_bm25_insert AFTER INSERT ON chunks
    FOR EACH ROW EXECUTE FUNCTION bm25_chunks_trigger();
CREATE TRIGGER chunks_bm25_update AFTER UPDATE OF doc_title, section, content ON chunks
    FOR EACH ROW EXECUTE FUNCTION bm25_chunks_trigger();

-- Chunks stored before this migration.
SELECT bm25_index_chunk(chunk_id, tsv) FROM chunks;

-- MeSH tree numbers (optional data): with rows here, a MeSH filter also matches every descendant of a
-- descriptor (tree numbers below any of its tree numbers). Empty by default: the MeSH tree (NLM's
-- desc*.xml) is not bundled, and then a MeSH filter matches the named descriptors only.
CREATE TABLE mesh_tree (
    descriptor   text NOT NULL,
    tree_number  text NOT NULL,
    PRIMARY KEY (tree_number)
);
CREATE INDEX mesh_tree_descriptor_idx ON mesh_tree (lower(descriptor));
CREATE INDEX mesh_tree_prefix_idx ON mesh_tree (tree_number text_pattern_ops);

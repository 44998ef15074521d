-- TRUNCATE fires no DELETE trigger: without this, `TRUNCATE chunks` (or `TRUNCATE documents CASCADE`) left the
-- lexical index's chunk rows, postings and document frequencies behind, and the next insert of a chunk with a
-- former id failed on bm25_chunks' unique key. Emptying the chunks empties the lexical index with them.
CREATE FUNCTION bm25_chunks_truncated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(4542054, 14);  -- the one writer of the lexical statistics (bm25_add)
    TRUNCATE bm25_impacts, bm25_chunks;
    UPDATE bm25_terms SET df = 0 WHERE df <> 0;
    RETURN NULL;
END
$$;

CREATE TRIGGER chunks_bm25_truncated AFTER TRUNCATE ON chunks
    FOR EACH STATEMENT EXECUTE FUNCTION bm25_chunks_truncated();

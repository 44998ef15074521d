-- Bulk loads (issue 34): the lexical index of a bulk load's chunks is built set-wise after the load instead of
-- by the insert trigger, statement by statement.
--
-- A transaction that sets `evidentia.lexical = 'deferred'` (SET LOCAL; services/retriever/bulk_store.py) inserts
-- chunks without indexing them: they have no `bm25_chunks` row, so lexical search does not see them (BM25 over
-- the chunks indexed so far: N, df and the mean lengths are those of the indexed set), until
-- `bm25_index_deferred` indexes them, a batch a transaction. Every other writer (the parser's live path) is
-- indexed by the trigger as before.
--
-- bm25_remove now removes only chunks that are indexed: deleting or rewriting a chunk still waiting for its
-- postings must not lower the df of terms it never added (the update trigger then indexes the new text at
-- once, and the deferred build skips it: it has its row).

CREATE OR REPLACE FUNCTION bm25_chunks_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('evidentia.lexical', true) = 'deferred' THEN
        RETURN NULL;
    END IF;
    PERFORM bm25_add(array_agg(chunk_id), array_agg(chunk_tsvector(doc_title, section, content))) FROM bm25_new;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION bm25_remove(p_ids text[], p_tsvs tsvector[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    ids  text[];
    tsvs tsvector[];
BEGIN
    IF coalesce(cardinality(p_ids), 0) = 0 THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(4542054, 14);  -- see bm25_add
    SELECT array_agg(n.id), array_agg(n.tsv) INTO ids, tsvs
    FROM unnest(p_ids, p_tsvs) AS n(id, tsv)
    WHERE EXISTS (SELECT 1 FROM bm25_chunks b WHERE b.chunk_id = n.id);
    IF ids IS NULL THEN
        RETURN;
    END IF;
    UPDATE bm25_terms t SET df = greatest(t.df - d.n, 0)
    FROM (SELECT x.lexeme, count(*) AS n FROM unnest(tsvs) AS n(tsv), unnest(n.tsv) AS x GROUP BY x.lexeme) d
    WHERE t.term = d.lexeme;
    INSERT INTO bm25_pending (term_id, has_dead)
    SELECT DISTINCT t.term_id, true FROM unnest(tsvs) AS n(tsv), unnest(n.tsv) AS x JOIN bm25_terms t ON t.term = x.lexeme
    ON CONFLICT (term_id) DO UPDATE SET has_dead = true;
    INSERT INTO bm25_dead (chunk_key) SELECT chunk_key FROM bm25_chunks WHERE chunk_id = ANY (ids)
    ON CONFLICT DO NOTHING;
    DELETE FROM bm25_chunks WHERE chunk_id = ANY (ids);
END
$$;

-- Index up to p_limit chunks that have no postings yet (a deferred load's), in chunk id order after p_after:
-- the last chunk id indexed and how many (NULL and 0 when none was left). One call, one set-wise bm25_add: a
-- block per term for the whole batch (the compaction merges them as it merges the live path's).
CREATE OR REPLACE FUNCTION bm25_index_deferred(p_after text, p_limit integer, OUT last_id text, OUT indexed integer)
LANGUAGE plpgsql AS $$
DECLARE
    batch text[];
BEGIN
    SELECT array_agg(chunk_id ORDER BY chunk_id) INTO batch
    FROM (SELECT c.chunk_id FROM chunks c
          WHERE c.chunk_id > p_after
            AND NOT EXISTS (SELECT 1 FROM bm25_chunks b WHERE b.chunk_id = c.chunk_id)
          ORDER BY c.chunk_id LIMIT p_limit) s;
    indexed := coalesce(cardinality(batch), 0);
    IF indexed = 0 THEN
        RETURN;
    END IF;
    PERFORM bm25_add(array_agg(c.chunk_id), array_agg(chunk_tsvector(c.doc_title, c.section, c.content)))
    FROM chunks c WHERE c.chunk_id = ANY (batch);
    last_id := batch[indexed];
END
$$;

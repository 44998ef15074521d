-- BM25 over packed posting blocks (issue 14): 11 bytes a posting instead of a ~100-byte row + index entries.
--
-- Migration 100 stored one row per (term, chunk) with a covering B-tree: ~10 KB a chunk, and an exact query
-- walked sum(df) index tuples (0.8-2 s at 100k chunks). Here a term's postings live in a few `bytea` blocks:
--   bm25_blocks   (term_id, block_id) -> the block's key range (min_key, max_key) and n postings in key
--                 order, each 11 bytes: chunk_key int4 (big-endian), tf_text,
--                 tf_title, tf_section (one byte each, at most 255), len_text (two bytes, at most 65535),
--                 len_title, len_section (one byte each, at most 255): the chunk's field lengths ride along,
--                 so scoring needs no join; BM25 saturates long before a term's 255th occurrence. Stored
--                 uncompressed (STORAGE EXTERNAL): pglz would cost more to inflate at query time than it saves.
--   bm25_terms    (kept) term id and document frequency, maintained on write;
--   bm25_chunks   (kept) chunk key and field lengths: N and the mean lengths, and key -> chunk id;
--   bm25_pending  terms with small blocks to merge or postings of removed chunks to drop;
--   bm25_dead     keys of removed chunks whose postings may still sit in blocks (a query skips them).
-- A write (statement-level triggers on chunks, one set-based pass per statement) appends one block per term
-- for the statement's chunks; removing a chunk marks its key dead and its terms pending. The retriever's
-- compaction (services/retriever/lexical_store.py `compact`) merges a term's small blocks size-tiered and
-- drops dead postings; queries are exact whether or not it has run. The retriever reads a query's blocks
-- and computes BM25F with numpy (exact, any k1/b/field weights at query time).
--
-- chunks.tsv and its GIN index go: they were read only by `EVIDENTIA_RETRIEVAL_LEXICAL=fts` (removed) and to
-- feed the index; the analysis now has one owner, chunk_tsvector() below (2-3 KB a chunk saved).

CREATE FUNCTION chunk_tsvector(p_title text, p_section text, p_content text) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT setweight(to_tsvector('english', coalesce(p_title, '')), 'A') ||
           setweight(to_tsvector('english', coalesce(p_section, '')), 'B') ||
           setweight(to_tsvector('english', coalesce(p_content, '')), 'C')
$$;

DROP TRIGGER chunks_bm25_inserted ON chunks;
DROP TRIGGER chunks_bm25_deleted ON chunks;
DROP TRIGGER chunks_bm25_updated ON chunks;
DROP TRIGGER chunks_bm25_truncated ON chunks;
DROP FUNCTION bm25_chunks_inserted();
DROP FUNCTION bm25_chunks_deleted();
DROP FUNCTION bm25_chunks_updated();
DROP FUNCTION bm25_chunks_truncated();
DROP FUNCTION bm25_add(text[], tsvector[]);
DROP FUNCTION bm25_remove(text[], tsvector[]);
DROP FUNCTION bm25_reimpact(real, real);
DROP FUNCTION bm25_impact(integer, integer, real, real, real);
DROP TABLE bm25_impacts;
DROP TABLE bm25_config;

CREATE TABLE bm25_blocks (
    term_id   integer NOT NULL,
    block_id  bigint GENERATED ALWAYS AS IDENTITY,
    n         integer NOT NULL CHECK (n > 0),
    min_key   integer NOT NULL,   -- the block's postings are in chunk-key order, between these two keys:
    max_key   integer NOT NULL,   -- dropping a removed chunk's postings rewrites only the blocks it falls in
    postings  bytea NOT NULL,
    PRIMARY KEY (term_id, block_id)
);
ALTER TABLE bm25_blocks ALTER COLUMN postings SET STORAGE EXTERNAL;

CREATE TABLE bm25_pending (
    term_id   integer PRIMARY KEY,
    has_dead  boolean NOT NULL DEFAULT false   -- a removed chunk's posting may sit in any of its blocks
);
CREATE TABLE bm25_dead (chunk_key integer PRIMARY KEY);

-- Index chunks (ids and tsvectors, element-wise): new terms get ids, df grows, one block per term is appended.
CREATE FUNCTION bm25_add(p_ids text[], p_tsvs tsvector[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(cardinality(p_ids), 0) = 0 THEN
        RETURN;
    END IF;
    -- One writer of the lexical statistics at a time, until its transaction ends: df rows are hot (every
    -- document touches the common terms) and a transaction indexes its chunks statement by statement, so
    -- row locks alone would deadlock two writers that take the same terms in different statements.
    PERFORM pg_advisory_xact_lock(4542054, 14);
    INSERT INTO bm25_terms (term)
    SELECT DISTINCT x.lexeme
    FROM unnest(p_tsvs) AS n(tsv), unnest(n.tsv) AS x
    WHERE NOT EXISTS (SELECT 1 FROM bm25_terms t WHERE t.term = x.lexeme)
    ORDER BY 1
    ON CONFLICT (term) DO NOTHING;
    UPDATE bm25_terms t SET df = t.df + d.n
    FROM (SELECT x.lexeme, count(*) AS n FROM unnest(p_tsvs) AS n(tsv), unnest(n.tsv) AS x GROUP BY x.lexeme) d
    WHERE t.term = d.lexeme;
    INSERT INTO bm25_chunks (chunk_id, len_title, len_section, len_text)
    SELECT n.id,
           count(w) FILTER (WHERE w = 'A'), count(w) FILTER (WHERE w = 'B'),
           count(w) FILTER (WHERE w NOT IN ('A', 'B'))
    FROM unnest(p_ids, p_tsvs) AS n(id, tsv)
         LEFT JOIN LATERAL (SELECT w FROM unnest(n.tsv) AS x, unnest(x.weights) AS w) AS ws ON true
    GROUP BY n.id;
    WITH p AS (
        SELECT n.id, x.lexeme,
               count(*) FILTER (WHERE w NOT IN ('A', 'B'))::integer AS tf_text,
               count(*) FILTER (WHERE w = 'A')::integer AS tf_title,
               count(*) FILTER (WHERE w = 'B')::integer AS tf_section
        FROM unnest(p_ids, p_tsvs) AS n(id, tsv), unnest(n.tsv) AS x, unnest(x.weights) AS w
        GROUP BY n.id, x.lexeme),
    added AS (
        INSERT INTO bm25_blocks (term_id, n, min_key, max_key, postings)
        SELECT t.term_id, count(*), min(c.chunk_key), max(c.chunk_key),
               string_agg(int4send(c.chunk_key)
                          || set_byte('\x00'::bytea, 0, least(p.tf_text, 255))
                          || set_byte('\x00'::bytea, 0, least(p.tf_title, 255))
                          || set_byte('\x00'::bytea, 0, least(p.tf_section, 255))
                          || substring(int4send(least(c.len_text, 65535)) FROM 3 FOR 2)
                          || set_byte('\x00'::bytea, 0, least(c.len_title, 255))
                          || set_byte('\x00'::bytea, 0, least(c.len_section, 255)),
                          ''::bytea ORDER BY c.chunk_key)
        FROM p
        JOIN bm25_chunks c ON c.chunk_id = p.id
        JOIN bm25_terms t ON t.term = p.lexeme
        GROUP BY t.term_id
        RETURNING term_id)
    INSERT INTO bm25_pending (term_id) SELECT term_id FROM added ON CONFLICT DO NOTHING;
END
$$;

-- Un-index chunks: df shrinks, the length rows go, their keys are marked dead and their terms pending (the
-- postings leave the blocks at the next compaction; queries skip dead keys until then). Terms whose df
-- reaches 0 stay (ids are never reused); a query skips them.
CREATE FUNCTION bm25_remove(p_ids text[], p_tsvs tsvector[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(cardinality(p_ids), 0) = 0 THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(4542054, 14);  -- see bm25_add
    UPDATE bm25_terms t SET df = greatest(t.df - d.n, 0)
    FROM (SELECT x.lexeme, count(*) AS n FROM unnest(p_tsvs) AS n(tsv), unnest(n.tsv) AS x GROUP BY x.lexeme) d
    WHERE t.term = d.lexeme;
    INSERT INTO bm25_pending (term_id, has_dead)
    SELECT DISTINCT t.term_id, true FROM unnest(p_tsvs) AS n(tsv), unnest(n.tsv) AS x JOIN bm25_terms t ON t.term = x.lexeme
    ON CONFLICT (term_id) DO UPDATE SET has_dead = true;
    INSERT INTO bm25_dead (chunk_key) SELECT chunk_key FROM bm25_chunks WHERE chunk_id = ANY (p_ids)
    ON CONFLICT DO NOTHING;
    DELETE FROM bm25_chunks WHERE chunk_id = ANY (p_ids);
END
$$;

CREATE FUNCTION bm25_chunks_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM bm25_add(array_agg(chunk_id), array_agg(chunk_tsvector(doc_title, section, content))) FROM bm25_new;
    RETURN NULL;
END
$$;

CREATE FUNCTION bm25_chunks_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM bm25_remove(array_agg(chunk_id), array_agg(chunk_tsvector(doc_title, section, content))) FROM bm25_old;
    RETURN NULL;
END
$$;

-- Only rows whose id or analysed text (title, section, content) changed are re-indexed.
CREATE FUNCTION bm25_chunks_updated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM bm25_remove(array_agg(o.chunk_id), array_agg(chunk_tsvector(o.doc_title, o.section, o.content)))
    FROM bm25_old o
    WHERE NOT EXISTS (SELECT 1 FROM bm25_new n WHERE n.chunk_id = o.chunk_id AND n.content = o.content
                      AND n.doc_title IS NOT DISTINCT FROM o.doc_title AND n.section IS NOT DISTINCT FROM o.section);
    PERFORM bm25_add(array_agg(n.chunk_id), array_agg(chunk_tsvector(n.doc_title, n.section, n.content)))
    FROM bm25_new n
    WHERE NOT EXISTS (SELECT 1 FROM bm25_old o WHERE o.chunk_id = n.chunk_id AND o.content = n.content
                      AND o.doc_title IS NOT DISTINCT FROM n.doc_title AND o.section IS NOT DISTINCT FROM n.section);
    RETURN NULL;
END
$$;

-- TRUNCATE fires no DELETE trigger: emptying the chunks empties the lexical index with them (migration 101).
CREATE FUNCTION bm25_chunks_truncated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(4542054, 14);
    TRUNCATE bm25_blocks, bm25_chunks, bm25_pending, bm25_dead;
    UPDATE bm25_terms SET df = 0 WHERE df <> 0;
    RETURN NULL;
END
$$;

CREATE TRIGGER chunks_bm25_inserted AFTER INSERT ON chunks
    REFERENCING NEW TABLE AS bm25_new FOR EACH STATEMENT EXECUTE FUNCTION bm25_chunks_inserted();
CREATE TRIGGER chunks_bm25_deleted AFTER DELETE ON chunks
    REFERENCING OLD TABLE AS bm25_old FOR EACH STATEMENT EXECUTE FUNCTION bm25_chunks_deleted();
CREATE TRIGGER chunks_bm25_updated AFTER UPDATE ON chunks
    REFERENCING OLD TABLE AS bm25_old NEW TABLE AS bm25_new FOR EACH STATEMENT EXECUTE FUNCTION bm25_chunks_updated();
CREATE TRIGGER chunks_bm25_truncated AFTER TRUNCATE ON chunks
    FOR EACH STATEMENT EXECUTE FUNCTION bm25_chunks_truncated();

-- The index is derived data: rebuilt here from every stored chunk, in batches (a large store never builds
-- one huge array); chunk keys are issued afresh.
TRUNCATE bm25_chunks;
UPDATE bm25_terms SET df = 0 WHERE df <> 0;
DO $$
DECLARE
    last_id text := '';
    batch   text[];
BEGIN
    LOOP
        SELECT array_agg(chunk_id ORDER BY chunk_id) INTO batch
        FROM (SELECT chunk_id FROM chunks WHERE chunk_id > last_id ORDER BY chunk_id LIMIT 5000) s;
        EXIT WHEN batch IS NULL;
        PERFORM bm25_add(array_agg(c.chunk_id), array_agg(chunk_tsvector(c.doc_title, c.section, c.content)))
        FROM chunks c WHERE c.chunk_id = ANY (batch);
        last_id := batch[cardinality(batch)];
    END LOOP;
END
$$;

DROP INDEX chunks_tsv_idx;
ALTER TABLE chunks DROP COLUMN tsv;

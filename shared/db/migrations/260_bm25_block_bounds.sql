-- Score bounds of the lexical index's posting blocks, for search that skips what cannot reach the top k.
--
-- Each block keeps, beside its postings, the largest term frequency and the smallest length of each field over
-- them (the fields as packed: frequencies capped at 255, len_text at 65535). A posting's BM25F contribution grows
-- with its weighted frequency and shrinks with its weighted length, so these bound every posting of the block for
-- whatever k1, b, field weights and mean length a search uses; a bound stored as a score would go stale as the
-- mean length drifts with each write. A removal leaves a block's bounds as they were (loose, never too low);
-- compaction writes merged and cleaned blocks with fresh ones (services/retriever/engine/lexical/blocks.py,
-- `encode_block`, the encoder of every block written outside this function).
--
-- Blocks written before this migration have NULL bounds: a search takes them as unbounded (never skipped) and
-- the retriever's compaction fills them in from the postings (`bound_blocks`).

ALTER TABLE bm25_blocks
    ADD COLUMN max_tf_text    smallint,
    ADD COLUMN max_tf_title   smallint,
    ADD COLUMN max_tf_section smallint,
    ADD COLUMN min_len_text   integer,
    ADD COLUMN min_len_title  smallint,
    ADD COLUMN min_len_section smallint;

-- Index chunks (ids and tsvectors, element-wise): as migration 220's, each new block with its bounds.
CREATE OR REPLACE FUNCTION bm25_add(p_ids text[], p_tsvs tsvector[]) RETURNS void
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
        INSERT INTO bm25_blocks (term_id, n, min_key, max_key, max_tf_text, max_tf_title, max_tf_section,
                                 min_len_text, min_len_title, min_len_section, postings)
        SELECT t.term_id, count(*), min(c.chunk_key), max(c.chunk_key),
               max(least(p.tf_text, 255)), max(least(p.tf_title, 255)), max(least(p.tf_section, 255)),
               min(least(c.len_text, 65535)), min(least(c.len_title, 255)), min(least(c.len_section, 255)),
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


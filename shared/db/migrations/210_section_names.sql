-- The section names a chunk's section path answers to, for the `sections` search filter (issue 19).
-- A chunk's `section` is its title path as the parser writes it ("Results", "Methods > Statistical analysis",
-- "Book > Chapter > Section"). Its names: each part of the path, split also where one heading joins two
-- ("Materials and Methods", "Results & Discussion", "Conclusions/Significance"); lower-cased, without a
-- leading number ("3.", "2.1", "IV.") and without a final plural "s" or trailing punctuation, so "Conclusion",
-- "CONCLUSIONS" and "4. Conclusions." all read "conclusion". The requested names go through the same function:
-- a chunk matches when the two sets share a name. One owner for the rule: the retriever calls this function.
CREATE FUNCTION section_names(path text) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(DISTINCT name ORDER BY name), '{}')
    FROM (
        SELECT regexp_replace(
                   regexp_replace(lower(btrim(part)), '^([0-9]+(\.[0-9]+)*\.?|[ivx]+\.)\s*', ''),
                   's?[[:space:][:punct:]]*$', '') AS name
        FROM regexp_split_to_table(path, '\s+>\s+|\s+(and|&)\s+|\s*/\s*', 'i') AS part
    ) parts
    WHERE name <> ''
$$;

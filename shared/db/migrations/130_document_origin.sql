-- Provenance (issue #15): where a stored document came from. 'ncbi': parsed from an NCBI record (E-utilities,
-- a PubMed baseline file, PMC JATS, Bookshelf NXML); 'inline': a document given inline (POST /v1/ingest
-- `documents`, the JSON-lines import). An inline document never replaces an NCBI record (the gateway answers
-- 409, the parser refuses it), and a later NCBI fetch of the same id replaces an inline one.
-- Rows stored before this migration are taken as NCBI records (the safe side: nothing inline may replace them).
ALTER TABLE documents ADD COLUMN IF NOT EXISTS origin text NOT NULL DEFAULT 'ncbi';
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'documents_origin_check') THEN
        ALTER TABLE documents ADD CONSTRAINT documents_origin_check CHECK (origin IN ('ncbi', 'inline'));
    END IF;
END $$;

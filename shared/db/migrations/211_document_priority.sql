-- Document priority (seed 003; issue 19): 0 = excluded from search, 10 = low, 50 = normal (default), 100 = high.
-- Chunks do not store it: searches read it from their document (a change never touches the chunks table).
-- A constant default adds the column without rewriting the table.
ALTER TABLE documents ADD COLUMN IF NOT EXISTS priority smallint NOT NULL DEFAULT 50
    CONSTRAINT documents_priority_range CHECK (priority BETWEEN 0 AND 100);
CREATE INDEX IF NOT EXISTS documents_priority_idx ON documents (priority);

-- The priority an ingestion job gives its documents (`POST /v1/ingest` "priority", kept in the job's params);
-- NULL when the job gave none.
CREATE FUNCTION ingest_job_priority(job text) RETURNS smallint
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN params->>'priority' ~ '^[0-9]{1,3}$' THEN least((params->>'priority')::int, 100)::smallint END
    FROM ingest_jobs WHERE job_id = job
$$;

-- A document attached to a job that is already stored (a PMID ingested before, not fetched again) takes the
-- job's priority now; one stored later takes it when the parser stores it (services/parser/store.py).
CREATE FUNCTION ingest_job_document_priority() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    p smallint := ingest_job_priority(NEW.job_id);
BEGIN
    IF p IS NOT NULL THEN
        UPDATE documents SET priority = p WHERE document_id = NEW.document_id AND priority <> p;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER ingest_job_documents_priority AFTER INSERT ON ingest_job_documents
    FOR EACH ROW EXECUTE FUNCTION ingest_job_document_priority();

-- Issue 40: a job's priority (migration 211) reaches a document already stored only when the job may change
-- stored documents' priority, which PATCH /v1/documents/{id} reserves for the `admin` scope: its params carry
-- "priority_stored": true (the gateway sets it for an `admin` key, `evidentia ingest --jsonl` for the operator).
-- Otherwise the priority applies to the documents the job creates. One rule for both ways a job's priority is
-- applied: this trigger (documents attached to the job) and the parser's store (documents stored for it).
CREATE FUNCTION ingest_job_priority(job text, document text) RETURNS smallint
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT ingest_job_priority(job)
    WHERE coalesce((SELECT params->>'priority_stored' = 'true' FROM ingest_jobs WHERE job_id = job), false)
       OR NOT EXISTS (SELECT 1 FROM documents WHERE document_id = document)
$$;

CREATE OR REPLACE FUNCTION ingest_job_document_priority() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    p smallint := ingest_job_priority(NEW.job_id, NEW.document_id);
BEGIN
    IF p IS NOT NULL THEN
        UPDATE documents SET priority = p WHERE document_id = NEW.document_id AND priority <> p;
    END IF;
    RETURN NULL;
END
$$;

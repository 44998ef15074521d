-- A change feed on documents, for readers that hold documents' filter columns in memory (the retriever's doc
-- values, services/retriever/doc_values_store.py). Every insert, update or delete of documents adds one row a
-- document, tagged with the writing transaction's id; a TRUNCATE adds one row with no document (read it as
-- "everything changed"). A reader keeps the oldest transaction still running when it last read
-- (pg_snapshot_xmin) and reads again every row at or past it: a transaction below that horizon had finished,
-- so its rows were seen; one at or past it may commit later and is read again until the horizon passes it.
-- Rows are pruned by age; `document_changes_pruned.below` is the newest pruned transaction id, and a reader whose
-- horizon is not past it reloads everything.
CREATE TABLE IF NOT EXISTS document_changes (
    xid         xid8 NOT NULL DEFAULT pg_current_xact_id(),
    document_id text,
    changed_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS document_changes_xid_idx ON document_changes (xid);
CREATE INDEX IF NOT EXISTS document_changes_changed_at_idx ON document_changes (changed_at);

CREATE TABLE IF NOT EXISTS document_changes_pruned (
    one   boolean PRIMARY KEY DEFAULT true CHECK (one),
    below xid8 NOT NULL
);

-- One function for the three statement-level triggers: each names its transition table `changed`.
CREATE OR REPLACE FUNCTION document_changes_logged() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO document_changes (document_id) SELECT DISTINCT document_id FROM changed;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION document_changes_truncated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO document_changes (document_id) VALUES (NULL);
    RETURN NULL;
END
$$;

CREATE TRIGGER documents_changes_inserted AFTER INSERT ON documents
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION document_changes_logged();
CREATE TRIGGER documents_changes_updated AFTER UPDATE ON documents
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION document_changes_logged();
CREATE TRIGGER documents_changes_deleted AFTER DELETE ON documents
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION document_changes_logged();
CREATE TRIGGER documents_changes_truncated AFTER TRUNCATE ON documents
    FOR EACH STATEMENT EXECUTE FUNCTION document_changes_truncated();

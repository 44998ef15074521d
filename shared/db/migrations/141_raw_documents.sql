-- Issue #16: claim check for large documents. A fetched document over EVIDENTIA_KAFKA_CLAIM_CHECK_BYTES
-- is stored here once (keyed by the SHA-256 of its text) and its documents.fetched event carries
-- content_ref instead of the text, so a big JATS article or Bookshelf NXML never exceeds Kafka's
-- message size. Rows nobody refers to any more are removed by the parser after it stored the document
-- (see shared/claimcheck.py); an old row is harmless.
CREATE TABLE IF NOT EXISTS raw_documents (
    ref          text        PRIMARY KEY,
    document_id  text        NOT NULL,
    bytes        integer     NOT NULL,
    content      text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS raw_documents_document_idx ON raw_documents (document_id);

-- Clinical workflows (gateway): cached results with a time to live (disease terms, search terms, PubMed
-- hit counts, query rewrites). A row past expires_at is treated as absent and overwritten on the next put.
CREATE TABLE IF NOT EXISTS workflow_cache (
    namespace   text        NOT NULL,
    key         text        NOT NULL,
    value       jsonb       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (namespace, key)
);
CREATE INDEX IF NOT EXISTS workflow_cache_expires_idx ON workflow_cache (expires_at);

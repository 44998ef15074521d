-- Issue #16: long work split into events. A job's discovery may be split into tasks (one per Bookshelf
-- package, one for the PubMed search) handled by separate events; the job is `discovered` only once
-- every task is finished, so it cannot look done while a package is still to be read.
CREATE TABLE IF NOT EXISTS ingest_job_tasks (
    job_id      text        NOT NULL REFERENCES ingest_jobs (job_id) ON DELETE CASCADE,
    task_id     text        NOT NULL,
    state       text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'done', 'failed')),
    error       text,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, task_id)
);

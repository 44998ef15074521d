-- Issue 40 (14): which approximate index the vector table should have, as the newest retriever configuration
-- decided it (services/retriever/ann_index_store.py). During a rolling deploy old and new retrievers hold two
-- EVIDENTIA_DATABASE_VECTOR_INDEX settings; each builds only what this row says, so the index is built once for
-- the newer setting instead of back and forth. `since`: when the newest retriever holding `method` began
-- maintaining (database time); `confirmed_at`: the last time one holding it ran. A retriever with another setting
-- takes the decision over when it began later than `since`, or when no retriever has confirmed the decision for a
-- few maintenance intervals (the retrievers holding it have gone).
CREATE TABLE IF NOT EXISTS vector_index_decision (
    one          boolean     PRIMARY KEY DEFAULT true CHECK (one),
    method       text        NOT NULL CHECK (method IN ('hnsw', 'ivfflat')),
    since        timestamptz NOT NULL,
    confirmed_at timestamptz NOT NULL
);

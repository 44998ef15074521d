-- Issue #16: `evidentia dlq replay` and POST /v1/admin/dlq/{topic}/replay record each dead letter they sent
-- back, so one is not replayed twice by accident (a forced replay counts up `times`).
CREATE TABLE IF NOT EXISTS dead_letter_replays (
    dlq_topic      text        NOT NULL,
    dlq_partition  integer     NOT NULL,
    dlq_offset     bigint      NOT NULL,
    topic          text        NOT NULL,
    times          integer     NOT NULL DEFAULT 1,
    replayed_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (dlq_topic, dlq_partition, dlq_offset)
);

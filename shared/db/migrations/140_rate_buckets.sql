-- Issue #16: one NCBI rate limit for the whole cluster. Every fetcher replica reserves its E-utilities
-- calls from the same token bucket row (services/fetcher/ratelimit.py, PgTokenBucket); the row lock
-- serialises reservations and the database clock (clock_timestamp()) is the one clock they share.
CREATE TABLE IF NOT EXISTS rate_buckets (
    name        text             PRIMARY KEY,
    tokens      double precision NOT NULL,
    updated_at  timestamptz      NOT NULL DEFAULT clock_timestamp()
);

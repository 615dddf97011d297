-- Rate limits' buckets kept in the database (issue #28), where several emulators share it (PostgreSQL) and
-- so one cloud's buckets: a token bucket's mark is its theoretical arrival time (Unix microseconds, GCRA) and
-- calls is 1 when its last call took a token; a fixed window's mark is the window's number and calls what it
-- counted in it. One emulator alone keeps its buckets in memory and leaves this table empty.
CREATE TABLE rate_buckets (
    limit_id TEXT NOT NULL,
    key      TEXT NOT NULL,                 -- all, or the caller's role (per-token limits)
    mark     INTEGER NOT NULL,
    calls    INTEGER NOT NULL,
    PRIMARY KEY (limit_id, key)
);

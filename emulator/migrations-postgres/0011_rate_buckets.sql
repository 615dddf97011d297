-- ../migrations/0011_rate_buckets.sql on PostgreSQL.
CREATE TABLE rate_buckets (
    limit_id TEXT NOT NULL,
    key      TEXT NOT NULL,
    mark     BIGINT NOT NULL,
    calls    BIGINT NOT NULL,
    PRIMARY KEY (limit_id, key)
);

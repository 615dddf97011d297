-- ../migrations/0005_hangs.sql on PostgreSQL.
CREATE TABLE hangs (
    instance_id TEXT PRIMARY KEY NOT NULL,
    since BIGINT NOT NULL
);

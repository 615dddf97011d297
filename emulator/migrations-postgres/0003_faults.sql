-- ../migrations/0003_faults.sql on PostgreSQL.

CREATE TABLE faults (
    kind        TEXT NOT NULL,
    id          TEXT NOT NULL,
    position    BIGINT NOT NULL,
    spec        TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (kind, id)
);

ALTER TABLE audit_log ADD COLUMN fault TEXT;

ALTER TABLE instances ADD COLUMN interruption_at BIGINT;
ALTER TABLE instances ADD COLUMN state_reason TEXT;

-- ../migrations/0012_shared_state.sql on PostgreSQL.
CREATE TABLE fault_counts (
    kind      TEXT NOT NULL,
    id        TEXT NOT NULL,
    matched   BIGINT NOT NULL,
    injected  BIGINT NOT NULL,
    fired     BIGINT NOT NULL,
    PRIMARY KEY (kind, id)
);

CREATE TABLE lagging (
    id        TEXT PRIMARY KEY,
    until_ms  BIGINT NOT NULL,
    previous  TEXT
);

CREATE TABLE lb_views (
    lb_id  TEXT PRIMARY KEY,
    view   TEXT NOT NULL
);

-- ../migrations/0016_elbv2.sql on PostgreSQL.
CREATE TABLE elbv2_load_balancers (
    lb_id            TEXT PRIMARY KEY,
    -- The 16 hex digits of its ARN.
    arn_id           TEXT NOT NULL UNIQUE,
    ip_address_type  TEXT NOT NULL,
    -- A JSON list of subnet IDs; a JSON object of its attributes. (Its security groups: 0014's link.)
    subnets          TEXT NOT NULL,
    attributes       TEXT NOT NULL
);

CREATE TABLE elbv2_target_groups (
    -- `tg-` and the 16 hex digits of its ARN.
    id           TEXT PRIMARY KEY,
    name         TEXT NOT NULL UNIQUE,
    protocol     TEXT NOT NULL,
    port         BIGINT NOT NULL,
    vpc_id       TEXT NOT NULL,
    -- JSON: the health check's settings, the attributes, the targets (each with its port and, while it drains,
    -- when it is gone).
    health_check TEXT NOT NULL,
    attributes   TEXT NOT NULL,
    targets      TEXT NOT NULL,
    created_at   BIGINT NOT NULL
);

CREATE TABLE elbv2_listeners (
    -- `lst-` and the 16 hex digits of its ARN.
    id               TEXT PRIMARY KEY,
    lb_id            TEXT NOT NULL,
    protocol         TEXT NOT NULL,
    port             BIGINT NOT NULL,
    target_group_id  TEXT NOT NULL,
    created_at       BIGINT NOT NULL,
    UNIQUE (lb_id, port)
);
CREATE INDEX elbv2_listeners_by_target_group ON elbv2_listeners (target_group_id);

-- Elastic Load Balancing v2's network load balancers (the AWS face): what AWS has and the native model lacks.
-- An NLB is one row of `load_balancers` (its listeners, backends and health check are recomputed from the
-- tables below in the transaction of each change); these rows say which native rows are NLBs and hold the
-- rest. A load balancer's rows go in the transaction that deletes it; target groups live on their own, as AWS's.
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
    port         INTEGER NOT NULL,
    vpc_id       TEXT NOT NULL,
    -- JSON: the health check's settings, the attributes, the targets (each with its port and, while it drains,
    -- when it is gone).
    health_check TEXT NOT NULL,
    attributes   TEXT NOT NULL,
    targets      TEXT NOT NULL,
    created_at   INTEGER NOT NULL
);

CREATE TABLE elbv2_listeners (
    -- `lst-` and the 16 hex digits of its ARN.
    id               TEXT PRIMARY KEY,
    lb_id            TEXT NOT NULL,
    protocol         TEXT NOT NULL,
    port             INTEGER NOT NULL,
    target_group_id  TEXT NOT NULL,
    created_at       INTEGER NOT NULL,
    UNIQUE (lb_id, port)
);
CREATE INDEX elbv2_listeners_by_target_group ON elbv2_listeners (target_group_id);

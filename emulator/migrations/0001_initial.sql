-- fakecloud's state. Times are Unix milliseconds. A resource whose state changes on a timer keeps
-- `next_state`/`next_state_at`: reads show the next state as soon as it is due, and a background task writes it.

CREATE TABLE instances (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,  -- page order
    id             TEXT NOT NULL UNIQUE,
    name           TEXT NOT NULL,
    zone           TEXT NOT NULL,
    instance_type  TEXT NOT NULL,
    market         TEXT NOT NULL,
    state          TEXT NOT NULL,
    next_state     TEXT,
    next_state_at  INTEGER,
    private_ip     TEXT NOT NULL,
    tags           TEXT NOT NULL,                      -- JSON object
    created_at     INTEGER NOT NULL,
    state_changed_at INTEGER NOT NULL
);
-- Names are node names: unique among instances that are not terminated.
CREATE UNIQUE INDEX instances_live_name ON instances(name) WHERE state <> 'terminated';
CREATE INDEX instances_due ON instances(next_state_at) WHERE next_state_at IS NOT NULL;
CREATE INDEX instances_zone ON instances(zone);

-- Every IP handed out, per pool (a zone subnet, the internal LB subnet, the public pool, or `external` for
-- adopted machines outside the VPC). The primary key is what makes double allocation impossible.
CREATE TABLE ip_leases (
    pool   TEXT NOT NULL,
    ip     INTEGER NOT NULL,                           -- offset from the pool's network address (v4) or 0 (external)
    addr   TEXT NOT NULL,
    owner  TEXT NOT NULL,
    PRIMARY KEY (pool, ip, addr)
);
CREATE UNIQUE INDEX ip_leases_addr ON ip_leases(addr);
CREATE INDEX ip_leases_owner ON ip_leases(owner);

CREATE TABLE route_tables (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    id          TEXT NOT NULL UNIQUE,
    name        TEXT NOT NULL UNIQUE,
    main        INTEGER NOT NULL DEFAULT 0,
    created_at  INTEGER NOT NULL
);

CREATE TABLE routes (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    id              TEXT NOT NULL UNIQUE,
    route_table_id  TEXT NOT NULL REFERENCES route_tables(id) ON DELETE CASCADE,
    name            TEXT NOT NULL,
    destination     TEXT NOT NULL,
    target_instance TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    UNIQUE (route_table_id, destination)
);
CREATE INDEX routes_table ON routes(route_table_id);

CREATE TABLE load_balancers (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    id             TEXT NOT NULL UNIQUE,
    name           TEXT NOT NULL,
    scheme         TEXT NOT NULL,
    state          TEXT NOT NULL,
    next_state     TEXT,                               -- 'active', or 'deleted' (the row goes away)
    next_state_at  INTEGER,
    listeners      TEXT NOT NULL,                      -- JSON
    backends       TEXT NOT NULL,                      -- JSON
    health_check   TEXT,                               -- JSON
    source_ranges  TEXT NOT NULL,                      -- JSON
    requested_ip   TEXT,
    address        TEXT NOT NULL,                      -- reserved at create, shown once active
    dns_name       TEXT NOT NULL,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
);
CREATE UNIQUE INDEX load_balancers_live_name ON load_balancers(name) WHERE state <> 'deleting';
CREATE INDEX load_balancers_due ON load_balancers(next_state_at) WHERE next_state_at IS NOT NULL;

CREATE TABLE quotas (
    name   TEXT PRIMARY KEY,
    limit_value INTEGER NOT NULL
);

-- A create's client token and what it made, so a retry returns the original.
CREATE TABLE idempotency_keys (
    operation     TEXT NOT NULL,
    key           TEXT NOT NULL,
    request       TEXT NOT NULL,                       -- canonical JSON of the original request
    resource_id   TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    PRIMARY KEY (operation, key)
);

CREATE TABLE audit_log (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    time         INTEGER NOT NULL,
    request_id   TEXT NOT NULL,
    role         TEXT NOT NULL,
    operation    TEXT NOT NULL,
    method       TEXT NOT NULL,
    path         TEXT NOT NULL,
    resource_id  TEXT,
    status       INTEGER NOT NULL,
    error_code   TEXT,
    latency_us   INTEGER NOT NULL
);
CREATE INDEX audit_operation ON audit_log(operation);
CREATE INDEX audit_resource ON audit_log(resource_id);
CREATE INDEX audit_time ON audit_log(time);

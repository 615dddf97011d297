-- What several emulators sharing a database (PostgreSQL) must count and see as one cloud (issue #28); one
-- emulator alone keeps these in memory and leaves these tables empty.

-- A fault rule's counts (kind 'rule': the calls it matched, the faults it injected, whether the last match
-- fired), so `skip` and `times` count every replica's calls; a rate limit's refusals (kind 'rate_limit':
-- injected).
CREATE TABLE fault_counts (
    kind      TEXT NOT NULL,
    id        TEXT NOT NULL,
    matched   INTEGER NOT NULL,
    injected  INTEGER NOT NULL,
    fired     INTEGER NOT NULL,
    PRIMARY KEY (kind, id)
);

-- Eventual consistency: until `until_ms`, reads of `id` see `previous` (JSON), or nothing when it is NULL
-- (a creation), on whichever replica they reach. The counter 'lag_until' holds the latest `until_ms`, read with
-- the faults' generation, so a replica reads this table only while something lags.
CREATE TABLE lagging (
    id        TEXT PRIMARY KEY,
    until_ms  INTEGER NOT NULL,
    previous  TEXT
);

-- The load balancers' data plane as the one replica serving it shows it (listeners' states, backends' health,
-- as JSON), for a GET through any other; the counter 'lb_views_at' says when it last published.
CREATE TABLE lb_views (
    lb_id  TEXT PRIMARY KEY,
    view   TEXT NOT NULL
);

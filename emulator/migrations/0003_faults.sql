-- Fault injection: rules, rate limits and outages (their specs as JSON), the fault that shaped each audited
-- call, and spot interruptions.

CREATE TABLE faults (
    kind        TEXT NOT NULL,                        -- rule | rate_limit | outage
    id          TEXT NOT NULL,
    position    INTEGER NOT NULL,                     -- order of rules: first match wins
    spec        TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (kind, id)
);

ALTER TABLE audit_log ADD COLUMN fault TEXT;

-- A reclaimed spot instance: shown `stopping` from `interruption_at`, terminated at `next_state_at`.
ALTER TABLE instances ADD COLUMN interruption_at INTEGER;
ALTER TABLE instances ADD COLUMN state_reason TEXT;

-- Quota usage kept by triggers, so a quota check is one lookup instead of a scan, and can never disagree with
-- the rows (the triggers run inside the same transaction as the write).

CREATE TABLE counters (
    key  TEXT PRIMARY KEY,
    n    INTEGER NOT NULL
) WITHOUT ROWID;

INSERT INTO counters (key, n) SELECT 'instances_live', COUNT(*) FROM instances WHERE state <> 'terminated';
INSERT INTO counters (key, n) SELECT 'lbs_live', COUNT(*) FROM load_balancers WHERE state <> 'deleting';
INSERT INTO counters (key, n) SELECT 'lbs_public', COUNT(*) FROM load_balancers WHERE scheme = 'internet-facing';

CREATE TRIGGER instances_count_ins AFTER INSERT ON instances WHEN NEW.state <> 'terminated'
BEGIN UPDATE counters SET n = n + 1 WHERE key = 'instances_live'; END;
CREATE TRIGGER instances_count_upd AFTER UPDATE OF state ON instances
    WHEN (OLD.state = 'terminated') <> (NEW.state = 'terminated')
BEGIN UPDATE counters SET n = n + (CASE WHEN NEW.state = 'terminated' THEN -1 ELSE 1 END) WHERE key = 'instances_live'; END;
CREATE TRIGGER instances_count_del AFTER DELETE ON instances WHEN OLD.state <> 'terminated'
BEGIN UPDATE counters SET n = n - 1 WHERE key = 'instances_live'; END;

CREATE TRIGGER lbs_count_ins AFTER INSERT ON load_balancers
BEGIN
    UPDATE counters SET n = n + 1 WHERE key = 'lbs_live' AND NEW.state <> 'deleting';
    UPDATE counters SET n = n + 1 WHERE key = 'lbs_public' AND NEW.scheme = 'internet-facing';
END;
CREATE TRIGGER lbs_count_upd AFTER UPDATE OF state ON load_balancers
    WHEN (OLD.state = 'deleting') <> (NEW.state = 'deleting')
BEGIN UPDATE counters SET n = n + (CASE WHEN NEW.state = 'deleting' THEN -1 ELSE 1 END) WHERE key = 'lbs_live'; END;
CREATE TRIGGER lbs_count_del AFTER DELETE ON load_balancers
BEGIN
    UPDATE counters SET n = n - 1 WHERE key = 'lbs_live' AND OLD.state <> 'deleting';
    UPDATE counters SET n = n - 1 WHERE key = 'lbs_public' AND OLD.scheme = 'internet-facing';
END;

ALTER TABLE route_tables ADD COLUMN route_count INTEGER NOT NULL DEFAULT 0;
UPDATE route_tables SET route_count = (SELECT COUNT(*) FROM routes r WHERE r.route_table_id = route_tables.id);
CREATE TRIGGER routes_count_ins AFTER INSERT ON routes
BEGIN UPDATE route_tables SET route_count = route_count + 1 WHERE id = NEW.route_table_id; END;
CREATE TRIGGER routes_count_del AFTER DELETE ON routes
BEGIN UPDATE route_tables SET route_count = route_count - 1 WHERE id = OLD.route_table_id; END;

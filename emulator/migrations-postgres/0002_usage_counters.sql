-- ../migrations/0002_usage_counters.sql on PostgreSQL: quota usage kept by triggers in the write's own
-- transaction. One trigger per table adds what a row change makes of the count (+1, -1 or 0).

CREATE TABLE counters (
    key  TEXT PRIMARY KEY,
    n    BIGINT NOT NULL
);

INSERT INTO counters (key, n) SELECT 'instances_live', COUNT(*) FROM instances WHERE state <> 'terminated';
INSERT INTO counters (key, n) SELECT 'lbs_live', COUNT(*) FROM load_balancers WHERE state <> 'deleting';
INSERT INTO counters (key, n) SELECT 'lbs_public', COUNT(*) FROM load_balancers WHERE scheme = 'internet-facing';

CREATE FUNCTION count_instances() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE d BIGINT := 0;
BEGIN
    IF TG_OP <> 'DELETE' AND NEW.state <> 'terminated' THEN d := d + 1; END IF;
    IF TG_OP <> 'INSERT' AND OLD.state <> 'terminated' THEN d := d - 1; END IF;
    IF d <> 0 THEN UPDATE counters SET n = n + d WHERE key = 'instances_live'; END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER instances_count AFTER INSERT OR DELETE OR UPDATE OF state ON instances
    FOR EACH ROW EXECUTE FUNCTION count_instances();

-- A load balancer's scheme never changes: only inserts and deletes move the public count (as on SQLite).
CREATE FUNCTION count_load_balancers() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE live BIGINT := 0; public BIGINT := 0;
BEGIN
    IF TG_OP <> 'DELETE' AND NEW.state <> 'deleting' THEN live := live + 1; END IF;
    IF TG_OP <> 'INSERT' AND OLD.state <> 'deleting' THEN live := live - 1; END IF;
    IF TG_OP = 'INSERT' AND NEW.scheme = 'internet-facing' THEN public := 1; END IF;
    IF TG_OP = 'DELETE' AND OLD.scheme = 'internet-facing' THEN public := -1; END IF;
    IF live <> 0 THEN UPDATE counters SET n = n + live WHERE key = 'lbs_live'; END IF;
    IF public <> 0 THEN UPDATE counters SET n = n + public WHERE key = 'lbs_public'; END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER load_balancers_count AFTER INSERT OR DELETE OR UPDATE OF state ON load_balancers
    FOR EACH ROW EXECUTE FUNCTION count_load_balancers();

ALTER TABLE route_tables ADD COLUMN route_count BIGINT NOT NULL DEFAULT 0;
UPDATE route_tables SET route_count = (SELECT COUNT(*) FROM routes r WHERE r.route_table_id = route_tables.id);
CREATE FUNCTION count_routes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        UPDATE route_tables SET route_count = route_count + 1 WHERE id = NEW.route_table_id;
    ELSE
        UPDATE route_tables SET route_count = route_count - 1 WHERE id = OLD.route_table_id;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER routes_count AFTER INSERT OR DELETE ON routes FOR EACH ROW EXECUTE FUNCTION count_routes();

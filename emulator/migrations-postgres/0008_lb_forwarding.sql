-- ../migrations/0008_lb_forwarding.sql on PostgreSQL.
ALTER TABLE load_balancers ADD COLUMN forwarding TEXT NOT NULL DEFAULT 'proxy';

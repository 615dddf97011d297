-- ../migrations/0007_lb_session_affinity.sql on PostgreSQL.
ALTER TABLE load_balancers ADD COLUMN session_affinity TEXT NOT NULL DEFAULT 'none';

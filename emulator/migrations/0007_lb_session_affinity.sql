-- Which backend a client's connections go to: 'none' (in turn) or 'client-ip' (one client address, one backend).
ALTER TABLE load_balancers ADD COLUMN session_affinity TEXT NOT NULL DEFAULT 'none';

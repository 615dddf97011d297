-- ../migrations/0010_account_leases.sql on PostgreSQL.
ALTER TABLE accounts ADD COLUMN lease_holder TEXT;
ALTER TABLE accounts ADD COLUMN lease_expires_at BIGINT;

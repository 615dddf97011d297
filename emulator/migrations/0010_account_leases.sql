-- Leases of accounts (issue #28): who holds one and until when (Unix milliseconds); both NULL while it is free.
ALTER TABLE accounts ADD COLUMN lease_holder TEXT;
ALTER TABLE accounts ADD COLUMN lease_expires_at INTEGER;

-- ../migrations/0004_instance_ipv6.sql on PostgreSQL.
ALTER TABLE instances ADD COLUMN ipv6_address TEXT;

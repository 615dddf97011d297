-- A dual-stack machine's IPv6 address beside its private IP (adopted dual-stack kind nodes). Its uniqueness is
-- kept by ip_leases, as for every other address.
ALTER TABLE instances ADD COLUMN ipv6_address TEXT;

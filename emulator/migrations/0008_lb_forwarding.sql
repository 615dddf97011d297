-- How the data plane carries a connection: 'proxy' (its own connection to a NodePort) or 'passthrough' (packets
-- routed to a node unchanged, kube-proxy serving the address there).
ALTER TABLE load_balancers ADD COLUMN forwarding TEXT NOT NULL DEFAULT 'proxy';

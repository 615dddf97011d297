-- Security groups (issue #49): EC2's groups with their ingress rules, the instances in each and the load
-- balancers they guard (a load balancer with groups admits whom their rules admit, instead of its source ranges).
-- Every VPC has a group named `default`, made by the emulator; an instance with no row here is in it.
CREATE TABLE security_groups (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,  -- page order
    id           TEXT NOT NULL UNIQUE,
    name         TEXT NOT NULL,
    description  TEXT NOT NULL,
    vpc_id       TEXT NOT NULL,                      -- the VPC's EC2 ID
    created_at   INTEGER NOT NULL,
    UNIQUE (vpc_id, name)
);

-- One ingress rule per source, as EC2 counts them against the rules-per-group quota.
CREATE TABLE security_group_rules (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    group_id   TEXT NOT NULL REFERENCES security_groups(id) ON DELETE CASCADE,
    protocol   TEXT NOT NULL,                        -- tcp, udp, icmp, or -1 (every protocol)
    from_port  INTEGER NOT NULL,                     -- icmp: the type; -1: any (and for protocol -1)
    to_port    INTEGER NOT NULL,                     -- icmp: the code
    source     TEXT NOT NULL,                        -- a network in canonical form, or a group's ID
    UNIQUE (group_id, protocol, from_port, to_port, source)
);
CREATE INDEX security_group_rules_source ON security_group_rules(source);

CREATE TABLE instance_security_groups (
    instance_id  TEXT NOT NULL REFERENCES instances(id) ON DELETE CASCADE,
    group_id     TEXT NOT NULL REFERENCES security_groups(id),
    PRIMARY KEY (instance_id, group_id)
);
CREATE INDEX instance_security_groups_group ON instance_security_groups(group_id);

-- A load balancer's groups go with its row: the link outlives a delete only while the row is `deleting`.
CREATE TABLE load_balancer_security_groups (
    load_balancer_id  TEXT NOT NULL REFERENCES load_balancers(id) ON DELETE CASCADE,
    group_id          TEXT NOT NULL REFERENCES security_groups(id),
    PRIMARY KEY (load_balancer_id, group_id)
);
CREATE INDEX load_balancer_security_groups_group ON load_balancer_security_groups(group_id);

-- A security-group rule's description (EC2's `Description` of an IP range or a group pair). Not part of what
-- makes a rule itself: the same rule with another description is a duplicate, and a revoke need not name it.
-- cloud-provider-aws tells its network load balancers' rules apart by it.
ALTER TABLE security_group_rules ADD COLUMN description TEXT NOT NULL DEFAULT '';

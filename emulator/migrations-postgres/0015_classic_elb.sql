-- ../migrations/0015_classic_elb.sql on PostgreSQL.
-- What classic Elastic Load Balancing (the AWS face's `elasticloadbalancing` 2012-06-01, issue #50) keeps of a load
-- balancer beside its native row, which it has no column for: the subnets it was given, and (JSON) each
-- listener's classic protocols and policies, the health check's timeout and thresholds, the attributes and the
-- policies; its security groups are the security groups' own link (0014). A load balancer without a row here
-- (made natively) reads as classic's defaults. Deleted with the load balancer's row
-- (`store::load_balancers::delete`, `store::lifecycle::apply_due`).
CREATE TABLE classic_load_balancers (
    load_balancer_id  TEXT PRIMARY KEY,
    subnets           TEXT NOT NULL,
    extras            TEXT NOT NULL
);

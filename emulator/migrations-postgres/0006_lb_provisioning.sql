-- ../migrations/0006_lb_provisioning.sql on PostgreSQL.
CREATE TABLE lb_provisioning (
    load_balancer TEXT PRIMARY KEY NOT NULL,
    delay_ms      BIGINT NOT NULL
);

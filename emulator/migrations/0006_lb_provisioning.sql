-- How long new load balancers stay `provisioning`, set at run time (PUT /v1/load-balancer-provisioning): for
-- every one (load_balancer = ''), or for those created with one name. Without a row, the start flag's delay.
CREATE TABLE lb_provisioning (
    load_balancer TEXT PRIMARY KEY NOT NULL,
    delay_ms      INTEGER NOT NULL
);

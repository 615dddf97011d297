//! SQL for each resource, one module each. Every write runs in one transaction on the single writer, so a check
//! (quota, uniqueness, address free) and the write it guards can never be split by another request.

pub mod accounts;
pub mod classic_elb;
mod create;
pub mod elbv2;
pub mod faults;
pub mod hangs;
pub mod idempotency;
pub mod instances;
pub mod ipam;
pub mod lb_provisioning;
pub mod lb_views;
pub mod lifecycle;
pub mod load_balancers;
pub mod quotas;
pub mod routes;
pub mod security_groups;
pub mod tags;
mod write;

use std::collections::BTreeMap;

use crate::db::Db;
use crate::error::Result;

/// What a resource is called and where it is, as fault rules match calls about it.
#[derive(Debug, Clone)]
pub struct Labels {
    pub name: String,
    pub zone: Option<String>,
    pub tags: BTreeMap<String, String>,
}

/// The [`Labels`] of the instance or load balancer `id` (`None`: no such resource).
pub async fn labels(db: &Db, id: &str) -> Result<Option<Labels>> {
    let row: Option<(String, Option<String>, Option<String>)> = if id.starts_with("i-") {
        sqlx::query_as("SELECT name, zone, tags FROM instances WHERE id = $1")
            .bind(id)
            .fetch_optional(db.reader())
            .await?
    } else if id.starts_with("lb-") {
        sqlx::query_as("SELECT name, NULL, NULL FROM load_balancers WHERE id = $1")
            .bind(id)
            .fetch_optional(db.reader())
            .await?
    } else {
        None
    };
    Ok(row.map(|(name, zone, tags)| Labels {
        name,
        zone,
        tags: tags.and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default(),
    }))
}

/// How many resources of each kind are in each state at `now`: (kind, state, count), the kind `instance`,
/// `load_balancer`, `route` or `route_table` (these two always `active`).
pub async fn counts(db: &Db, now: i64) -> Result<Vec<(String, String, i64)>> {
    Ok(sqlx::query_as(concat!(
        "SELECT 'instance', ",
        instances::state_at!(),
        " AS s, COUNT(*) FROM instances GROUP BY s \
         UNION ALL SELECT 'load_balancer', (CASE WHEN next_state_at <= $1 THEN next_state ELSE state END) AS s, COUNT(*) FROM load_balancers GROUP BY s \
         UNION ALL SELECT 'route', 'active', COUNT(*) FROM routes \
         UNION ALL SELECT 'route_table', 'active', COUNT(*) FROM route_tables"
    ))
    .bind(now)
    .fetch_all(db.reader())
    .await?)
}

/// Delete every resource and the audit log; quotas go back to their defaults. The main route table and each
/// VPC's default security group are re-made.
pub async fn reset(db: &Db) -> Result<()> {
    let mut tx = db.write().await?;
    // Entries of calls before this one in the batch are written at its commit; written now, they go with the rest.
    tx.write_queued_audit().await?;
    let vpcs = security_groups::default_vpcs(&mut tx).await?;
    for table in [
        "load_balancer_security_groups",
        "instance_security_groups",
        "security_group_rules",
        "security_groups",
        "routes",
        "route_tables",
        "resource_tags",
        "classic_load_balancers",
        "elbv2_listeners",
        "elbv2_target_groups",
        "elbv2_load_balancers",
        "load_balancers",
        "instances",
        "hangs",
        "ip_leases",
        "quotas",
        "lb_provisioning",
        "idempotency_keys",
        "audit_log",
    ] {
        sqlx::query(sqlx::AssertSqlSafe(format!("DELETE FROM {table}"))).execute(&mut *tx).await?;
    }
    routes::ensure_main_table(&mut tx).await?;
    for vpc in vpcs {
        security_groups::ensure_default(&mut tx, &vpc).await?;
    }
    crate::call::commit(tx, "").await?;
    Ok(())
}

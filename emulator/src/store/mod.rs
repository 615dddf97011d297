//! SQL for each resource, one module each. Every write runs in one transaction on the single writer, so a check
//! (quota, uniqueness, address free) and the write it guards can never be split by another request.

pub mod audit;
pub mod hangs;
pub mod idempotency;
pub mod instances;
pub mod ipam;
pub mod lifecycle;
pub mod load_balancers;
pub mod quotas;
pub mod routes;

use crate::db::{Db, Tx};
use crate::error::Result;

/// Begin a write transaction with every due timed transition already applied, so the writer sees the state
/// that readers are shown. Whether any is due is asked with the write's start, in one round trip.
pub async fn begin(db: &Db) -> Result<(Tx, i64)> {
    let (mut tx, now, due) = db.write_probing(lifecycle::ANY_DUE).await?;
    if due {
        lifecycle::apply_due(&mut tx, now).await?;
    }
    Ok((tx, now))
}

/// Delete every resource and the audit log; quotas go back to their defaults. The main route table is re-made.
pub async fn reset(db: &Db) -> Result<()> {
    let mut tx = db.write().await?;
    // Entries of calls before this one in the batch are written at its commit; written now, they go with the rest.
    tx.write_queued_audit().await?;
    for table in [
        "routes",
        "route_tables",
        "load_balancers",
        "instances",
        "hangs",
        "ip_leases",
        "quotas",
        "idempotency_keys",
        "audit_log",
    ] {
        sqlx::query(sqlx::AssertSqlSafe(format!("DELETE FROM {table}"))).execute(&mut *tx).await?;
    }
    routes::ensure_main_table(&mut tx).await?;
    audit::commit(tx, "").await?;
    Ok(())
}

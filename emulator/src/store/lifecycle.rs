//! Timed state transitions (pending→running, provisioning→active, …). A resource stores its next state and when
//! it is due; reads compute the effective state, and `apply_due` writes due transitions down — at the start of
//! every write transaction and from a background ticker (which also purges expired terminated instances).

use std::time::Duration;

use crate::db::{Db, Tx, ms, now_ms};
use crate::error::Result;

/// Whether any transition is due at `$1`. Usually nothing is: one indexed look-up instead of four writes. (The
/// earliest due time, not "is one due": a young PostgreSQL table has no statistics yet, and its planner then
/// takes most rows for due and scans them all, where the earliest is read off the index on every plan.)
pub const ANY_DUE: &str = "SELECT CAST(COALESCE((SELECT MIN(next_state_at) FROM instances WHERE next_state_at IS NOT NULL) <= $1, FALSE) \
     OR COALESCE((SELECT MIN(next_state_at) FROM load_balancers WHERE next_state_at IS NOT NULL) <= $1, FALSE) AS INTEGER)";

/// The tables the AWS faces keep beside a load balancer's row (`load_balancers::Beside`), by the column naming
/// it: deleted with the row, here or by an immediate delete.
pub const LB_BESIDE: [(&str, &str); 2] =
    [("classic_load_balancers", "load_balancer_id"), ("resource_tags", "resource_id")];

/// Write down every transition due at `now`.
pub async fn apply_due(tx: &mut Tx, now: i64) -> Result<()> {
    let due: i64 = sqlx::query_scalar(ANY_DUE).bind(now).fetch_one(&mut **tx).await?;
    if due == 0 {
        return Ok(());
    }
    // Terminated instances and deleted load balancers give their addresses back.
    sqlx::query(
        "DELETE FROM ip_leases WHERE owner IN (SELECT id FROM instances WHERE next_state = 'terminated' AND next_state_at <= $1) \
         OR owner IN (SELECT id FROM load_balancers WHERE next_state = 'deleted' AND next_state_at <= $1)",
    )
    .bind(now)
    .execute(&mut **tx)
    .await?;
    sqlx::query(
        "UPDATE instances SET state = next_state, state_changed_at = next_state_at, next_state = NULL, next_state_at = NULL \
         WHERE next_state_at <= $1",
    )
    .bind(now)
    .execute(&mut **tx)
    .await?;
    for (table, column) in LB_BESIDE {
        let sql = format!(
            "DELETE FROM {table} WHERE {column} IN \
             (SELECT id FROM load_balancers WHERE next_state = 'deleted' AND next_state_at <= $1)"
        );
        sqlx::query(sqlx::AssertSqlSafe(sql)).bind(now).execute(&mut **tx).await?;
    }
    sqlx::query("DELETE FROM load_balancers WHERE next_state = 'deleted' AND next_state_at <= $1")
        .bind(now)
        .execute(&mut **tx)
        .await?;
    sqlx::query(
        "UPDATE load_balancers SET state = next_state, updated_at = next_state_at, next_state = NULL, next_state_at = NULL \
         WHERE next_state_at <= $1",
    )
    .bind(now)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// The state to write now for a transition to `next` after `delay`: with no delay the resource is there at once.
pub fn schedule<'s>(
    now: i64,
    through: &'s str,
    next: &'s str,
    delay: Duration,
) -> (&'s str, Option<&'s str>, Option<i64>) {
    if delay.is_zero() { (next, None, None) } else { (through, Some(next), Some(now.saturating_add(ms(delay)))) }
}

/// One pass of the background ticker.
pub async fn tick(db: &Db, retention: Duration) -> Result<()> {
    let now = now_ms();
    let mut tx = db.write().await?;
    apply_due(&mut tx, now).await?;
    sqlx::query("DELETE FROM instances WHERE state = 'terminated' AND state_changed_at < $1")
        .bind(now.saturating_sub(ms(retention)))
        .execute(&mut *tx)
        .await?;
    // Client tokens are kept a day, as cloud APIs keep theirs.
    sqlx::query("DELETE FROM idempotency_keys WHERE created_at < $1")
        .bind(now - 24 * 3600 * 1000)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

/// Run `tick` every `period` until the process ends.
pub fn spawn_ticker(db: Db, retention: Duration, period: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(period);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            if let Err(e) = tick(&db, retention).await {
                tracing::warn!(error = %e, "lifecycle tick failed; will retry");
            }
        }
    })
}

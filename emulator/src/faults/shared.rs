//! What emulators sharing one PostgreSQL database keep in it so that they fault as one cloud, beside the faults
//! themselves (table `faults`, followed through a generation) and the rate limits' buckets (`rate_buckets`):
//! a rule's counts, so that `skip` and `times` count every replica's calls; a rate limit's refusals;
//! eventual consistency's lag, so that a read through any replica lags behind a write through another; and
//! which replica draws each second of random spot reclamation, so that the fleet's rate is the one asked for.
//! One emulator alone keeps all of this in memory.

use std::collections::HashMap;

use fakecloud_api::FaultTrigger;

use crate::db::Db;
use crate::error::Result;

/// A rule's kind in `fault_counts` (as in `faults`).
pub const RULE: &str = "rule";
/// A rate limit's kind in `fault_counts`: only `injected`, its refusals, is counted.
pub const RATE_LIMIT: &str = "rate_limit";
/// The counter holding the latest end of a lag in `lagging`.
pub const LAG_UNTIL: &str = "lag_until";
/// The counter holding the last second of random spot reclamation an emulator claimed.
const SPOT_SECOND: &str = "spot_second";

/// Whether this match fires (`$3` skip, `$4` whether the rule's probability was drawn, `$5` times or NULL), for
/// a row counted `matched` and `injected` before it.
macro_rules! fires {
    ($matched:literal, $injected:literal) => {
        concat!(
            "CASE WHEN ",
            $matched,
            " + 1 > $3::BIGINT AND $4 AND ($5::BIGINT IS NULL OR ",
            $injected,
            " < $5::BIGINT) THEN 1 ELSE 0 END"
        )
    };
}

/// Count a match of rule `$2` in one atomic statement, so every replica's calls count toward one `skip` and one
/// `times`: the match, and the injection when it fires. Returns whether it fired.
const COUNT_MATCH: &str = concat!(
    "INSERT INTO fault_counts (kind, id, matched, injected, fired) VALUES ($1, $2, 1, ",
    fires!("0", "0"),
    ", ",
    fires!("0", "0"),
    ") ON CONFLICT (kind, id) DO UPDATE SET matched = fault_counts.matched + 1, injected = fault_counts.injected + ",
    fires!("fault_counts.matched", "fault_counts.injected"),
    ", fired = ",
    fires!("fault_counts.matched", "fault_counts.injected"),
    " RETURNING fired"
);

/// Count a match of rule `id` (see [`COUNT_MATCH`]); `drawn`: whether the rule's probability, drawn by the
/// replica judging the call, lets it fire.
pub async fn count_match(db: &Db, id: &str, trigger: &FaultTrigger, drawn: bool) -> Result<bool> {
    let fired: i64 = sqlx::query_scalar(COUNT_MATCH)
        .bind(RULE)
        .bind(id)
        .bind(i64::try_from(trigger.skip).unwrap_or(i64::MAX))
        .bind(drawn)
        .bind(trigger.times.map(|t| i64::try_from(t).unwrap_or(i64::MAX)))
        .fetch_one(db.writer())
        .await?;
    Ok(fired == 1)
}

/// Count a refusal of rate limit `id`.
pub async fn count_refusal(db: &Db, id: &str) -> Result<()> {
    sqlx::query(
        "INSERT INTO fault_counts (kind, id, matched, injected, fired) VALUES ($1, $2, 0, 1, 1) \
         ON CONFLICT (kind, id) DO UPDATE SET injected = fault_counts.injected + 1",
    )
    .bind(RATE_LIMIT)
    .bind(id)
    .execute(db.writer())
    .await?;
    Ok(())
}

/// The counts of every fault of `kind`, by ID: (matched, injected).
pub async fn counts(db: &Db, kind: &str) -> HashMap<String, (u64, u64)> {
    let rows: std::result::Result<Vec<(String, i64, i64)>, _> =
        sqlx::query_as("SELECT id, matched, injected FROM fault_counts WHERE kind = $1")
            .bind(kind)
            .fetch_all(db.reader())
            .await;
    match rows {
        Ok(rows) => rows
            .into_iter()
            .map(|(id, m, i)| (id, (u64::try_from(m).unwrap_or(0), u64::try_from(i).unwrap_or(0))))
            .collect(),
        Err(e) => {
            tracing::warn!(%kind, error = %e, "cannot read the shared fault counts; showing this emulator's");
            HashMap::new()
        }
    }
}

/// A fault gone (or, with no `id`, every fault): its counts start again if one is made under its name.
pub async fn forget_counts(db: &Db, kind: &str, id: Option<&str>) -> Result<()> {
    sqlx::query("DELETE FROM fault_counts WHERE kind = $1 AND ($2 IS NULL OR id = $2)")
        .bind(kind)
        .bind(id)
        .execute(db.writer())
        .await?;
    Ok(())
}

/// Record that reads of `id` see `previous` (`None`: nothing) until `until_ms`, and raise `lag_until` to it;
/// lags that ended are dropped on the way.
pub async fn lag(db: &Db, id: &str, previous: Option<&serde_json::Value>, until_ms: i64, now: i64) -> Result<()> {
    let previous = previous.map(serde_json::Value::to_string);
    let mut tx = db.writer().begin().await?;
    sqlx::query("DELETE FROM lagging WHERE until_ms <= $1").bind(now).execute(&mut *tx).await?;
    sqlx::query(
        "INSERT INTO lagging (id, until_ms, previous) VALUES ($1, $2, $3) \
         ON CONFLICT (id) DO UPDATE SET until_ms = $2, previous = $3",
    )
    .bind(id)
    .bind(until_ms)
    .bind(previous)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "INSERT INTO counters (key, n) VALUES ($1, $2) \
         ON CONFLICT (key) DO UPDATE SET n = CASE WHEN counters.n > $2 THEN counters.n ELSE $2 END",
    )
    .bind(LAG_UNTIL)
    .bind(until_ms)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// What lags now, by ID: the version reads see (`None`: nothing).
pub async fn lagging(db: &Db, now: i64) -> Result<HashMap<String, Option<serde_json::Value>>> {
    let rows: Vec<(String, Option<String>)> =
        sqlx::query_as("SELECT id, previous FROM lagging WHERE until_ms > $1").bind(now).fetch_all(db.reader()).await?;
    Ok(rows.into_iter().map(|(id, previous)| (id, previous.and_then(|p| serde_json::from_str(&p).ok()))).collect())
}

/// Claim second `second` (Unix) of random spot reclamation: true for the first emulator to ask, so one draw a
/// second is made however many emulators tick.
pub async fn claim_second(db: &Db, second: i64) -> Result<bool> {
    let claimed: Option<i64> = sqlx::query_scalar(
        "INSERT INTO counters (key, n) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET n = $2 WHERE counters.n < $2 \
         RETURNING n",
    )
    .bind(SPOT_SECOND)
    .bind(second)
    .fetch_optional(db.writer())
    .await?;
    Ok(claimed.is_some())
}

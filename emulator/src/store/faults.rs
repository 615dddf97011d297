//! The fault engine's tables (see `crate::faults`): the faults themselves (`faults`), and a generation each
//! change bumps, so that emulators sharing one PostgreSQL database follow each other's changes; and what those
//! emulators count and see as one: the rate limits' buckets (`rate_buckets`), a rule's counts and a limit's
//! refusals (`fault_counts`), eventual consistency's lag (`lagging`), and which of them draws each second of
//! random spot reclamation. One emulator alone keeps all but the faults in memory.
//!
//! Some give sqlx's error as it is, to a caller that writes it in its warning and carries on without the
//! database (judging a call, a listing).

use std::collections::HashMap;

use fakecloud_api::FaultTrigger;

use crate::db::{AnyPool, Db};
use crate::error::Result;

/// A rule's kind, in `faults` and in `fault_counts`.
pub const RULE: &str = "rule";
/// A rate limit's kind, in `faults` and in `fault_counts`, where only `injected`, its refusals, is counted.
pub const RATE_LIMIT: &str = "rate_limit";
/// The counter (in `counters`) every change of the faults bumps.
const GENERATION: &str = "faults_generation";
/// The counter holding the latest end of a lag in `lagging`.
const LAG_UNTIL: &str = "lag_until";
/// The counter holding the last second of random spot reclamation an emulator claimed.
const SPOT_SECOND: &str = "spot_second";

/// The stored faults as (kind, ID, spec), in their order.
pub async fn all(db: &Db) -> Result<Vec<(String, String, String)>> {
    Ok(sqlx::query_as("SELECT kind, id, spec FROM faults ORDER BY position, created_at").fetch_all(db.reader()).await?)
}

/// Store the fault `kind`/`id`, or move and change the one stored (it keeps its creation time, `now` otherwise).
pub async fn put(db: &Db, kind: &str, id: &str, position: i64, spec: &str, now: i64) -> Result<()> {
    sqlx::query(
        "INSERT INTO faults (kind, id, position, spec, created_at) VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT(kind, id) DO UPDATE SET position = $3, spec = $4",
    )
    .bind(kind)
    .bind(id)
    .bind(position)
    .bind(spec)
    .bind(now)
    .execute(db.writer())
    .await?;
    Ok(())
}

pub async fn delete(db: &Db, kind: &str, id: &str) -> Result<()> {
    sqlx::query("DELETE FROM faults WHERE kind = $1 AND id = $2").bind(kind).bind(id).execute(db.writer()).await?;
    Ok(())
}

pub async fn delete_all(db: &Db) -> Result<()> {
    sqlx::query("DELETE FROM faults").execute(db.writer()).await?;
    Ok(())
}

/// Bump the faults' generation: the other emulators on this database read the faults again.
pub async fn bump(db: &Db) -> Result<()> {
    sqlx::query("INSERT INTO counters (key, n) VALUES ($1, 1) ON CONFLICT(key) DO UPDATE SET n = counters.n + 1")
        .bind(GENERATION)
        .execute(db.writer())
        .await?;
    Ok(())
}

/// The next number of the IDs of faults of `kind`, from a counter that never goes back. A database from before
/// the counter starts it after the faults of `kind` it has.
pub async fn next_number(db: &Db, kind: &str) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "INSERT INTO counters (key, n) VALUES ($1, (SELECT COUNT(*) FROM faults WHERE kind = $2) + 1) \
         ON CONFLICT(key) DO UPDATE SET n = counters.n + 1 RETURNING n",
    )
    .bind(format!("{kind}_ids"))
    .bind(kind)
    .fetch_one(db.writer())
    .await?)
}

/// The faults' generation and the latest end of a lag (0 for either before the first), read on `pool`: the
/// caller chooses the connections, a reader's or the writer's.
pub async fn generation(pool: &AnyPool) -> Result<(i64, i64), sqlx::Error> {
    let rows: Vec<(String, i64)> = sqlx::query_as("SELECT key, n FROM counters WHERE key IN ($1, $2)")
        .bind(GENERATION)
        .bind(LAG_UNTIL)
        .fetch_all(pool)
        .await?;
    let counter = |key: &str| rows.iter().find(|(k, _)| k == key).map_or(0, |(_, n)| *n);
    Ok((counter(GENERATION), counter(LAG_UNTIL)))
}

// ------------------------------------------------------------------------------------------ rate limits' buckets

/// A row of `rate_buckets` for one limit: key, mark, calls.
pub type BucketRow = (String, i64, i64);

/// Take a token from a shared bucket ($1 limit, $2 key, $3 now and $4 the emission interval and $5 the burst,
/// in microseconds): GCRA allows a call when the arrival time, no earlier than now, plus one interval is within
/// the burst of now. Returns the arrival time and whether the call took a token.
const TAKE_TOKEN: &str = "INSERT INTO rate_buckets (limit_id, key, mark, calls) VALUES ($1, $2, $3 + $4, 1) \
     ON CONFLICT (limit_id, key) DO UPDATE SET \
     calls = CASE WHEN (CASE WHEN rate_buckets.mark > $3 THEN rate_buckets.mark ELSE $3 END) + $4 - $3 <= $5 \
     THEN 1 ELSE 0 END, \
     mark = CASE WHEN (CASE WHEN rate_buckets.mark > $3 THEN rate_buckets.mark ELSE $3 END) + $4 - $3 <= $5 \
     THEN (CASE WHEN rate_buckets.mark > $3 THEN rate_buckets.mark ELSE $3 END) + $4 ELSE rate_buckets.mark END \
     RETURNING mark, calls";

/// Count a call in a shared fixed window ($1 limit, $2 key, $3 the window's number): the calls counted in it.
const COUNT_CALL: &str = "INSERT INTO rate_buckets (limit_id, key, mark, calls) VALUES ($1, $2, $3, 1) \
     ON CONFLICT (limit_id, key) DO UPDATE SET \
     calls = CASE WHEN rate_buckets.mark = $3 THEN rate_buckets.calls + 1 ELSE 1 END, mark = $3 \
     RETURNING calls";

/// See [`TAKE_TOKEN`]: (arrival time, 1 if the call took a token).
pub async fn take_token(
    db: &Db,
    limit: &str,
    key: &str,
    now: i64,
    every: i64,
    burst: i64,
) -> Result<(i64, i64), sqlx::Error> {
    sqlx::query_as(TAKE_TOKEN).bind(limit).bind(key).bind(now).bind(every).bind(burst).fetch_one(db.writer()).await
}

/// See [`COUNT_CALL`].
pub async fn count_call(db: &Db, limit: &str, key: &str, window: i64) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(COUNT_CALL).bind(limit).bind(key).bind(window).fetch_one(db.writer()).await
}

/// Every limit's buckets, as (limit, key, mark, calls).
pub async fn buckets(db: &Db) -> Result<Vec<(String, String, i64, i64)>, sqlx::Error> {
    sqlx::query_as("SELECT limit_id, key, mark, calls FROM rate_buckets").fetch_all(db.reader()).await
}

/// Empty the buckets of `limit` (`None`: of every limit).
pub async fn empty_buckets(db: &Db, limit: Option<&str>) -> Result<()> {
    sqlx::query("DELETE FROM rate_buckets WHERE $1 IS NULL OR limit_id = $1").bind(limit).execute(db.writer()).await?;
    Ok(())
}

// ------------------------------------------------------------------------------------------ counts

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
pub async fn counts(db: &Db, kind: &str) -> Result<HashMap<String, (u64, u64)>, sqlx::Error> {
    let rows: Vec<(String, i64, i64)> =
        sqlx::query_as("SELECT id, matched, injected FROM fault_counts WHERE kind = $1")
            .bind(kind)
            .fetch_all(db.reader())
            .await?;
    Ok(rows
        .into_iter()
        .map(|(id, m, i)| (id, (u64::try_from(m).unwrap_or(0), u64::try_from(i).unwrap_or(0))))
        .collect())
}

/// A fault gone (or, with no `id`, every fault of `kind`): its counts start again if one is made under its name.
pub async fn forget_counts(db: &Db, kind: &str, id: Option<&str>) -> Result<()> {
    sqlx::query("DELETE FROM fault_counts WHERE kind = $1 AND ($2 IS NULL OR id = $2)")
        .bind(kind)
        .bind(id)
        .execute(db.writer())
        .await?;
    Ok(())
}

// ------------------------------------------------------------------------------------------ eventual consistency

/// Record that reads of `id` see `previous` (`None`: nothing) until `until_ms`, and raise the latest end of a
/// lag to it; lags that ended are dropped on the way.
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

// ------------------------------------------------------------------------------------------ random spot

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

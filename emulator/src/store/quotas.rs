//! Quota limits (defaults unless set) and region-wide usage.

use fakecloud_api::{Quota, QuotaName};
use sqlx::Row;
use sqlx::any::AnyExecutor;
use sqlx::any::AnyRow;

use crate::db::{Script, Step, params};

use crate::error::{ApiError, Result};

pub async fn limit<'e>(exec: impl AnyExecutor<'e>, name: QuotaName) -> Result<u32> {
    let v: Option<i64> = sqlx::query_scalar("SELECT limit_value FROM quotas WHERE name = $1")
        .bind(name.as_str())
        .fetch_optional(exec)
        .await?;
    Ok(v.and_then(|v| u32::try_from(v).ok()).unwrap_or_else(|| name.default_limit()))
}

/// One quota check: `adding` more on top of the usage kept in the `counters` row `counter` (`None`: on top of
/// nothing, for a quota on one request's items, such as a load balancer's listeners).
pub struct Check {
    pub quota: QuotaName,
    pub counter: Option<&'static str>,
    pub adding: usize,
    /// What the request does, for the error.
    pub what: String,
}

/// Read every limit and counter `checks` need, in one statement: pushed onto a write's list, and judged with
/// [`judge`] once it has run.
pub fn push_read(script: &mut Script, checks: &[Check]) -> Step {
    let names: Vec<&str> = checks.iter().map(|c| c.quota.as_str()).collect();
    let counters: Vec<&str> = checks.iter().filter_map(|c| c.counter).collect();
    let sql = format!(
        "SELECT 1, name, limit_value FROM quotas WHERE name IN ({}) UNION ALL SELECT 0, key, n FROM counters WHERE key IN ({})",
        params(1, names.len()),
        params(1 + names.len(), counters.len())
    );
    script.push(&sql, |b| {
        for v in names.into_iter().chain(counters) {
            b.bind(v);
        }
    })
}

/// Fail with the error of the first of `checks` whose quota would be exceeded.
pub async fn check_all(tx: &mut crate::db::Tx, checks: &[Check]) -> Result<()> {
    let mut script = Script::new();
    let read = push_read(&mut script, checks);
    judge(checks, tx.run(script).await.rows(read)?)
}

/// Fail with the error of the first of `checks` whose quota would be exceeded, from the rows of [`push_read`].
pub fn judge(checks: &[Check], rows: &[AnyRow]) -> Result<()> {
    room(checks, rows, 1, 1).map(drop)
}

/// How many times over `checks` fit under their quotas, from the rows of [`push_read`]: as many as there is room
/// for up to `at_most`, and at least `at_least`, else the error of the first quota that many would exceed.
pub fn room(checks: &[Check], rows: &[AnyRow], at_least: usize, at_most: usize) -> Result<usize> {
    let rows: Vec<(i64, String, i64)> =
        rows.iter().map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?))).collect::<Result<_, sqlx::Error>>()?;
    let value = |is_limit: i64, key: &str| rows.iter().find(|r| r.0 == is_limit && r.1 == key).map(|r| r.2);
    let mut fit = at_most;
    for c in checks {
        let limit =
            value(1, c.quota.as_str()).and_then(|v| u32::try_from(v).ok()).unwrap_or_else(|| c.quota.default_limit());
        let current = usize::try_from(c.counter.and_then(|k| value(0, k)).unwrap_or(0)).unwrap_or(0);
        if current + c.adding * at_least > limit as usize {
            return Err(ApiError::quota_exceeded(c.quota, limit, &c.what));
        }
        let left = (limit as usize).saturating_sub(current);
        fit = fit.min(left.checked_div(c.adding).unwrap_or(at_most));
    }
    Ok(fit)
}

pub async fn set(db: &crate::db::Db, name: QuotaName, limit: u32) -> Result<()> {
    let mut tx = db.write().await?;
    sqlx::query(
        "INSERT INTO quotas (name, limit_value) VALUES ($1, $2) ON CONFLICT(name) DO UPDATE SET limit_value = $2",
    )
    .bind(name.as_str())
    .bind(i64::from(limit))
    .execute(&mut *tx)
    .await?;
    Ok(crate::call::commit(tx, name.as_str()).await?)
}

/// Instances counted against the quota: all that are not (effectively) terminated at `$1`.
const INSTANCES_LIVE: &str = "SELECT COUNT(*) FROM instances WHERE (CASE WHEN next_state_at <= $1 THEN next_state ELSE state END) <> 'terminated'";

/// Load balancers counted against the quota at `$1`: all not being deleted.
const LOAD_BALANCERS_LIVE: &str = "SELECT COUNT(*) FROM load_balancers WHERE (CASE WHEN next_state_at <= $1 THEN next_state ELSE state END) NOT IN ('deleting', 'deleted')";
/// Public addresses in use at `$1`.
const PUBLIC_IPS: &str = "SELECT COUNT(*) FROM load_balancers WHERE scheme = 'internet-facing' \
     AND (CASE WHEN next_state_at <= $1 THEN next_state ELSE state END) <> 'deleted'";

/// Current region-wide usage of `name`; `None` for per-resource quotas.
pub async fn usage(pool: &sqlx::AnyPool, name: QuotaName, now: i64) -> Result<Option<u32>> {
    let sql = match name {
        QuotaName::Instances => INSTANCES_LIVE,
        QuotaName::LoadBalancers => LOAD_BALANCERS_LIVE,
        QuotaName::PublicIps => PUBLIC_IPS,
        _ => return Ok(None),
    };
    let n: i64 = sqlx::query_scalar(sql).bind(now).fetch_one(pool).await?;
    Ok(Some(u32::try_from(n).unwrap_or(u32::MAX)))
}

pub async fn get(pool: &sqlx::AnyPool, name: QuotaName, now: i64) -> Result<Quota> {
    Ok(Quota { name, limit: limit(pool, name).await?, usage: usage(pool, name, now).await? })
}

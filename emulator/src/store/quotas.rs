//! Quota limits (defaults unless set) and region-wide usage.

use fakecloud_api::{Quota, QuotaName};
use sqlx::SqliteExecutor;

use crate::error::{ApiError, Result};

pub async fn limit<'e>(exec: impl SqliteExecutor<'e>, name: QuotaName) -> Result<u32> {
    let v: Option<i64> = sqlx::query_scalar("SELECT limit_value FROM quotas WHERE name = ?1")
        .bind(name.as_str())
        .fetch_optional(exec)
        .await?;
    Ok(v.and_then(|v| u32::try_from(v).ok()).unwrap_or_else(|| name.default_limit()))
}

/// Fail with the quota's error when `count` items would exceed it.
pub async fn check<'e>(exec: impl SqliteExecutor<'e>, name: QuotaName, count: usize, what: &str) -> Result<()> {
    let limit = limit(exec, name).await?;
    if count > limit as usize {
        return Err(ApiError::quota_exceeded(name, limit, what));
    }
    Ok(())
}

/// Where a maintained usage value is read from (kept by triggers; see migrations/0002).
pub enum Usage<'k> {
    /// A row of `counters`.
    Counter(&'static str),
    /// The routes of one route table.
    RoutesIn(&'k str),
}

/// Fail with the quota's error when adding `adding` to the current usage would exceed it: one statement.
pub async fn check_usage(
    tx: &mut crate::db::Tx,
    name: QuotaName,
    usage: Usage<'_>,
    adding: usize,
    what: &str,
) -> Result<()> {
    let (sql, key) = match usage {
        Usage::Counter(k) => {
            ("SELECT (SELECT n FROM counters WHERE key = ?1), (SELECT limit_value FROM quotas WHERE name = ?2)", k)
        }
        Usage::RoutesIn(t) => (
            "SELECT (SELECT route_count FROM route_tables WHERE id = ?1), (SELECT limit_value FROM quotas WHERE name = ?2)",
            t,
        ),
    };
    let (current, limit): (Option<i64>, Option<i64>) =
        sqlx::query_as(sql).bind(key).bind(name.as_str()).fetch_one(&mut **tx).await?;
    let limit = limit.and_then(|v| u32::try_from(v).ok()).unwrap_or_else(|| name.default_limit());
    if current.unwrap_or(0) as usize + adding > limit as usize {
        return Err(ApiError::quota_exceeded(name, limit, what));
    }
    Ok(())
}

pub async fn set(db: &crate::db::Db, name: QuotaName, limit: u32) -> Result<()> {
    let mut tx = db.write().await?;
    sqlx::query(
        "INSERT INTO quotas (name, limit_value) VALUES (?1, ?2) ON CONFLICT(name) DO UPDATE SET limit_value = ?2",
    )
    .bind(name.as_str())
    .bind(i64::from(limit))
    .execute(&mut *tx)
    .await?;
    super::audit::commit(tx, name.as_str()).await
}

/// Current region-wide usage of `name`; `None` for per-resource quotas.
pub async fn usage(pool: &sqlx::SqlitePool, name: QuotaName, now: i64) -> Result<Option<u32>> {
    let sql = match name {
        QuotaName::Instances => super::instances::COUNT_LIVE,
        QuotaName::LoadBalancers => super::load_balancers::COUNT_LIVE,
        QuotaName::PublicIps => super::load_balancers::COUNT_PUBLIC,
        _ => return Ok(None),
    };
    let n: i64 = sqlx::query_scalar(sql).bind(now).fetch_one(pool).await?;
    Ok(Some(u32::try_from(n).unwrap_or(u32::MAX)))
}

pub async fn get(pool: &sqlx::SqlitePool, name: QuotaName, now: i64) -> Result<Quota> {
    Ok(Quota { name, limit: limit(pool, name).await?, usage: usage(pool, name, now).await? })
}

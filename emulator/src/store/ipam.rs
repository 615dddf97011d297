//! IP address management. A lease row per address handed out; the unique index on the address is the
//! guarantee that no address is ever given twice while in use.

use std::net::{IpAddr, Ipv4Addr};

use fakecloud_api::codes;

use crate::config::Pool;
use sqlx::Row;

use crate::db::{NotDone, Ran, Script, Step, Tx};
use crate::error::{ApiError, Kind, Result, conflict_on_unique, is_unique_violation};

/// Pool key for fixed addresses outside the VPC (adopted machines).
const EXTERNAL: &str = "external";

/// Lease one past the pool's highest lease, if that is in the pool, to `$5` and return its offset: the usual
/// allocation (addresses are mostly handed out in order) as one statement, where look-up and insert would be two
/// round trips to SQLite. `$4` is the pool's network address as a number; `addr` is written as `Ipv4Addr` shows it.
/// (The highest lease is the last in the index, read alone in its own subquery, and asked for as the first in
/// descending order, not as `MAX`: so SQLite reads just that entry, and so does PostgreSQL before a young table
/// has statistics, when its planner takes `MAX` over a pool for one row and reads the pool's every lease.)
const LEASE_NEXT: &str = "INSERT INTO ip_leases (pool, ip, addr, owner) \
     SELECT $1, n, (($4 + n) >> 24) || '.' || ((($4 + n) >> 16) & 255) || '.' || ((($4 + n) >> 8) & 255) || '.' || (($4 + n) & 255), $5 \
     FROM (SELECT COALESCE((SELECT ip FROM ip_leases WHERE pool = $1 AND ip BETWEEN $2 AND $3 ORDER BY ip DESC LIMIT 1) + 1, $2) AS n) AS next \
     WHERE n <= $3 RETURNING ip";

/// Lease the lowest free address of `pool` to `owner`.
pub async fn allocate(tx: &mut Tx, pool: &Pool, owner: &str) -> Result<Ipv4Addr> {
    let mut script = Script::new();
    let next = push_lease_next(&mut script, pool, owner);
    match leased(pool, &tx.run(script).await, next)? {
        Some(addr) => Ok(addr),
        None => allocate_free(tx, pool, owner).await,
    }
}

/// The usual allocation, one past the pool's highest lease, pushed onto a write's list: see [`leased`].
pub fn push_lease_next(script: &mut Script, pool: &Pool, owner: &str) -> Step {
    script.push(LEASE_NEXT, |b| {
        b.bind(pool.name.clone())
            .bind(i64::from(pool.first))
            .bind(i64::from(pool.last))
            .bind(i64::from(u32::from(pool.net.network())))
            .bind(owner.to_string());
    })
}

/// The address [`push_lease_next`] leased, or `None` if it leased none: the top of the pool is taken, or the
/// address is leased elsewhere (then [`allocate_free`] finds one, or fails naming why).
pub fn leased(pool: &Pool, ran: &Ran, step: Step) -> Result<Option<Ipv4Addr>> {
    let offset: Option<i64> = match ran.rows(step) {
        Ok(rows) => rows.first().map(|r| r.try_get(0)).transpose()?,
        Err(NotDone::Failed(e)) if is_unique_violation(e) => None,
        Err(e) => return Err(e.into()),
    };
    let Some(offset) = offset else { return Ok(None) };
    // Between the pool's first and last offsets, both u32, by the statement's WHERE.
    let offset = u32::try_from(offset)
        .map_err(|_| ApiError::internal(format!("leased offset {offset} is outside pool {}", pool.net)))?;
    Ok(Some(pool.addr(offset)))
}

/// Lease the lowest free address of `pool` to `owner` when the one past the highest lease is not to be had.
pub async fn allocate_free(tx: &mut Tx, pool: &Pool, owner: &str) -> Result<Ipv4Addr> {
    let offset = next_free(tx, pool).await?.ok_or_else(|| {
        ApiError::new(
            Kind::Exceeded,
            codes::INSUFFICIENT_ADDRESS_CAPACITY,
            format!("no free address left in {} ({} addresses, all in use)", pool.net, pool.capacity()),
        )
    })?;
    let addr = pool.addr(offset);
    insert(tx, &pool.name, i64::from(offset), &IpAddr::V4(addr), owner).await?;
    Ok(addr)
}

async fn next_free(tx: &mut Tx, pool: &Pool) -> Result<Option<u32>> {
    let (first, last) = (i64::from(pool.first), i64::from(pool.last));
    // Fast path: addresses are mostly handed out in order, so one past the highest lease is usually free. (Read
    // as in LEASE_NEXT.)
    let max: Option<i64> = sqlx::query_scalar(
        "SELECT ip FROM ip_leases WHERE pool = $1 AND ip BETWEEN $2 AND $3 ORDER BY ip DESC LIMIT 1",
    )
    .bind(&pool.name)
    .bind(first)
    .bind(last)
    .fetch_optional(&mut **tx)
    .await?;
    // Nothing in the pool lies above the highest lease, so one past it is free.
    match max {
        None => return Ok(u32::try_from(first).ok()),
        Some(m) if m < last => return Ok(u32::try_from(m + 1).ok()),
        Some(_) => {}
    }
    // Slow path: the first gap (released addresses are reused lowest first).
    if !is_taken(tx, pool, first).await? {
        return Ok(u32::try_from(first).ok());
    }
    let gap: Option<i64> = sqlx::query_scalar(
        "SELECT l.ip + 1 FROM ip_leases l WHERE l.pool = $1 AND l.ip >= $2 AND l.ip < $3 \
         AND NOT EXISTS (SELECT 1 FROM ip_leases x WHERE x.pool = $1 AND x.ip = l.ip + 1) ORDER BY l.ip LIMIT 1",
    )
    .bind(&pool.name)
    .bind(first)
    .bind(last)
    .fetch_optional(&mut **tx)
    .await?;
    Ok(gap.and_then(|g| u32::try_from(g).ok()))
}

async fn is_taken(tx: &mut Tx, pool: &Pool, offset: i64) -> Result<bool> {
    let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM ip_leases WHERE pool = $1 AND ip = $2")
        .bind(&pool.name)
        .bind(offset)
        .fetch_one(&mut **tx)
        .await?;
    Ok(n > 0)
}

/// Lease a specific address. `pool` is where it must lie; `None` means an address outside every pool.
pub async fn lease_fixed(tx: &mut Tx, pool: Option<&Pool>, addr: IpAddr, owner: &str) -> Result<()> {
    let (pool_name, offset) = match (pool, addr) {
        (Some(p), IpAddr::V4(v4)) => {
            let off = p.offset_of(v4).ok_or_else(|| {
                ApiError::bad_request(
                    codes::INVALID_ADDRESS,
                    format!(
                        "{addr} is not a usable address of {} (usable: {} to {})",
                        p.net,
                        p.addr(p.first),
                        p.addr(p.last)
                    ),
                )
            })?;
            (p.name.as_str(), i64::from(off))
        }
        (Some(p), IpAddr::V6(_)) => {
            return Err(ApiError::bad_request(codes::INVALID_ADDRESS, format!("{addr} is not in {}", p.net)));
        }
        (None, _) => (EXTERNAL, 0),
    };
    insert(tx, pool_name, offset, &addr, owner).await
}

async fn insert(tx: &mut Tx, pool: &str, offset: i64, addr: &IpAddr, owner: &str) -> Result<()> {
    sqlx::query("INSERT INTO ip_leases (pool, ip, addr, owner) VALUES ($1, $2, $3, $4)")
        .bind(pool)
        .bind(offset)
        .bind(addr.to_string())
        .bind(owner)
        .execute(&mut **tx)
        .await
        .map_err(conflict_on_unique(codes::ADDRESS_IN_USE, || format!("address {addr} is already in use")))?;
    Ok(())
}

/// Give back every address `owner` holds.
pub async fn release(tx: &mut Tx, owner: &str) -> Result<()> {
    sqlx::query("DELETE FROM ip_leases WHERE owner = $1").bind(owner).execute(&mut **tx).await?;
    Ok(())
}

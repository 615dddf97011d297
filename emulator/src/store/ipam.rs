//! IP address management. A lease row per address handed out; the unique index on the address is the
//! guarantee that no address is ever given twice while in use.

use std::net::{IpAddr, Ipv4Addr};

use fakecloud_api::codes;

use crate::config::Pool;
use crate::db::Tx;
use crate::error::{ApiError, Result, conflict_on_unique};

/// Pool key for fixed addresses outside the VPC (adopted machines).
const EXTERNAL: &str = "external";

/// Lease the lowest free address of `pool` to `owner`.
pub async fn allocate(tx: &mut Tx, pool: &Pool, owner: &str) -> Result<Ipv4Addr> {
    let offset = next_free(tx, pool).await?.ok_or_else(|| {
        ApiError::new(
            axum::http::StatusCode::UNPROCESSABLE_ENTITY,
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
    // Fast path: addresses are mostly handed out in order, so one past the highest lease is usually free.
    let max: Option<i64> = sqlx::query_scalar("SELECT MAX(ip) FROM ip_leases WHERE pool = ?1 AND ip BETWEEN ?2 AND ?3")
        .bind(&pool.name)
        .bind(first)
        .bind(last)
        .fetch_one(&mut **tx)
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
        "SELECT l.ip + 1 FROM ip_leases l WHERE l.pool = ?1 AND l.ip >= ?2 AND l.ip < ?3 \
         AND NOT EXISTS (SELECT 1 FROM ip_leases x WHERE x.pool = ?1 AND x.ip = l.ip + 1) ORDER BY l.ip LIMIT 1",
    )
    .bind(&pool.name)
    .bind(first)
    .bind(last)
    .fetch_optional(&mut **tx)
    .await?;
    Ok(gap.and_then(|g| u32::try_from(g).ok()))
}

async fn is_taken(tx: &mut Tx, pool: &Pool, offset: i64) -> Result<bool> {
    let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM ip_leases WHERE pool = ?1 AND ip = ?2")
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
    sqlx::query("INSERT INTO ip_leases (pool, ip, addr, owner) VALUES (?1, ?2, ?3, ?4)")
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
    sqlx::query("DELETE FROM ip_leases WHERE owner = ?1").bind(owner).execute(&mut **tx).await?;
    Ok(())
}

//! Client tokens for creates (`Idempotency-Key`): the key, the request it came with, and what it created.

use fakecloud_api::codes;

use crate::db::Tx;
use crate::error::{ApiError, Result};

/// What a key says about this request.
pub enum Replay {
    /// First use of the key (or no key): go ahead and create.
    Fresh,
    /// The same request was made before and created this resource.
    Existing(String),
}

/// Look the key up inside the create's transaction. The same key with a different request is a conflict.
pub async fn check(tx: &mut Tx, operation: &str, key: Option<&str>, request: &str) -> Result<Replay> {
    let Some(key) = key else { return Ok(Replay::Fresh) };
    let row: Option<(String, String)> =
        sqlx::query_as("SELECT request, resource_id FROM idempotency_keys WHERE operation = ?1 AND key = ?2")
            .bind(operation)
            .bind(key)
            .fetch_optional(&mut **tx)
            .await?;
    match row {
        None => Ok(Replay::Fresh),
        Some((old, id)) if old == request => Ok(Replay::Existing(id)),
        Some(_) => Err(ApiError::conflict(
            codes::IDEMPOTENCY_KEY_REUSED,
            format!("Idempotency-Key {key:?} was already used for a different {operation} request; use a new key"),
        )),
    }
}

pub async fn record(
    tx: &mut Tx,
    operation: &str,
    key: Option<&str>,
    request: &str,
    resource_id: &str,
    now: i64,
) -> Result<()> {
    if let Some(key) = key {
        sqlx::query("INSERT INTO idempotency_keys (operation, key, request, resource_id, created_at) VALUES (?1, ?2, ?3, ?4, ?5)")
            .bind(operation)
            .bind(key)
            .bind(request)
            .bind(resource_id)
            .bind(now)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}

/// Validate the header value.
pub fn validate_key(key: &str) -> Result<()> {
    crate::validate::IDEMPOTENCY_KEY.check("Idempotency-Key", key)
}

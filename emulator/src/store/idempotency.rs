//! Client tokens for creates (`Idempotency-Key`): the key, the request it came with, and what it created.

use fakecloud_api::codes;

use sqlx::Row;
use sqlx::any::AnyRow;

use crate::db::{Script, Step, Tx};
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
    let mut script = Script::new();
    let lookup = push_lookup(&mut script, operation, key);
    judge(tx.run(script).await.rows(lookup)?, operation, key, request)
}

/// The key's look-up, pushed onto a create's list: see [`judge`].
pub fn push_lookup(script: &mut Script, operation: &str, key: &str) -> Step {
    script.push("SELECT request, resource_id FROM idempotency_keys WHERE operation = $1 AND key = $2", |b| {
        b.bind(operation.to_string()).bind(key.to_string());
    })
}

/// What the rows of [`push_lookup`] say about this request.
pub fn judge(rows: &[AnyRow], operation: &str, key: &str, request: &str) -> Result<Replay> {
    let Some(row) = rows.first() else { return Ok(Replay::Fresh) };
    let (old, id): (String, String) = (row.try_get(0)?, row.try_get(1)?);
    if old == request {
        return Ok(Replay::Existing(id));
    }
    Err(ApiError::conflict(
        codes::IDEMPOTENCY_KEY_REUSED,
        format!("Idempotency-Key {key:?} was already used for a different {operation} request; use a new key"),
    ))
}

/// Remember what a create with `key` made, pushed onto its list after the create's own insert (so it runs only
/// if that succeeded); `None` without a key.
pub fn push_record(
    script: &mut Script,
    operation: &str,
    key: Option<&str>,
    request: &str,
    resource_id: &str,
    now: i64,
) -> Option<Step> {
    let key = key?;
    Some(script.push(
        "INSERT INTO idempotency_keys (operation, key, request, resource_id, created_at) VALUES ($1, $2, $3, $4, $5)",
        |b| {
            b.bind(operation.to_string())
                .bind(key.to_string())
                .bind(request.to_string())
                .bind(resource_id.to_string())
                .bind(now);
        },
    ))
}

/// Validate the header value.
pub fn validate_key(key: &str) -> Result<()> {
    crate::validate::IDEMPOTENCY_KEY.check("Idempotency-Key", key)
}

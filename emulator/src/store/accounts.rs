//! The accounts created on the emulator, their tokens and leases, in its own database (see `crate::accounts`).

use fakecloud_api::codes;

use crate::auth::Tokens;
use crate::call;
use crate::db::{Db, Tx, now_ms};
use crate::error::{Result, conflict_on_unique};

#[derive(sqlx::FromRow)]
pub struct Row {
    pub id: String,
    pub user_token: String,
    pub admin_token: String,
    pub created_at: i64,
    pub lease_holder: Option<String>,
    pub lease_expires_at: Option<i64>,
}

impl Row {
    pub fn tokens(&self) -> Tokens {
        Tokens { user: self.user_token.clone(), admin: self.admin_token.clone() }
    }
}

/// The counter (in `counters`) every change of who the accounts are and what their tokens are bumps, in the
/// change's transaction: other emulators on the database open, close or reopen theirs when it moves.
pub const GENERATION: &str = "accounts_generation";

pub async fn generation(db: &Db) -> Result<i64> {
    let n: Option<i64> = sqlx::query_scalar("SELECT n FROM counters WHERE key = $1")
        .bind(GENERATION)
        .fetch_optional(db.reader())
        .await?;
    Ok(n.unwrap_or(0))
}

async fn bump(tx: &mut Tx) -> Result<()> {
    sqlx::query("INSERT INTO counters (key, n) VALUES ($1, 1) ON CONFLICT(key) DO UPDATE SET n = counters.n + 1")
        .bind(GENERATION)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

pub async fn list(db: &Db) -> Result<Vec<Row>> {
    Ok(sqlx::query_as(
        "SELECT id, user_token, admin_token, created_at, lease_holder, lease_expires_at FROM accounts ORDER BY id",
    )
    .fetch_all(db.reader())
    .await?)
}

/// Record a new account; returns when it was created.
pub async fn insert(db: &Db, id: &str, tokens: &Tokens) -> Result<i64> {
    let mut tx = db.write().await?;
    let now = now_ms();
    sqlx::query("INSERT INTO accounts (id, user_token, admin_token, created_at) VALUES ($1, $2, $3, $4)")
        .bind(id)
        .bind(&tokens.user)
        .bind(&tokens.admin)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(conflict_on_unique(codes::ACCOUNT_ALREADY_EXISTS, || format!("account {id} exists")))?;
    bump(&mut tx).await?;
    call::commit(tx, id).await?;
    Ok(now)
}

/// Lease the account to `holder` until `expires_at`.
pub async fn lease(db: &Db, id: &str, holder: &str, expires_at: i64) -> Result<()> {
    let mut tx = db.write().await?;
    sqlx::query("UPDATE accounts SET lease_holder = $2, lease_expires_at = $3 WHERE id = $1")
        .bind(id)
        .bind(holder)
        .bind(expires_at)
        .execute(&mut *tx)
        .await?;
    Ok(call::commit(tx, id).await?)
}

/// The account wiped: new tokens, no lease.
pub async fn wiped(db: &Db, id: &str, tokens: &Tokens) -> Result<()> {
    let mut tx = db.write().await?;
    sqlx::query(
        "UPDATE accounts SET user_token = $2, admin_token = $3, lease_holder = NULL, lease_expires_at = NULL \
         WHERE id = $1",
    )
    .bind(id)
    .bind(&tokens.user)
    .bind(&tokens.admin)
    .execute(&mut *tx)
    .await?;
    bump(&mut tx).await?;
    Ok(call::commit(tx, id).await?)
}

pub async fn delete(db: &Db, id: &str) -> Result<()> {
    let mut tx = db.write().await?;
    sqlx::query("DELETE FROM accounts WHERE id = $1").bind(id).execute(&mut *tx).await?;
    bump(&mut tx).await?;
    call::commit(tx, id).await?;
    Ok(())
}

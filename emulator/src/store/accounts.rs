//! The accounts created on the emulator and their tokens, in its own database (see `crate::accounts`).

use fakecloud_api::codes;

use crate::auth::Tokens;
use crate::call;
use crate::db::{Db, now_ms};
use crate::error::{Result, conflict_on_unique};

#[derive(sqlx::FromRow)]
pub struct Row {
    pub id: String,
    pub user_token: String,
    pub admin_token: String,
    pub created_at: i64,
}

pub async fn list(db: &Db) -> Result<Vec<Row>> {
    Ok(sqlx::query_as("SELECT id, user_token, admin_token, created_at FROM accounts ORDER BY id")
        .fetch_all(db.reader())
        .await?)
}

/// Record a new account; returns when it was created.
pub async fn insert(db: &Db, id: &str, tokens: &Tokens) -> Result<i64> {
    let mut tx = db.write().await?;
    let now = now_ms();
    sqlx::query("INSERT INTO accounts (id, user_token, admin_token, created_at) VALUES (?1, ?2, ?3, ?4)")
        .bind(id)
        .bind(&tokens.user)
        .bind(&tokens.admin)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(conflict_on_unique(codes::ACCOUNT_ALREADY_EXISTS, || format!("account {id} exists")))?;
    call::commit(tx, id).await?;
    Ok(now)
}

pub async fn delete(db: &Db, id: &str) -> Result<()> {
    let mut tx = db.write().await?;
    sqlx::query("DELETE FROM accounts WHERE id = ?1").bind(id).execute(&mut *tx).await?;
    call::commit(tx, id).await?;
    Ok(())
}

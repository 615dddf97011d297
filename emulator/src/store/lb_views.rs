//! The data plane's view of each load balancer, published by the replica serving them for the others on a
//! shared PostgreSQL database (table `lb_views`, and counter `lb_views_at`, when it last published): see
//! `crate::dataplane::published`. A view is the data plane's JSON, kept as it is written.

use std::collections::HashMap;

use crate::db::Db;
use crate::error::Result;

/// The counter holding when the serving replica last published.
const PUBLISHED_AT: &str = "lb_views_at";

/// Publish at `now`, in one transaction: write the `changed` views (load balancer ID, view) and, with `all`
/// (every view now, `changed` among them), drop the stored views of load balancers not in it.
pub async fn publish(db: &Db, changed: &[(&str, &str)], all: Option<&HashMap<String, String>>, now: i64) -> Result<()> {
    let mut tx = db.writer().begin().await?;
    for (id, view) in changed {
        sqlx::query("INSERT INTO lb_views (lb_id, view) VALUES ($1, $2) ON CONFLICT (lb_id) DO UPDATE SET view = $2")
            .bind(id)
            .bind(view)
            .execute(&mut *tx)
            .await?;
    }
    if let Some(views) = all {
        let stored: Vec<String> = sqlx::query_scalar("SELECT lb_id FROM lb_views").fetch_all(&mut *tx).await?;
        for id in stored.iter().filter(|id| !views.contains_key(*id)) {
            sqlx::query("DELETE FROM lb_views WHERE lb_id = $1").bind(id).execute(&mut *tx).await?;
        }
    }
    sqlx::query("INSERT INTO counters (key, n) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET n = $2")
        .bind(PUBLISHED_AT)
        .bind(now)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

/// The views (load balancer ID, view; `id`: that one's only), none unless the last publication was after
/// `since`.
pub async fn read(db: &Db, id: Option<&str>, since: i64) -> Result<Vec<(String, String)>> {
    Ok(sqlx::query_as(
        "SELECT lb_id, view FROM lb_views WHERE ($1 IS NULL OR lb_id = $1) \
         AND (SELECT n FROM counters WHERE key = $2) > $3",
    )
    .bind(id)
    .bind(PUBLISHED_AT)
    .bind(since)
    .fetch_all(db.reader())
    .await?)
}

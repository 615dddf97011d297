//! The audit log's table: its rows, written in order and read by `seq`.

use fakecloud_api::AuditEntry;
use sqlx::{AnyConnection, AnyPool};

use crate::db::backend::Backend;
use crate::db::values::rfc3339;

/// One call, as the HTTP layer saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub time_ms: i64,
    pub request_id: String,
    pub role: &'static str,
    pub operation: String,
    pub method: String,
    pub path: String,
    pub resource_id: Option<String>,
    pub status: u16,
    pub error_code: Option<String>,
    pub latency_us: i64,
    pub fault: Option<String>,
}

/// Write `entries` in one statement (as their batch's commit does); returns their `seq`s, in order.
pub async fn insert_many(conn: &mut AnyConnection, entries: &[Record]) -> Result<Vec<i64>, sqlx::Error> {
    if entries.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<serde_json::Value> = entries
        .iter()
        .map(|r| {
            serde_json::json!([
                r.time_ms,
                r.request_id,
                r.role,
                r.operation,
                r.method,
                r.path,
                r.resource_id,
                r.status,
                r.error_code,
                r.latency_us,
                r.fault
            ])
        })
        .collect();
    // One JSON parameter for any number of entries: one prepared statement, inserted in order.
    // (The casts are PostgreSQL's: `->>` gives text. SQLite's `->>` gives the JSON value's own type, and its
    // INTEGER columns would take the text anyway.)
    let sql = format!(
        "INSERT INTO audit_log (time, request_id, role, operation, method, path, resource_id, status, error_code, latency_us, fault) \
         SELECT CAST(value ->> 0 AS BIGINT), value ->> 1, value ->> 2, value ->> 3, value ->> 4, value ->> 5, value ->> 6, \
         CAST(value ->> 7 AS BIGINT), value ->> 8, CAST(value ->> 9 AS BIGINT), value ->> 10 FROM {} ORDER BY key RETURNING seq",
        Backend::of(conn).json_rows()
    );
    let mut seqs: Vec<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(serde_json::Value::Array(rows).to_string())
        .fetch_all(conn)
        .await?;
    // RETURNING's order is not promised; the inserts' order is, and `seq` grows with it.
    seqs.sort_unstable();
    Ok(seqs)
}

#[derive(sqlx::FromRow)]
struct Row {
    seq: i64,
    time: i64,
    request_id: String,
    role: String,
    operation: String,
    method: String,
    path: String,
    resource_id: Option<String>,
    status: i64,
    error_code: Option<String>,
    latency_us: i64,
    fault: Option<String>,
}

/// Which entries a read of the log wants (the API's query, checked).
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Entries after this `seq`.
    pub after: i64,
    pub operation: Option<String>,
    pub resource: Option<String>,
    pub status: Option<u16>,
    /// Entries at or after this time (Unix ms).
    pub since_ms: Option<i64>,
    pub limit: i64,
}

/// The entries `q` selects, oldest first.
pub async fn query(db: &AnyPool, q: &Filter) -> Result<Vec<AuditEntry>, sqlx::Error> {
    let mut sql = String::from(
        "SELECT seq, time, request_id, role, operation, method, path, resource_id, status, error_code, latency_us, fault FROM audit_log WHERE seq > $1",
    );
    // Every placeholder numbered `$N`: what both backends take.
    let mut args: Vec<Arg> = vec![Arg::I(q.after)];
    let mut filter = |sql: &mut String, clause: &str, arg: Arg| {
        args.push(arg);
        sql.push_str(&format!("{clause}${}", args.len()));
    };
    if let Some(op) = &q.operation {
        filter(&mut sql, " AND operation = ", Arg::S(op.clone()));
    }
    if let Some(r) = &q.resource {
        filter(&mut sql, " AND resource_id = ", Arg::S(r.clone()));
    }
    if let Some(s) = q.status {
        filter(&mut sql, " AND status = ", Arg::I(i64::from(s)));
    }
    if let Some(t) = q.since_ms {
        filter(&mut sql, " AND time >= ", Arg::I(t));
    }
    filter(&mut sql, " ORDER BY seq LIMIT ", Arg::I(q.limit));
    let mut query = sqlx::query_as::<_, Row>(sqlx::AssertSqlSafe(sql));
    for a in args {
        query = match a {
            Arg::I(i) => query.bind(i),
            Arg::S(s) => query.bind(s),
        };
    }
    let rows = query.fetch_all(db).await?;
    Ok(rows
        .into_iter()
        .map(|r| AuditEntry {
            seq: r.seq,
            time: rfc3339(r.time),
            request_id: r.request_id,
            role: r.role,
            operation: r.operation,
            method: r.method,
            path: r.path,
            resource_id: r.resource_id,
            status: u16::try_from(r.status).unwrap_or(0),
            error_code: r.error_code,
            latency_ms: r.latency_us as f64 / 1000.0,
            fault: r.fault,
        })
        .collect())
}

enum Arg {
    I(i64),
    S(String),
}

/// The `seq` of the newest entry written (0 for an empty log).
pub async fn newest_seq(db: &AnyPool) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT COALESCE(MAX(seq), 0) FROM audit_log").fetch_one(db).await
}

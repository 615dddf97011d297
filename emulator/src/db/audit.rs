//! The audit log's rows: every API call, bounded to the newest N entries. Where an entry is written depends on
//! what the call did, so that no answered change can be lost in a crash:
//!
//! - a call that changes state has its entry written in the transaction that makes the change (see
//!   [`crate::call::commit`] and [`super::Tx::commit_with_audit`]): both survive a `kill -9` together, or neither does;
//! - any other call that is not a read (one refused, or one whose change is not a transaction) has its entry
//!   written before it is answered ([`AuditSink::record_now`]);
//! - reads are recorded in batches a few milliseconds later ([`AuditSink::record`]), so recording never slows
//!   them down; those recorded in the last moments before a crash can be lost.
//!
//! Pending entries are only ever taken by whoever holds the writer connection, and each writer first writes
//! everything pending, so the log's order is the order calls were answered in, and a read of the log (after
//! [`AuditSink::flush`]) includes every call made before it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fakecloud_api::AuditEntry;
use sqlx::SqliteConnection;
use tokio::sync::Notify;

use super::{Db, WriteError, rfc3339};

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

#[derive(Debug, Clone)]
pub struct AuditSink(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    db: Db,
    pending: Mutex<Vec<Record>>,
    wake: Notify,
    max_entries: u64,
    /// Entries written since the log was last trimmed to `max_entries`.
    since_trim: AtomicU64,
}

/// How long the batch writer waits for more reads to share a transaction with.
const GATHER: Duration = Duration::from_millis(5);

impl AuditSink {
    pub fn spawn(db: Db, max_entries: u64) -> Self {
        let sink = Self(Arc::new(Shared {
            db,
            pending: Mutex::default(),
            wake: Notify::new(),
            max_entries,
            since_trim: AtomicU64::new(0),
        }));
        let writer = sink.clone();
        tokio::spawn(async move {
            loop {
                writer.0.wake.notified().await;
                // A steady trickle of reads shares one transaction instead of taking the writer once per call.
                tokio::time::sleep(GATHER).await;
                if let Err(e) = writer.write_pending().await {
                    tracing::error!(error = %e, "cannot write audit entries; will retry");
                }
            }
        });
        sink
    }

    /// Record a read: written with the next batch.
    pub fn record(&self, r: Record) {
        self.0.pending.lock().unwrap_or_else(|p| p.into_inner()).push(r);
        self.0.wake.notify_one();
    }

    /// Record a call and return once its entry (and every one before it) is in the database.
    pub async fn record_now(&self, r: Record) {
        self.0.pending.lock().unwrap_or_else(|p| p.into_inner()).push(r);
        self.flush().await;
    }

    /// Rewrite the entry `seq`, written in its call's transaction, as the call was finally answered (a fault
    /// changed the answer after the change was made).
    pub async fn amend(&self, seq: i64, r: &Record) {
        let updated = sqlx::query(
            "UPDATE audit_log SET status = ?1, error_code = ?2, fault = ?3, resource_id = ?4, latency_us = ?5 WHERE seq = ?6",
        )
        .bind(i64::from(r.status))
        .bind(&r.error_code)
        .bind(&r.fault)
        .bind(&r.resource_id)
        .bind(r.latency_us)
        .bind(seq)
        .execute(self.0.db.writer())
        .await;
        if let Err(e) = updated {
            tracing::error!(error = %e, seq, "cannot amend an audit entry");
        }
    }

    /// Wait until everything recorded before this call is in the database.
    pub async fn flush(&self) {
        if let Err(e) = self.write_pending().await {
            tracing::error!(error = %e, "cannot write audit entries");
        }
    }

    /// Write what is pending, in one transaction on the writer. Always takes the writer, even with nothing
    /// pending: whoever took the pending entries before holds it until they are committed.
    async fn write_pending(&self) -> Result<(), WriteError> {
        let mut tx = self.0.db.write().await?;
        let batch = self.take_pending();
        let written = async {
            let threshold = self.0.max_entries.div_ceil(10).max(1);
            let since = self.0.since_trim.fetch_add(batch.len() as u64, Ordering::SeqCst) + batch.len() as u64;
            if since < threshold {
                return tx.commit_with_audit(batch.clone()).await.map(drop);
            }
            // The trim counts from the newest entry, so every entry before it is written first: the batch's
            // earlier calls', then these.
            tx.write_queued_audit().await?;
            insert_many(&mut tx, &batch).await?;
            sqlx::query("DELETE FROM audit_log WHERE seq <= (SELECT MAX(seq) FROM audit_log) - ?1")
                .bind(i64::try_from(self.0.max_entries).unwrap_or(i64::MAX))
                .execute(&mut *tx)
                .await?;
            self.0.since_trim.store(0, Ordering::SeqCst);
            tx.commit().await
        }
        .await;
        if let Err(e) = written {
            self.requeue(batch);
            return Err(e);
        }
        Ok(())
    }

    pub(crate) fn take_pending(&self) -> Vec<Record> {
        std::mem::take(&mut *self.0.pending.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Put entries whose transaction failed back in front of those recorded since.
    pub(crate) fn requeue(&self, mut batch: Vec<Record>) {
        if batch.is_empty() {
            return;
        }
        let mut pending = self.0.pending.lock().unwrap_or_else(|p| p.into_inner());
        batch.append(&mut pending);
        *pending = batch;
    }

    /// Count entries written outside a batch, waking the batch writer when the log is due for trimming.
    pub(crate) fn note_written(&self, n: usize) {
        let since = self.0.since_trim.fetch_add(n as u64, Ordering::SeqCst) + n as u64;
        if since >= self.0.max_entries.div_ceil(10).max(1) {
            self.0.wake.notify_one();
        }
    }
}

/// Write `entries` in one statement (as their batch's commit does); returns their `seq`s, in order.
pub async fn insert_many(conn: &mut SqliteConnection, entries: &[Record]) -> Result<Vec<i64>, sqlx::Error> {
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
    let mut seqs: Vec<i64> = sqlx::query_scalar(
        "INSERT INTO audit_log (time, request_id, role, operation, method, path, resource_id, status, error_code, latency_us, fault) \
         SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, value ->> 5, value ->> 6, value ->> 7, \
         value ->> 8, value ->> 9, value ->> 10 FROM json_each(?1) ORDER BY key RETURNING seq",
    )
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
pub async fn query(db: &Db, q: &Filter) -> Result<Vec<AuditEntry>, sqlx::Error> {
    let mut sql = String::from(
        "SELECT seq, time, request_id, role, operation, method, path, resource_id, status, error_code, latency_us, fault FROM audit_log WHERE seq > ?1",
    );
    // Every placeholder numbered: sqlx numbers bare `?` on its own.
    let mut args: Vec<Arg> = vec![Arg::I(q.after)];
    let mut filter = |sql: &mut String, clause: &str, arg: Arg| {
        args.push(arg);
        sql.push_str(&format!("{clause}?{}", args.len()));
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
    let rows = query.fetch_all(db.reader()).await?;
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
pub async fn newest_seq(db: &Db) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT COALESCE(MAX(seq), 0) FROM audit_log").fetch_one(db.reader()).await
}

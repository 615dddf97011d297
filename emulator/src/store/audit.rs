//! The audit log: every API call, bounded to the newest N entries. Where an entry is written depends on what
//! the call did, so that no answered change can be lost in a crash:
//!
//! - a call that changes state writes its entry in the transaction that makes the change ([`commit`]): both
//!   survive a `kill -9` together, or neither does;
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
use std::time::{Duration, Instant};

use fakecloud_api::limits::{AUDIT_LIMIT_DEFAULT, AUDIT_LIMIT_MAX, AUDIT_LIMIT_MIN};
use fakecloud_api::{AuditEntry, AuditQuery};
use sqlx::SqliteConnection;
use tokio::sync::Notify;

use crate::db::{Db, Tx, now_ms, rfc3339};
use crate::error::{ApiError, Result};

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

tokio::task_local! {
    /// The call being answered, for the code that answers it: its request ID, and the entry a change writes.
    static CALL: Arc<CallContext>;
}

/// What a call's handlers need to know about it while it runs.
#[derive(Debug)]
pub struct CallContext {
    request_id: String,
    /// For a call that may change state: its entry as it will read if the change is made, until it is written.
    entry: Option<Mutex<Entry>>,
}

#[derive(Debug)]
struct Entry {
    record: Record,
    started: Instant,
    sink: AuditSink,
    written: Option<i64>,
}

impl CallContext {
    /// `change`: the entry to write, with the status of success, if the call commits a change.
    pub fn new(request_id: String, change: Option<(Record, AuditSink)>) -> Arc<Self> {
        let entry =
            change.map(|(record, sink)| Mutex::new(Entry { record, started: Instant::now(), sink, written: None }));
        Arc::new(Self { request_id, entry })
    }

    /// Run `f` as this call.
    pub async fn scope<F: std::future::Future>(self: &Arc<Self>, f: F) -> F::Output {
        CALL.scope(self.clone(), f).await
    }

    /// The entry written in the call's transaction, if there was one: its sequence number and how it read.
    pub fn written(&self) -> Option<(i64, Record)> {
        let entry = self.entry.as_ref()?.lock().unwrap_or_else(|p| p.into_inner());
        entry.written.map(|seq| (seq, entry.record.clone()))
    }
}

/// The request ID of the call being answered (empty outside a call).
pub fn request_id() -> String {
    CALL.try_with(|c| c.request_id.clone()).unwrap_or_default()
}

/// Commit a transaction that changes state about `resource_id` (`""`: none in particular), writing the current
/// call's audit entry in it (and, first, every entry still pending, to keep the log in order).
pub async fn commit(tx: Tx, resource_id: &str) -> Result<()> {
    let claimed = CALL.try_with(|c| c.claim(resource_id)).ok().flatten();
    let Some((record, sink)) = claimed else {
        tx.commit().await?;
        return Ok(());
    };
    let earlier = sink.take_pending();
    let mut entries = earlier.clone();
    entries.push(record);
    match tx.commit_with_audit(entries).await {
        Ok(seq) => {
            // Only now: were the commit to fail, the call's entry would still have to be written. (`seq` is
            // there: the call gave entries.)
            if let Some(seq) = seq {
                let _ = CALL.try_with(|c| c.mark_written(seq));
            }
            sink.note_written(earlier.len() + 1);
            Ok(())
        }
        Err(e) => {
            sink.requeue(earlier);
            Err(e.into())
        }
    }
}

impl CallContext {
    /// The call's entry, completed, if it is still to be written.
    fn claim(&self, resource_id: &str) -> Option<(Record, AuditSink)> {
        let mut entry = self.entry.as_ref()?.lock().unwrap_or_else(|p| p.into_inner());
        if entry.written.is_some() {
            return None;
        }
        let elapsed = entry.started.elapsed();
        let record = &mut entry.record;
        record.time_ms = now_ms();
        record.resource_id = (!resource_id.is_empty()).then(|| resource_id.to_string());
        record.latency_us = i64::try_from(elapsed.as_micros()).unwrap_or(i64::MAX);
        Some((entry.record.clone(), entry.sink.clone()))
    }

    fn mark_written(&self, seq: i64) {
        if let Some(entry) = &self.entry {
            entry.lock().unwrap_or_else(|p| p.into_inner()).written = Some(seq);
        }
    }
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
    async fn write_pending(&self) -> Result<()> {
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
            return Err(e.into());
        }
        Ok(())
    }

    fn take_pending(&self) -> Vec<Record> {
        std::mem::take(&mut *self.0.pending.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Put entries whose transaction failed back in front of those recorded since.
    fn requeue(&self, mut batch: Vec<Record>) {
        if batch.is_empty() {
            return;
        }
        let mut pending = self.0.pending.lock().unwrap_or_else(|p| p.into_inner());
        batch.append(&mut pending);
        *pending = batch;
    }

    /// Count entries written outside a batch, waking the batch writer when the log is due for trimming.
    fn note_written(&self, n: usize) {
        let since = self.0.since_trim.fetch_add(n as u64, Ordering::SeqCst) + n as u64;
        if since >= self.0.max_entries.div_ceil(10).max(1) {
            self.0.wake.notify_one();
        }
    }
}

/// Write `entries` in one statement (as their batch's commit does); returns their `seq`s, in order.
pub(crate) async fn insert_many(conn: &mut SqliteConnection, entries: &[Record]) -> Result<Vec<i64>, sqlx::Error> {
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

pub async fn query(db: &Db, q: &AuditQuery) -> Result<Vec<AuditEntry>> {
    let limit = i64::from(crate::validate::in_range(
        "limit",
        q.limit.unwrap_or(AUDIT_LIMIT_DEFAULT),
        AUDIT_LIMIT_MIN,
        AUDIT_LIMIT_MAX,
    )?);
    let since = match &q.since {
        None => None,
        Some(s) => Some(
            s.parse::<jiff::Timestamp>()
                .map_err(|e| {
                    ApiError::invalid(
                        "since",
                        format!("{s:?} is not an RFC 3339 time such as 2026-11-22T10:00:00Z ({e})"),
                    )
                })?
                .as_millisecond(),
        ),
    };
    let mut sql = String::from(
        "SELECT seq, time, request_id, role, operation, method, path, resource_id, status, error_code, latency_us, fault FROM audit_log WHERE seq > ?1",
    );
    // Every placeholder numbered: sqlx numbers bare `?` on its own.
    let mut args: Vec<Arg> = vec![Arg::I(q.after.unwrap_or(0))];
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
    if let Some(t) = since {
        filter(&mut sql, " AND time >= ", Arg::I(t));
    }
    filter(&mut sql, " ORDER BY seq LIMIT ", Arg::I(limit));
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
pub async fn newest_seq(db: &Db) -> Result<i64> {
    Ok(sqlx::query_scalar("SELECT COALESCE(MAX(seq), 0) FROM audit_log").fetch_one(db.reader()).await?)
}

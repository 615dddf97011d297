//! The audit log: every API call, written in batches by one task so that recording never slows a request down,
//! and bounded to the newest N entries. A read first waits until everything recorded so far is written.

use std::time::Duration;

use fakecloud_api::{AuditEntry, AuditQuery};
use tokio::sync::{mpsc, oneshot};

use crate::db::{Db, rfc3339};
use crate::error::{ApiError, Result};

/// One call, as the HTTP layer saw it.
#[derive(Debug, Clone)]
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

enum Msg {
    Record(Record),
    Flush(oneshot::Sender<()>),
}

#[derive(Debug, Clone)]
pub struct AuditSink {
    tx: mpsc::UnboundedSender<Msg>,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("audit message")
    }
}

const BATCH: usize = 512;
const GATHER: Duration = Duration::from_millis(5);

impl AuditSink {
    pub fn spawn(db: Db, max_entries: u64) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<Msg>();
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(BATCH);
            let mut waiters = Vec::new();
            let mut written_since_trim = 0u64;
            while let Some(first) = rx.recv().await {
                let mut next = Some(first);
                // Drain what is queued (up to a batch) into one transaction.
                while let Some(msg) = next.take() {
                    match msg {
                        Msg::Record(r) => batch.push(r),
                        Msg::Flush(w) => waiters.push(w),
                    }
                    if batch.len() < BATCH {
                        next = match rx.try_recv() {
                            Ok(m) => Some(m),
                            // Nothing queued: wait briefly for more, so a steady trickle of calls shares one
                            // transaction instead of taking the writer once per call. A flush ends the wait.
                            Err(_) if waiters.is_empty() => {
                                tokio::time::timeout(GATHER, rx.recv()).await.ok().flatten()
                            }
                            Err(_) => None,
                        };
                    }
                }
                if !batch.is_empty() {
                    written_since_trim += batch.len() as u64;
                    let trim = written_since_trim >= max_entries.div_ceil(10).max(1);
                    if let Err(e) = write(&db, &batch, trim.then_some(max_entries)).await {
                        tracing::error!(error = %e, lost = batch.len(), "cannot write audit entries");
                    }
                    if trim {
                        written_since_trim = 0;
                    }
                    batch.clear();
                }
                for w in waiters.drain(..) {
                    let _ = w.send(());
                }
            }
        });
        Self { tx }
    }

    pub fn record(&self, r: Record) {
        // The receiver only goes away at shutdown; a record lost then is of no consequence.
        let _ = self.tx.send(Msg::Record(r));
    }

    /// Wait until everything recorded before this call is in the database.
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Msg::Flush(tx)).is_ok() {
            let _ = tokio::time::timeout(Duration::from_secs(10), rx).await;
        }
    }
}

async fn write(db: &Db, batch: &[Record], keep: Option<u64>) -> Result<()> {
    let mut tx = db.write().await?;
    for r in batch {
        sqlx::query(
            "INSERT INTO audit_log (time, request_id, role, operation, method, path, resource_id, status, error_code, latency_us, fault) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        )
        .bind(r.time_ms)
        .bind(&r.request_id)
        .bind(r.role)
        .bind(&r.operation)
        .bind(&r.method)
        .bind(&r.path)
        .bind(&r.resource_id)
        .bind(i64::from(r.status))
        .bind(&r.error_code)
        .bind(r.latency_us)
        .bind(&r.fault)
        .execute(&mut *tx)
        .await?;
    }
    if let Some(keep) = keep {
        sqlx::query("DELETE FROM audit_log WHERE seq <= (SELECT MAX(seq) FROM audit_log) - ?1")
            .bind(i64::try_from(keep).unwrap_or(i64::MAX))
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(())
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
    let limit = match q.limit {
        None => 1000,
        Some(n @ 1..=10_000) => i64::from(n),
        Some(n) => return Err(ApiError::invalid("limit", format!("must be between 1 and 10000 (got {n})"))),
    };
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

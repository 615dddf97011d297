//! When the audit log's entries are written (see the module above): pending reads in batches, other calls at
//! once, a change's entry amended when a fault changed its answer, and the log trimmed to its newest entries.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use super::rows::{Record, insert_many};
use crate::db::{Db, WriteError};

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
            "UPDATE audit_log SET status = $1, error_code = $2, fault = $3, resource_id = $4, latency_us = $5 WHERE seq = $6",
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
            sqlx::query("DELETE FROM audit_log WHERE seq <= (SELECT MAX(seq) FROM audit_log) - $1")
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

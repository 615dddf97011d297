//! The call being answered, as the code that answers it sees it: its request ID (for error bodies, wherever an
//! error is made) and, for a call that may change state, its audit entry, written in the transaction of the
//! change ([`commit`]); and the resource its answer is about ([`ResourceId`], on the response). The gatekeeper
//! (`http::gatekeeper`) makes one per call and runs the call in its scope.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::db::audit::rows::Record;
use crate::db::audit::writer::AuditSink;
use crate::db::{Tx, WriteError, now_ms};

/// The resource a response is about, for the audit log.
#[derive(Debug, Clone)]
pub struct ResourceId(pub String);

/// Every resource a call's committed changes were about (see [`written`]), on the response of a face that has no
/// one [`ResourceId`] to give (an AWS answer): what eventual consistency hides.
#[derive(Debug, Clone)]
pub struct Written(pub Vec<String>);

/// The error code of a response, for the audit log and metrics.
#[derive(Debug, Clone)]
pub struct ErrorCode(pub String);

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
    /// The resources its committed changes were about, in order.
    written: Mutex<Vec<String>>,
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
        Arc::new(Self { request_id, entry, written: Mutex::default() })
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

/// Name the call being answered, for a face that learns its operation and caller from the request (the AWS face,
/// from its body and signature): the entry its change writes says so.
pub fn learned(operation: &str, role: &'static str) {
    let _ = CALL.try_with(|c| {
        if let Some(entry) = &c.entry {
            let mut entry = entry.lock().unwrap_or_else(|p| p.into_inner());
            entry.record.operation = operation.to_string();
            entry.record.role = role;
        }
    });
}

/// The resources the current call's committed changes were about, in order (see [`commit`], [`commit_all`]).
pub fn written() -> Vec<String> {
    CALL.try_with(|c| c.written.lock().unwrap_or_else(|p| p.into_inner()).clone()).unwrap_or_default()
}

/// Commit a transaction that changes state about `resource_id` (`""`: none in particular), writing the current
/// call's audit entry in it (and, first, every entry still pending, to keep the log in order).
pub async fn commit(tx: Tx, resource_id: &str) -> Result<(), WriteError> {
    commit_all(tx, &[resource_id]).await
}

/// Commit a transaction that changes state about each of `resource_ids` (a batch's: its entry names the one
/// resource if there is one, else none), as [`commit`] does.
pub async fn commit_all(tx: Tx, resource_ids: &[&str]) -> Result<(), WriteError> {
    let about = match resource_ids {
        [one] => one,
        _ => "",
    };
    commit_entry(tx, about).await?;
    let _ = CALL.try_with(|c| {
        let ids = resource_ids.iter().filter(|id| !id.is_empty()).map(|id| id.to_string());
        c.written.lock().unwrap_or_else(|p| p.into_inner()).extend(ids);
    });
    Ok(())
}

async fn commit_entry(tx: Tx, resource_id: &str) -> Result<(), WriteError> {
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
            Err(e)
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

//! Group commit: concurrent writes share the single writer connection's transactions.
//!
//! Every write is a [`Tx`]: one call's SAVEPOINT inside the batch transaction open on the writer connection.
//! Calls take the writer one at a time, in arrival order (a fair lock), so each sees every change made before
//! it, committed or not: a quota check and the write it guards still cannot be split by another call. A call
//! that ends without committing (an error, a replay, a dropped request) is rolled back to its savepoint and
//! fails alone. A call that commits releases its savepoint and waits: it is answered only once its batch is
//! committed, so an answered change survives a `kill -9` exactly as before. A call that fails, or finds its work
//! done already (an idempotent replay), may have read changes of the batch not yet committed; run inside
//! [`settled`] (the HTTP layer runs every call so), it too is answered only after that commit.
//!
//! A batch is committed by the committer task, woken by every call that ends; it takes the batch only after
//! the calls already queued for the writer have had their turn, so under load they share the commit and no
//! call waits on a timer. A batch holds at most [`MAX_CALLS`] calls. One commit per batch instead of per call is
//! what lets concurrent writes outrun the writer's commits (BENCHMARKS.md, issue #15); a call on its own pays one
//! task hop more than a plain transaction. For the same reason a call's audit entries are written by its batch, all
//! in one statement just before the commit ([`Tx::commit_with_audit`]): still in the transaction of the change they
//! record.

use std::cell::RefCell;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};

use sqlx::any::Any;
use sqlx::{AnyConnection, AnyPool};
use sqlx::{Row, Transaction};
use tokio::sync::{Mutex, Notify, OwnedMappedMutexGuard, OwnedMutexGuard, oneshot};

use super::audit::rows::{self, Record};
use super::checkpoint::Checkpointer;
use super::script::{Ran, Script, Session};

/// The most calls committed in one transaction: bounds what a failed commit takes with it.
pub const MAX_CALLS: usize = 64;

/// A write failed: the caller's own statement, or the commit of the batch it was in.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Db(Arc<sqlx::Error>),
    #[error("the writer stopped before this change was committed")]
    Stopped,
    #[error("a statement that ends one savepoint and opens the next failed, so the batch was rolled back; see the log")]
    Broken,
}

impl From<sqlx::Error> for WriteError {
    fn from(e: sqlx::Error) -> Self {
        Self::Db(Arc::new(e))
    }
}

/// The writer connection's pool (one connection) and the batch open on it.
#[derive(Debug, Clone)]
pub struct Writer {
    pool: AnyPool,
    /// The advisory lock each batch takes first (PostgreSQL: several emulators write to one database).
    lock: Option<i64>,
    batch: Arc<Mutex<Option<Batch>>>,
    commit_due: Arc<Notify>,
    stats: Arc<Stats>,
    /// The statements prepared on the writer connection's session (PostgreSQL).
    session: Arc<Session>,
}

/// Counts of what the writer committed (in `/metrics`: their ratio is the mean batch size).
#[derive(Debug, Default)]
struct Stats {
    batches: AtomicU64,
    calls: AtomicU64,
    /// Told of every commit, to checkpoint the WAL after it (a file database only).
    checkpointer: Option<Checkpointer>,
}

/// Batches committed and calls committed in them, since the database was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteStats {
    pub batches: u64,
    pub calls: u64,
}

#[derive(Debug)]
struct Batch {
    tx: Transaction<'static, Any>,
    /// The statements prepared on its connection's session.
    session: Arc<Session>,
    /// The calls whose changes are in `tx`, each waiting for it to be committed, with the index in `audit` of
    /// its last audit entry if it has any.
    waiting: Vec<(Answer, Option<usize>)>,
    /// The audit entries of the calls in `waiting`, in order: those already written (`seqs` has theirs), then
    /// those to be written before the commit.
    audit: Vec<Record>,
    seqs: Vec<i64>,
    /// Calls that ended without a change after reading those in `tx`, each waiting for it to be committed.
    watching: Vec<Answer>,
    /// How the last call left its savepoint.
    last: Savepoint,
}

/// The savepoint of the batch's last call. A savepoint is ended by whatever uses the connection next (the next
/// call's begin, or the commit), in the same round trip to SQLite as its own statement: each round trip is a
/// hand-off to sqlx's SQLite thread, and those, not SQLite, are most of a write's cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Savepoint {
    /// No call yet in this batch.
    None,
    /// The call is running in it.
    Open,
    /// The call committed: release it.
    Kept,
    /// The call ended without committing: roll back to it.
    Abandoned,
    /// Ending or opening it failed part way: nothing in the batch can be trusted, so it is rolled back whole.
    Broken,
}

impl Writer {
    /// Wrap the writer pool and start the committer task; `checkpointer` is told of every commit; every batch
    /// takes the advisory `lock` first, if there is one.
    pub fn start(pool: AnyPool, checkpointer: Option<Checkpointer>, lock: Option<i64>) -> Self {
        let stats = Arc::new(Stats { checkpointer, ..Stats::default() });
        let writer = Self {
            pool,
            lock,
            batch: Arc::default(),
            commit_due: Arc::new(Notify::new()),
            stats,
            session: Arc::default(),
        };
        let committer = writer.clone();
        tokio::spawn(async move {
            loop {
                committer.commit_due.notified().await;
                // Queued behind the calls already waiting for the writer: they join the batch first.
                let batch = committer.batch.lock().await.take();
                if let Some(batch) = batch {
                    batch.commit(committer.stats.clone()).await;
                }
            }
        });
        writer
    }

    /// Join the open batch (or open one) as a new call.
    ///
    /// Cancel-safe: the batch is never held in a local across an await, so a dropped request cannot take other
    /// calls' changes with it.
    pub async fn begin(&self) -> Result<Tx, WriteError> {
        self.begin_running(None, |_, _| ()).await.map(|started| started.tx)
    }

    /// [`Writer::begin`], and run `probe` (a query for one flag, 0 or 1, its `$1` bound to the time the call took
    /// the writer), then the statements `call` pushes (given that time), in the same round trip as the savepoint:
    /// each round trip is a hand-off to sqlx's SQLite thread while every other write waits (see `script`).
    pub async fn begin_with<R>(
        &self,
        probe: &'static str,
        call: impl FnOnce(i64, &mut Script) -> R,
    ) -> Result<Started<R>, WriteError> {
        self.begin_running(Some(probe), call).await
    }

    async fn begin_running<R>(
        &self,
        probe: Option<&'static str>,
        call: impl FnOnce(i64, &mut Script) -> R,
    ) -> Result<Started<R>, WriteError> {
        let mut slot = self.batch.clone().lock_owned().await;
        let batch = match slot.take() {
            Some(batch) if batch.waiting.len() < MAX_CALLS && batch.last != Savepoint::Broken => batch,
            done => {
                if let Some(done) = done {
                    tokio::spawn(done.commit(self.stats.clone()));
                }
                Batch::open(&self.pool, self.lock, &self.session).await?
            }
        };
        let mut batch = OwnedMutexGuard::map(slot, |s| s.insert(batch));
        let savepoint: &[&'static str] = match batch.last {
            Savepoint::None => &["SAVEPOINT call"],
            Savepoint::Kept => &["RELEASE call", "SAVEPOINT call"],
            Savepoint::Open | Savepoint::Abandoned | Savepoint::Broken => {
                &["ROLLBACK TO call", "RELEASE call", "SAVEPOINT call"]
            }
        };
        let now = super::values::now_ms();
        let mut script = Script::new();
        for statement in savepoint {
            script.push_control(statement);
        }
        let probe = probe.map(|probe| {
            script.push(probe, |b| {
                b.bind(now);
            })
        });
        let ours = script.len();
        let steps = call(now, &mut script);
        // (Were this dropped part way, running the savepoint statements again next time is still right: they only
        // end and open empty savepoints. The call's own statements are in its savepoint, undone with it.)
        let open = &mut *batch;
        let mut ran = script.run_on(&mut open.tx, Some(&open.session)).await;
        if let Some(e) = ran.take_failure_before(ours) {
            tracing::error!(error = %e, calls = batch.waiting.len(), "cannot end and open a savepoint; failing the batch");
            batch.last = Savepoint::Broken;
            return Err(e.into());
        }
        batch.last = Savepoint::Open;
        // (The probe ran: a failure before the call's own statements was taken above.)
        // (A flag is an integer: SQLite has no booleans, and `Any` decodes PostgreSQL's only as booleans.)
        let due = match probe.and_then(|step| ran.rows(step).ok()?.first().map(|row| row.try_get::<i64, _>(0))) {
            Some(Ok(due)) => due != 0,
            Some(Err(e)) => {
                // The call's statements ran: its savepoint is undone before the next call.
                batch.last = Savepoint::Abandoned;
                return Err(e.into());
            }
            // No probe (or, impossibly, no row from one): nothing due.
            None => false,
        };
        let audit_written = batch.seqs.len();
        let tx = Tx { batch, commit_due: self.commit_due.clone(), audit_written };
        Ok(Started { tx, now, due, ran, steps })
    }

    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    pub fn stats(&self) -> WriteStats {
        WriteStats {
            batches: self.stats.batches.load(Ordering::Relaxed),
            calls: self.stats.calls.load(Ordering::Relaxed),
        }
    }
}

impl Batch {
    async fn open(pool: &AnyPool, lock: Option<i64>, session: &Arc<Session>) -> Result<Self, sqlx::Error> {
        // SQLite (no advisory lock): the write lock from the start, so that no batch upgrades a read to a write,
        // which SQLite refuses at once, busy timeout or not, while the checkpointer holds the lock to start the WAL
        // over (see `checkpoint`).
        let mut tx = match lock {
            None => pool.begin_with("BEGIN IMMEDIATE").await?,
            Some(_) => pool.begin().await?,
        };
        if let Some(lock) = lock {
            // Held to the commit: another emulator's batch waits here, and then reads what this one committed.
            // With it, how many statements this session has prepared: none, and it is a new connection.
            let prepared: i64 = sqlx::query_scalar(
                "SELECT (SELECT COUNT(*) FROM pg_prepared_statements WHERE name LIKE 'fc\\_%') \
                 FROM (SELECT pg_advisory_xact_lock($1)) AS locked",
            )
            .bind(lock)
            .fetch_one(&mut *tx)
            .await?;
            if prepared == 0 {
                session.lock().unwrap_or_else(PoisonError::into_inner).forget();
            }
        }
        Ok(Self {
            tx,
            session: session.clone(),
            waiting: Vec::new(),
            audit: Vec::new(),
            seqs: Vec::new(),
            watching: Vec::new(),
            last: Savepoint::None,
        })
    }

    /// Write the audit entries not written yet, keeping their `seq`s.
    async fn write_audit(&mut self) -> Result<(), sqlx::Error> {
        let seqs = rows::insert_many(&mut self.tx, &self.audit[self.seqs.len()..]).await?;
        self.seqs.extend(seqs);
        Ok(())
    }

    /// Write the audit entries and commit (a kept savepoint goes with it; an abandoned one is undone first), then
    /// answer every call waiting.
    async fn commit(mut self, stats: Arc<Stats>) {
        let ready = match self.last {
            Savepoint::Broken => Err(WriteError::Broken),
            Savepoint::Open | Savepoint::Abandoned => {
                match sqlx::raw_sql("ROLLBACK TO call").execute(&mut *self.tx).await {
                    Ok(_) => self.write_audit().await.map_err(WriteError::from),
                    Err(e) => Err(e.into()),
                }
            }
            Savepoint::None | Savepoint::Kept => self.write_audit().await.map_err(WriteError::from),
        };
        let Self { tx, waiting, watching, seqs, .. } = self;
        let committed = match ready {
            Ok(()) => tx.commit().await.map_err(WriteError::from),
            Err(e) => Err(e),
        };
        match &committed {
            Ok(()) => {
                stats.batches.fetch_add(1, Ordering::Relaxed);
                stats.calls.fetch_add(waiting.len() as u64, Ordering::Relaxed);
                if let Some(checkpointer) = &stats.checkpointer {
                    checkpointer.committed();
                }
            }
            Err(e) => tracing::error!(error = %e, calls = waiting.len(), "cannot commit a batch of writes"),
        }
        // A caller that went away needs no answer.
        for (call, entry) in waiting {
            let _ = call.send(committed.clone().map(|()| entry.and_then(|i| seqs.get(i).copied())));
        }
        for call in watching {
            let _ = call.send(committed.clone().map(|()| None));
        }
    }
}

/// A call that has taken the writer ([`Writer::begin_with`]).
pub struct Started<R> {
    pub tx: Tx,
    /// When it took the writer.
    pub now: i64,
    /// The probe's answer.
    pub due: bool,
    /// What the call's statements did, found by the steps `call` returned.
    pub ran: Ran,
    pub steps: R,
}

/// Where a call is answered once its batch is committed: with the `seq` of its last audit entry, if it has one.
type Answer = oneshot::Sender<Result<Option<i64>, WriteError>>;

tokio::task_local! {
    /// The commits a call must wait for before it is answered: those of batches it read from uncommitted.
    static UNSETTLED: RefCell<Vec<oneshot::Receiver<Result<Option<i64>, WriteError>>>>;
}

/// Run `call`, then wait until every batch whose uncommitted changes it read (and did not itself commit with)
/// is committed: whatever it answers, a failure or a replay, is then about committed state.
pub async fn settled<F: Future>(call: F) -> F::Output {
    UNSETTLED
        .scope(RefCell::default(), async {
            let output = call.await;
            for commit in UNSETTLED.with(RefCell::take) {
                // A failed commit is the committing calls' error; this call answers what it saw.
                let _ = commit.await;
            }
            output
        })
        .await
}

/// One call's transaction: a savepoint in the writer's open batch, holding the writer until it ends. Dropped
/// without [`Tx::commit`], its changes are undone.
pub struct Tx {
    batch: OwnedMappedMutexGuard<Option<Batch>, Batch>,
    commit_due: Arc<Notify>,
    /// How many of the batch's audit entries were written when the call began.
    audit_written: usize,
}

impl Tx {
    /// Run `script`'s statements in order in this call's transaction; they stop at the first that fails.
    pub async fn run(&mut self, script: Script) -> Ran {
        let batch = &mut *self.batch;
        script.run_on(&mut batch.tx, Some(&batch.session)).await
    }

    /// Keep this call's changes and return once they are committed with its batch.
    pub async fn commit(self) -> Result<(), WriteError> {
        self.commit_with_audit(Vec::new()).await.map(drop)
    }

    /// Keep this call's changes, with `entries` for the audit log (written with the batch's, in one statement
    /// before its commit), and return once they are committed: with the last entry's `seq`, if there are any.
    pub async fn commit_with_audit(mut self, entries: Vec<Record>) -> Result<Option<i64>, WriteError> {
        let batch = &mut *self.batch;
        batch.last = Savepoint::Kept;
        let entry = (!entries.is_empty()).then(|| batch.audit.len() + entries.len() - 1);
        batch.audit.extend(entries);
        let (answer, committed) = oneshot::channel();
        batch.waiting.push((answer, entry));
        // Hands the writer to the next call and wakes the committer.
        drop(self);
        committed.await.unwrap_or(Err(WriteError::Stopped))
    }

    /// Undo everything this call has done so far, and go on in the same savepoint.
    pub async fn undo(&mut self) -> Result<(), WriteError> {
        if let Err(e) = sqlx::raw_sql("ROLLBACK TO call").execute(&mut *self.batch.tx).await {
            self.batch.last = Savepoint::Broken;
            return Err(e.into());
        }
        Ok(())
    }

    /// Write the audit entries of the calls before this one in the batch now, for a change that must find them
    /// in the table (a reset, which deletes them).
    pub async fn write_queued_audit(&mut self) -> Result<(), WriteError> {
        self.batch.write_audit().await.map_err(WriteError::from)
    }
}

impl Drop for Tx {
    fn drop(&mut self) {
        // Still open: the call ended without committing (an error, a replay, a dropped request). Its savepoint
        // is undone before the next call; it waits for the batch's commit if it read other calls' changes in it.
        if self.batch.last == Savepoint::Open {
            self.batch.last = Savepoint::Abandoned;
            // Entries it wrote early (`write_queued_audit`) are undone with its savepoint: written again at commit.
            let written = self.audit_written;
            self.batch.seqs.truncate(written);
            if !self.batch.waiting.is_empty() {
                let (answer, committed) = oneshot::channel();
                if UNSETTLED.try_with(|u| u.borrow_mut().push(committed)).is_ok() {
                    self.batch.watching.push(answer);
                }
            }
        }
        self.commit_due.notify_one();
    }
}

impl std::ops::Deref for Tx {
    type Target = AnyConnection;
    fn deref(&self) -> &AnyConnection {
        &self.batch.tx
    }
}

impl std::ops::DerefMut for Tx {
    fn deref_mut(&mut self) -> &mut AnyConnection {
        &mut self.batch.tx
    }
}

impl std::fmt::Debug for Tx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tx")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::config::DbLocation;
    use crate::db::Db;

    async fn set_quota(tx: &mut Tx, name: &str) {
        sqlx::query("INSERT INTO quotas (name, limit_value) VALUES ($1, 1)")
            .bind(name)
            .execute(&mut **tx)
            .await
            .unwrap();
    }

    /// Calls queued behind one another share a commit, in arrival order, and one that ends without committing
    /// takes only its own changes with it.
    #[tokio::test]
    async fn queued_calls_share_a_commit_and_fail_alone() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&DbLocation::File(dir.path().join("fc.db"))).await.unwrap();
        let mut first = db.write().await.unwrap();
        set_quota(&mut first, "a").await;
        // On this single-threaded runtime both tasks run up to the writer's lock, in order, before `first` ends.
        let abandoned = tokio::spawn({
            let db = db.clone();
            async move {
                let mut tx = db.write().await.unwrap();
                set_quota(&mut tx, "b").await;
            }
        });
        let last = tokio::spawn({
            let db = db.clone();
            async move {
                let mut tx = db.write().await.unwrap();
                let seen: Vec<String> =
                    sqlx::query_scalar("SELECT name FROM quotas ORDER BY name").fetch_all(&mut *tx).await.unwrap();
                set_quota(&mut tx, "c").await;
                tx.commit().await.unwrap();
                seen
            }
        });
        tokio::task::yield_now().await;
        first.commit().await.unwrap();
        abandoned.await.unwrap();
        assert_eq!(last.await.unwrap(), ["a"], "the last call sees the first's change, not the abandoned one's");

        let names: Vec<String> =
            sqlx::query_scalar("SELECT name FROM quotas ORDER BY name").fetch_all(db.reader()).await.unwrap();
        assert_eq!(names, ["a", "c"]);
        assert_eq!(db.write_stats(), WriteStats { batches: 1, calls: 2 });
    }

    fn entry(request_id: &str) -> Record {
        Record {
            time_ms: 1,
            request_id: request_id.into(),
            role: "user",
            operation: "Op".into(),
            method: "POST".into(),
            path: "/v1/x".into(),
            resource_id: None,
            status: 201,
            error_code: None,
            latency_us: 1,
            fault: None,
        }
    }

    /// The audit entries of the calls in a batch are written with it, in the calls' order, each call told its
    /// entry's `seq`; entries written early by a call that then fails are written again at the commit.
    #[tokio::test]
    async fn a_batch_writes_its_calls_audit_entries_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&DbLocation::File(dir.path().join("fc.db"))).await.unwrap();
        let mut first = db.write().await.unwrap();
        set_quota(&mut first, "a").await;
        let failing = tokio::spawn({
            let db = db.clone();
            async move {
                let mut tx = db.write().await.unwrap();
                tx.write_queued_audit().await.unwrap();
                set_quota(&mut tx, "b").await;
            }
        });
        let last = tokio::spawn({
            let db = db.clone();
            async move { db.write().await.unwrap().commit_with_audit(vec![entry("r3")]).await.unwrap() }
        });
        tokio::task::yield_now().await;
        let first_seq = first.commit_with_audit(vec![entry("r1"), entry("r2")]).await.unwrap();
        failing.await.unwrap();
        let last_seq = last.await.unwrap();

        let logged: Vec<(i64, String)> =
            sqlx::query_as("SELECT seq, request_id FROM audit_log ORDER BY seq").fetch_all(db.reader()).await.unwrap();
        let ids: Vec<&str> = logged.iter().map(|(_, id)| id.as_str()).collect();
        assert_eq!(ids, ["r1", "r2", "r3"]);
        assert_eq!((first_seq, last_seq), (Some(logged[1].0), Some(logged[2].0)));
        assert_eq!(db.write_stats(), WriteStats { batches: 1, calls: 2 });
    }

    /// A call that reads a batch's uncommitted changes and ends without one of its own is answered after the
    /// commit, not before.
    #[tokio::test]
    async fn a_call_that_fails_after_reading_waits_for_the_commit() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&DbLocation::File(dir.path().join("fc.db"))).await.unwrap();
        let mut first = db.write().await.unwrap();
        set_quota(&mut first, "a").await;
        let failing = tokio::spawn({
            let db = db.clone();
            async move {
                let seen = settled(async {
                    let mut tx = db.write().await.unwrap();
                    let seen: i64 =
                        sqlx::query_scalar("SELECT COUNT(*) FROM quotas").fetch_one(&mut *tx).await.unwrap();
                    (seen, db.write_stats())
                })
                .await;
                (seen, db.write_stats())
            }
        });
        tokio::task::yield_now().await;
        first.commit().await.unwrap();
        let ((seen, when_read), when_answered) = failing.await.unwrap();
        assert_eq!(seen, 1, "it read the first call's change");
        assert_eq!(when_read, WriteStats { batches: 0, calls: 0 }, "before that change was committed");
        assert_eq!(when_answered, WriteStats { batches: 1, calls: 1 }, "and was answered after");
    }
}

//! WAL checkpoints, off the writer's path.
//!
//! SQLite's default is for the connection that commits to checkpoint once the WAL passes 1,000 pages: copy the
//! WAL's pages into the database file and fsync both, inside that COMMIT. On the single writer connection that
//! stalls every queued write for an fsync (on this project's 2-core VM a commit that checkpointed took 10–20 ms,
//! the p99 of every create in BENCHMARKS.md, issue #15). So the writer never checkpoints
//! (`wal_autocheckpoint=0`), and this task does it on a connection of its own, after commits, in PASSIVE mode:
//! it copies what no reader still needs and never takes a lock the writer waits on.
//!
//! Durability is unchanged: a commit is in the WAL when it is answered (`synchronous=NORMAL` writes, and a
//! `kill -9` keeps, the WAL either way); a checkpoint only moves pages to the database file.
//!
//! SQLite starts the WAL over only when a write begins after it was all copied and no reader still uses it. Under
//! reads that never pause, that moment never comes ("checkpoint starvation"): the WAL grew to 3.4 GB in minutes of
//! the saturation bench (BENCHMARKS.md, issue #49). So once it passes [`RESTART_FRAMES`], the checkpointer starts
//! it over itself with a TRUNCATE checkpoint, which holds writes while the readers still on the WAL finish (new
//! ones read the database file), for at most the checkpointer's busy timeout, then empties the WAL's file.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::sqlite::SqlitePool;
use tokio::sync::Notify;

/// How long commits are gathered before a checkpoint: at the writer's top rate about a megabyte of WAL, the
/// size SQLite's own default lets it reach.
const GATHER: Duration = Duration::from_millis(100);

/// A checkpoint slower than this is logged: the disk is what the writer would otherwise have waited on.
const SLOW: Duration = Duration::from_millis(500);

/// A WAL of more frames than this is started over (see the module's documentation): 256 MiB at the 4 KiB page.
/// Each start-over empties every reader's page cache (SQLite cannot tell what changed), so not too often: at 64
/// MiB the saturation bench's reads cost 10-20 % more CPU.
pub const RESTART_FRAMES: i64 = 65_536;

/// How long a TRUNCATE checkpoint may wait for the writer and for readers on the WAL (the checkpointer's
/// connection's busy timeout; a PASSIVE checkpoint never waits): writes wait at most this long for it, and one that
/// cannot finish in time is tried again after the next commit.
pub const RESTART_WAIT: Duration = Duration::from_millis(250);

/// Wakes the checkpointer: [`Checkpointer::committed`] after every commit.
#[derive(Debug, Clone)]
pub struct Checkpointer {
    due: Arc<Notify>,
}

impl Checkpointer {
    /// Start checkpointing through `pool` (a read-write connection that is not the writer's), first whatever
    /// the WAL holds already (the schema's migrations, or an earlier run's commits).
    pub fn start(pool: SqlitePool) -> Self {
        Self::restarting_past(pool, RESTART_FRAMES)
    }

    /// [`Checkpointer::start`], starting the WAL over past `frames` frames.
    fn restarting_past(pool: SqlitePool, frames: i64) -> Self {
        let due = Arc::new(Notify::new());
        due.notify_one();
        tokio::spawn(run(pool, due.clone(), frames));
        Self { due }
    }

    /// A transaction was committed: its pages are in the WAL, to be checkpointed soon.
    pub fn committed(&self) {
        self.due.notify_one();
    }
}

async fn run(pool: SqlitePool, due: Arc<Notify>, restart_frames: i64) {
    loop {
        // A commit while a checkpoint runs leaves a permit: the next round starts at once.
        due.notified().await;
        tokio::time::sleep(GATHER).await;
        let started = Instant::now();
        let mut done = checkpoint(&pool, Mode::Passive).await;
        if let Ok(p) = &done
            && p.wal_pages > restart_frames
        {
            done = checkpoint(&pool, Mode::Truncate).await;
            match &done {
                Ok(p) if !p.busy => tracing::debug!(took = ?started.elapsed(), "WAL started over"),
                // The readers on it, or the writer, did not let it in time: after the next commit, again.
                Ok(p) => tracing::debug!(wal_pages = p.wal_pages, "WAL not started over yet: busy"),
                Err(_) => {}
            }
        }
        match done {
            Ok(Progress { busy, wal_pages, copied }) => {
                let took = started.elapsed();
                if took > SLOW {
                    tracing::warn!(?took, wal_pages, copied, "a WAL checkpoint was slow: the disk is busy");
                } else {
                    tracing::trace!(?took, wal_pages, copied, busy, "WAL checkpoint");
                }
            }
            // The next commit tries again; meanwhile the WAL only grows.
            Err(e) if pool.is_closed() => {
                tracing::debug!(error = %e, "checkpointer stopped: the database is closed");
                return;
            }
            Err(e) => tracing::warn!(error = %e, "WAL checkpoint failed; will retry after the next commit"),
        }
    }
}

/// What `PRAGMA wal_checkpoint` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// A reader or another checkpoint kept it from finishing.
    pub busy: bool,
    /// Pages in the WAL.
    pub wal_pages: i64,
    /// Pages of the WAL now in the database file.
    pub copied: i64,
}

#[derive(Debug, Clone, Copy)]
enum Mode {
    /// As much of the WAL as no reader still needs, without waiting for anyone.
    Passive,
    /// All of it, waiting for the readers on it (see [`RESTART_WAIT`]), then the WAL emptied.
    Truncate,
}

/// One checkpoint.
async fn checkpoint(pool: &SqlitePool, mode: Mode) -> Result<Progress, sqlx::Error> {
    let sql = match mode {
        Mode::Passive => "PRAGMA wal_checkpoint(PASSIVE)",
        Mode::Truncate => "PRAGMA wal_checkpoint(TRUNCATE)",
    };
    let (busy, wal_pages, copied): (i64, i64, i64) = sqlx::query_as(sql).fetch_one(pool).await?;
    Ok(Progress { busy: busy != 0, wal_pages, copied })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use sqlx::sqlite::SqliteConnectOptions;

    use crate::config::DbLocation;
    use crate::db::Db;

    /// Rows in the database file itself: `immutable` reads the file and ignores the WAL. A read that overlaps a
    /// checkpoint writing the file may see a torn page ("database disk image is malformed": `immutable` promises
    /// SQLite nobody writes), so an error here means "not settled yet", never a verdict on the database.
    async fn rows_in_file(path: &std::path::Path) -> Result<i64, sqlx::Error> {
        let opts = SqliteConnectOptions::new().filename(path).immutable(true);
        let pool = sqlx::SqlitePool::connect_with(opts).await?;
        let count = async {
            let created: bool =
                sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'idempotency_keys')")
                    .fetch_one(&pool)
                    .await?;
            if created {
                sqlx::query_scalar("SELECT COUNT(*) FROM idempotency_keys").fetch_one(&pool).await
            } else {
                Ok(0)
            }
        }
        .await;
        pool.close().await;
        count
    }

    /// SQLite's checkpoint starvation: readers that never all let go of the WAL keep SQLite from starting it over,
    /// and it grows with every commit. Past the limit the checkpointer starts it over anyway: its file is emptied.
    #[tokio::test]
    async fn a_wal_past_the_limit_is_started_over_under_readers_that_never_pause() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fc.db");
        let opts = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
            .pragma("wal_autocheckpoint", "0")
            .busy_timeout(std::time::Duration::from_secs(10));
        let pool = |n| sqlx::sqlite::SqlitePoolOptions::new().max_connections(n).connect_with(opts.clone());
        let writer = pool(1).await.unwrap();
        sqlx::query("CREATE TABLE t (x BLOB)").execute(&writer).await.unwrap();
        let checkpoints = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(opts.clone().busy_timeout(super::RESTART_WAIT))
            .await
            .unwrap();
        let limit = 64;
        let checkpointer = super::Checkpointer::restarting_past(checkpoints, limit);
        // Two readers in turn, each holding its snapshot a while, so that one always has the WAL open.
        let readers = pool(2).await.unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut tasks = Vec::new();
        for offset in [0, 5] {
            let (readers, stop) = (readers.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_millis(offset)).await;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let mut tx = readers.begin().await.unwrap();
                    sqlx::query("SELECT COUNT(*) FROM t").execute(&mut *tx).await.unwrap();
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    tx.commit().await.unwrap();
                }
            }));
        }
        // Some 400 frames of 4 KiB pages, far past the limit.
        for _ in 0..200 {
            sqlx::query("INSERT INTO t VALUES (zeroblob(6000))").execute(&writer).await.unwrap();
            checkpointer.committed();
        }
        let wal = path.with_extension("db-wal");
        let past = limit as u64 * 4096;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut size = std::fs::metadata(&wal).unwrap().len();
        while size > past && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            size = std::fs::metadata(&wal).unwrap().len();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in tasks {
            t.await.unwrap();
        }
        assert!(size <= past, "the WAL's file is {size} bytes, past the limit of {past}: not started over");
        let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM t").fetch_one(&writer).await.unwrap();
        assert_eq!(rows, 200, "every commit is still there");
    }

    /// Another holder of SQLite's write lock (the checkpointer, starting the WAL over) commits while a write is
    /// open: the write waits for it, rather than failing when its first read has become stale (SQLite refuses such
    /// an upgrade to a write at once, busy timeout or not).
    #[tokio::test]
    async fn a_write_waits_for_another_holder_of_the_write_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fc.db");
        let db = Db::open(&DbLocation::File(path.clone())).await.unwrap();
        let other = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(SqliteConnectOptions::new().filename(&path).busy_timeout(std::time::Duration::from_secs(10)))
            .await
            .unwrap();
        let mut tx = db.write().await.unwrap();
        let before: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM idempotency_keys").fetch_one(&mut *tx).await.unwrap();
        let elsewhere = tokio::spawn(async move {
            sqlx::query("INSERT INTO idempotency_keys (operation, key, request, resource_id, created_at) VALUES ('Op', 'other', '', 'x', 0)")
                .execute(&other)
                .await
        });
        // Time for the other write to commit, were it let in before this one.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        sqlx::query("INSERT INTO idempotency_keys (operation, key, request, resource_id, created_at) VALUES ('Op', 'mine', '', 'x', 0)")
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        elsewhere.await.unwrap().unwrap();
        let after: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM idempotency_keys").fetch_one(db.reader()).await.unwrap();
        assert_eq!(after, before + 2);
    }

    /// The writer's commits never checkpoint, and the checkpointer copies them into the database file soon after.
    #[tokio::test]
    async fn committed_pages_reach_the_database_file_without_the_writer_checkpointing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fc.db");
        let db = Db::open(&DbLocation::File(path.clone())).await.unwrap();
        let autocheckpoint: i64 = sqlx::query_scalar("PRAGMA wal_autocheckpoint").fetch_one(db.writer()).await.unwrap();
        assert_eq!(autocheckpoint, 0, "the writer leaves checkpoints to the checkpointer");

        for batch in 0..30 {
            let mut tx = db.write().await.unwrap();
            for i in 0..10 {
                sqlx::query("INSERT INTO idempotency_keys (operation, key, request, resource_id, created_at) VALUES ('Op', $1, '', 'x', 0)")
                    .bind(format!("{batch}-{i}"))
                    .execute(&mut *tx)
                    .await
                    .unwrap();
            }
            tx.commit().await.unwrap();
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut in_file = rows_in_file(&path).await;
        while !matches!(in_file, Ok(300)) && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            in_file = rows_in_file(&path).await;
        }
        assert_eq!(in_file.unwrap(), 300, "every committed row is checkpointed into the database file");
    }
}

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

use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::sqlite::SqlitePool;
use tokio::sync::Notify;

/// How long commits are gathered before a checkpoint: at the writer's top rate about a megabyte of WAL, the
/// size SQLite's own default lets it reach.
const GATHER: Duration = Duration::from_millis(100);

/// A checkpoint slower than this is logged: the disk is what the writer would otherwise have waited on.
const SLOW: Duration = Duration::from_millis(500);

/// Wakes the checkpointer: [`Checkpointer::committed`] after every commit.
#[derive(Debug, Clone)]
pub struct Checkpointer {
    due: Arc<Notify>,
}

impl Checkpointer {
    /// Start checkpointing through `pool` (a read-write connection that is not the writer's), first whatever
    /// the WAL holds already (the schema's migrations, or an earlier run's commits).
    pub fn start(pool: SqlitePool) -> Self {
        let due = Arc::new(Notify::new());
        due.notify_one();
        tokio::spawn(run(pool, due.clone()));
        Self { due }
    }

    /// A transaction was committed: its pages are in the WAL, to be checkpointed soon.
    pub fn committed(&self) {
        self.due.notify_one();
    }
}

async fn run(pool: SqlitePool, due: Arc<Notify>) {
    loop {
        // A commit while a checkpoint runs leaves a permit: the next round starts at once.
        due.notified().await;
        tokio::time::sleep(GATHER).await;
        let started = Instant::now();
        match checkpoint(&pool).await {
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

/// One PASSIVE checkpoint: as much of the WAL as no reader still needs, without waiting for anyone.
pub async fn checkpoint(pool: &SqlitePool) -> Result<Progress, sqlx::Error> {
    let (busy, wal_pages, copied): (i64, i64, i64) =
        sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)").fetch_one(pool).await?;
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

//! The SQLite database: one writer connection (so every write is serialised and quota checks are atomic with
//! their writes; concurrent writes share its transactions, see [`group_commit`]) and a pool of readers (WAL lets
//! them read while the writer writes).

pub mod audit;
pub mod checkpoint;
pub mod group_commit;
pub mod postgres;
pub mod schema;
pub mod script;
pub mod values;

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};

use self::checkpoint::Checkpointer;
use self::group_commit::Writer;
pub use self::group_commit::{Started, Tx, WriteError, WriteStats};
pub use self::schema::OpenError;
use self::schema::refuse_newer;
pub use self::script::{NotDone, Ran, Script, Step};
pub use self::values::{ms, new_id, now_ms, rfc3339};
use crate::config::DbLocation;

#[derive(Debug, Clone)]
pub struct Db {
    writer: Writer,
    reader: SqlitePool,
    /// The checkpointer's connection (a file database only).
    checkpoints: Option<SqlitePool>,
}

/// SQLite's answer when a file cannot be used, said as what the file is.
fn explain(e: &sqlx::Error) -> String {
    let code = match e {
        sqlx::Error::Database(db) => db.code(),
        _ => None,
    };
    match code.as_deref() {
        // SQLITE_NOTADB
        Some("26") => "it is not a SQLite database (another kind of file?): give --db a fakecloud database or a \
                       new file"
            .into(),
        // SQLITE_CANTOPEN
        Some("14") => "it cannot be opened as a file (a directory, or no permission?)".into(),
        _ => e.to_string(),
    }
}

/// The newest schema version applied to an open SQLite database (`None` before any).
async fn applied_version(pool: &SqlitePool) -> Option<i64> {
    sqlx::query_scalar(schema::APPLIED_VERSION).fetch_one(pool).await.unwrap_or(None)
}

/// Apply the schema to the database at `location` without serving it (`fakecloud migrate`); its schema version.
pub async fn migrate(location: &DbLocation) -> Result<i64, OpenError> {
    match location {
        DbLocation::Postgres(url) => postgres::migrate(url).await,
        _ => {
            let db = Db::open(location).await?;
            let version = applied_version(db.writer()).await.unwrap_or(0);
            db.close().await;
            Ok(version)
        }
    }
}

impl Db {
    pub async fn open(location: &DbLocation) -> Result<Self, OpenError> {
        let (opts, label, readers) = match location {
            // One connection for everything: each in-memory connection would be its own empty database.
            DbLocation::Memory => {
                (SqliteConnectOptions::from_str("sqlite::memory:").expect("static URL"), ":memory:".to_string(), 0)
            }
            DbLocation::File(path) => {
                create_private(path).map_err(|cause| OpenError::Create { path: path.display().to_string(), cause })?;
                (SqliteConnectOptions::new().filename(path).create_if_missing(true), path.display().to_string(), 4)
            }
            DbLocation::Postgres(_) => return Err(OpenError::NotServed { url: location.to_string() }),
        };
        let opts = opts
            .journal_mode(SqliteJournalMode::Wal)
            // NORMAL in WAL mode: a committed transaction survives the process being killed (it is in the WAL,
            // in the OS page cache); only a power loss can take the last commits. See README "Durability".
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true)
            .pragma("cache_size", "-16000");
        let open_err = |cause| OpenError::Open { explained: explain(&cause), path: label.clone() };
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .acquire_timeout(Duration::from_secs(30))
            // The writer never checkpoints: the checkpointer does, off its path (see `checkpoint`). Its savepoint
            // journals (one per call in a batch) stay in memory: in temp files they were written, and the files
            // created and deleted, every batch (BENCHMARKS.md, issue #15).
            .connect_with(opts.clone().pragma("wal_autocheckpoint", "0").pragma("temp_store", "memory"))
            .await
            .map_err(open_err)?;
        let migrator = sqlx::migrate!("./migrations");
        refuse_newer(&migrator, applied_version(&writer).await, &label)?;
        migrator.run(&writer).await.map_err(|cause| OpenError::Migrate { path: label.clone(), cause })?;
        let (reader, checkpoints) = if readers == 0 {
            (writer.clone(), None)
        } else {
            let reader = SqlitePoolOptions::new()
                .max_connections(readers)
                .acquire_timeout(Duration::from_secs(30))
                .connect_with(opts.clone().read_only(true))
                .await
                .map_err(open_err)?;
            // Read-write: a checkpoint writes the database file (it never takes the writer's lock).
            let checkpoints = SqlitePoolOptions::new().max_connections(1).connect_with(opts).await.map_err(open_err)?;
            (reader, Some(checkpoints))
        };
        let checkpointer = checkpoints.clone().map(Checkpointer::start);
        Ok(Self { writer: Writer::start(writer, checkpointer), reader, checkpoints })
    }

    /// Start a write: a transaction of its own as far as the caller can tell, committed with the other writes
    /// queued beside it. Writers queue here, one at a time.
    pub async fn write(&self) -> Result<Tx, WriteError> {
        self.writer.begin().await
    }

    /// [`Db::write`], with `probe` (a query for one boolean, `?1` bound to the time the write starts) and the
    /// statements `call` pushes (given that time) run in the same round trip to SQLite as the write's start.
    pub async fn write_with<R>(
        &self,
        probe: &'static str,
        call: impl FnOnce(i64, &mut Script) -> R,
    ) -> Result<Started<R>, WriteError> {
        self.writer.begin_with(probe, call).await
    }

    pub fn reader(&self) -> &SqlitePool {
        &self.reader
    }

    /// The writer connection's pool, for a statement outside any write (it waits for the open batch).
    pub fn writer(&self) -> &SqlitePool {
        self.writer.pool()
    }

    pub fn write_stats(&self) -> WriteStats {
        self.writer.stats()
    }

    pub async fn close(&self) {
        self.reader.close().await;
        if let Some(checkpoints) = &self.checkpoints {
            checkpoints.close().await;
        }
        self.writer.pool().close().await;
    }
}

/// Create a directory of the emulator's own (snapshots, accounts' databases), if it is missing, readable by its
/// owner only.
pub fn create_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// Create the database file, if it is missing, readable by its owner only: it holds the audit log and all the
/// state. SQLite gives the WAL and shared-memory files the database file's mode.
fn create_private(path: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        other => other.map(drop),
    }
}

//! The database, SQLite or PostgreSQL behind sqlx's `Any` driver, one set of SQL for both (`$N` parameters,
//! which both take; PostgreSQL's migrations give it the few SQLite functions the store uses). One writer
//! connection (so every write is serialised and quota checks are atomic with their writes; concurrent writes
//! share its transactions, see [`group_commit`]) and a pool of readers (WAL lets SQLite's read while the writer
//! writes). On PostgreSQL every emulator on the database (the replicas of one cloud) has a writer: each batch
//! takes the cloud's advisory lock first, so the writes of all of them are serialised as one writer's are.

pub mod audit;
pub mod backend;
pub mod checkpoint;
pub mod failure;
pub mod group_commit;
pub mod postgres;
pub mod schema;
pub mod script;
pub mod values;

use std::time::Duration;

/// The pools [`Db::reader`] and [`Db::writer`] give, named where a caller chooses which a read goes through.
pub use sqlx::AnyPool;
use sqlx::any::AnyPoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{AnyConnection, Connection, Executor};

pub use self::backend::Backend;
use self::checkpoint::Checkpointer;
use self::group_commit::Writer;
pub use self::group_commit::{Started, Tx, WriteError, WriteStats};
pub use self::schema::OpenError;
use self::schema::refuse_newer;
pub use self::script::{NotDone, Ran, Script, Step};
pub use self::values::{ms, new_id, now_ms, params, rfc3339};
use crate::config::DbLocation;

#[derive(Debug, Clone)]
pub struct Db {
    backend: Backend,
    writer: Writer,
    reader: AnyPool,
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
async fn applied_version(pool: &AnyPool) -> Option<i64> {
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

/// The PRAGMAs of every SQLite connection (`Any` takes a URL, which cannot carry them).
const SQLITE_PRAGMAS: &str =
    // NORMAL in WAL mode: a committed transaction survives the process being killed (it is in the WAL, in the
    // OS page cache); only a power loss can take the last commits. See docs/book/src/emulator.md, "Durability".
    "PRAGMA synchronous = NORMAL; PRAGMA busy_timeout = 10000; PRAGMA foreign_keys = ON; PRAGMA cache_size = -16000;";

/// The writer's own, after those. It never checkpoints: the checkpointer does, off its path (see `checkpoint`).
/// Its savepoint journals (one per call in a batch) stay in memory: in temp files they were written, and the
/// files created and deleted, every batch (BENCHMARKS.md, issue #15).
const SQLITE_WRITER_PRAGMAS: &str =
    "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0; PRAGMA temp_store = memory;";

/// The URL `Any` opens the SQLite file at `path` (or a database in memory) by, in `mode` (`rwc`, `ro`).
/// (sqlx's own `to_url_lossy` cannot say a path with a `:` in it.) The path is made absolute, and every
/// character a URL would read as something else is escaped; sqlx decodes them.
fn sqlite_url(path: Option<&std::path::Path>, mode: &str) -> std::io::Result<String> {
    let Some(path) = path else { return Ok("sqlite::memory:".into()) };
    let mut url = String::from("sqlite:");
    for &b in std::path::absolute(path)?.as_os_str().as_encoded_bytes() {
        if b.is_ascii_control() || b >= 0x80 || b" \"#%<>?`{}".contains(&b) {
            url.push_str(&format!("%{b:02X}"));
        } else {
            url.push(char::from(b));
        }
    }
    url.push_str("?mode=");
    url.push_str(mode);
    Ok(url)
}

/// How many connections read beside the writer.
const READERS: u32 = 4;

/// An account's readers on PostgreSQL: its calls are one job's, and its connections count against the server's
/// `max_connections` on every replica.
pub const ACCOUNT_READERS: u32 = 2;

/// How long a call may wait for one of a SQLite pool's connections (the writer's is the file's one writer).
const ACQUIRE_SQLITE: Duration = Duration::from_secs(30);

/// A pool of `max` connections to `url`, each set up with the statements of `setup` once connected.
async fn any_pool(url: &str, max: u32, setup: &'static [&'static str]) -> Result<AnyPool, sqlx::Error> {
    async fn set_up(conn: &mut AnyConnection, setup: &[&'static str]) -> Result<(), sqlx::Error> {
        for statements in setup {
            conn.execute(*statements).await?;
        }
        Ok(())
    }
    sqlx::any::install_default_drivers();
    // One connection first, alone: a pool retries a failing connection until its timeout and then says only
    // that, where this says why (not a database, no such host, a wrong password).
    let mut first = AnyConnection::connect(url).await?;
    set_up(&mut first, setup).await?;
    first.close().await?;
    let options = if url.starts_with("sqlite:") {
        // Kept for good: an in-memory database lives only as long as its one connection.
        // Not pinged before each use: a SQLite connection is a file this process holds, which no server can
        // drop, and the ping was a round trip to its worker thread on every query.
        AnyPoolOptions::new()
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .acquire_timeout(ACQUIRE_SQLITE)
            .test_before_acquire(false)
    } else {
        // Closed when idle: a server allows a hundred or so connections in all, and each account's cloud has
        // pools of its own (most of them idle most of the time). A server that cannot be reached is said within
        // a bound (issue #47: a call answers 503 rather than wait for the database to come back).
        AnyPoolOptions::new()
            .min_connections(0)
            .idle_timeout(Duration::from_secs(30))
            .acquire_timeout(postgres::ACQUIRE_TIMEOUT)
    };
    options.max_connections(max).after_connect(move |conn, _| Box::pin(set_up(conn, setup))).connect(url).await
}

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

impl Db {
    pub async fn open(location: &DbLocation) -> Result<Self, OpenError> {
        match location {
            DbLocation::Postgres(url) => Self::open_postgres(url, READERS).await,
            DbLocation::File(path) => Self::open_sqlite(Some(path)).await,
            DbLocation::Memory => Self::open_sqlite(None).await,
        }
    }

    /// An account's database (see `crate::accounts`): on PostgreSQL with [`ACCOUNT_READERS`] readers, as each
    /// replica holds connections for every account (docs/book/src/farm.md, "Connections on PostgreSQL").
    pub async fn open_account(location: &DbLocation) -> Result<Self, OpenError> {
        match location {
            DbLocation::Postgres(url) => Self::open_postgres(url, ACCOUNT_READERS).await,
            other => Self::open(other).await,
        }
    }

    /// SQLite: the file at `path`, or one in memory.
    async fn open_sqlite(path: Option<&std::path::Path>) -> Result<Self, OpenError> {
        let label = path.map_or_else(|| ":memory:".to_string(), |p| p.display().to_string());
        if let Some(path) = path {
            create_private(path).map_err(|cause| OpenError::Create { path: label.clone(), cause })?;
        }
        let open_err = |cause| OpenError::Open { explained: explain(&cause), path: label.clone() };
        let url = sqlite_url(path, "rwc").map_err(|cause| OpenError::Create { path: label.clone(), cause })?;
        let writer = any_pool(&url, 1, &[SQLITE_PRAGMAS, SQLITE_WRITER_PRAGMAS]).await.map_err(open_err)?;
        refuse_newer(&MIGRATOR, applied_version(&writer).await, &label)?;
        let mut conn = writer.acquire().await.map_err(open_err)?;
        // (`run_direct`: sqlx's own way round "implementation of `Acquire` is not general enough", which `run`
        // meets in a future that must be `Send`.)
        MIGRATOR
            .run_direct(None, &mut *conn, false)
            .await
            .map_err(|cause| OpenError::Migrate { path: label.clone(), cause })?;
        drop(conn);
        let (reader, checkpoints) = match path {
            // One connection for everything: each in-memory connection would be its own empty database.
            None => (writer.clone(), None),
            Some(path) => {
                let url =
                    sqlite_url(Some(path), "ro").map_err(|cause| OpenError::Create { path: label.clone(), cause })?;
                let reader = any_pool(&url, READERS, &[SQLITE_PRAGMAS]).await.map_err(open_err)?;
                // Read-write: a checkpoint writes the database file (only one that starts the WAL over takes the
                // writer's lock, for at most its busy timeout). Typed: it reads what SQLite's checkpoint says.
                let opts = SqliteConnectOptions::new()
                    .filename(path)
                    .synchronous(SqliteSynchronous::Normal)
                    .busy_timeout(checkpoint::RESTART_WAIT);
                let checkpoints =
                    SqlitePoolOptions::new().max_connections(1).connect_with(opts).await.map_err(open_err)?;
                (reader, Some(checkpoints))
            }
        };
        let checkpointer = checkpoints.clone().map(Checkpointer::start);
        Ok(Self { backend: Backend::Sqlite, writer: Writer::start(writer, checkpointer, None), reader, checkpoints })
    }

    async fn open_postgres(url: &str, readers: u32) -> Result<Self, OpenError> {
        postgres::migrate(url).await?;
        let label = crate::config::redact(url);
        let open_err = |cause| OpenError::of(&label, &cause, postgres::explain);
        let writer = any_pool(url, 1, postgres::SESSION_BOUNDS).await.map_err(open_err)?;
        let reader = any_pool(url, readers, postgres::SESSION_BOUNDS).await.map_err(open_err)?;
        let lock = sqlx::query_scalar(postgres::CLOUD_LOCK).fetch_one(&writer).await.map_err(open_err)?;
        let writer = Writer::start(writer, None, Some(lock));
        Ok(Self { backend: Backend::Postgres, writer, reader, checkpoints: None })
    }

    /// Start a write: a transaction of its own as far as the caller can tell, committed with the other writes
    /// queued beside it. Writers queue here, one at a time.
    pub async fn write(&self) -> Result<Tx, WriteError> {
        self.writer.begin().await
    }

    /// [`Db::write`], with `probe` (a query for one flag, 0 or 1, `$1` bound to the time the write starts) and the
    /// statements `call` pushes (given that time) run in the same round trip to SQLite as the write's start.
    pub async fn write_with<R>(
        &self,
        probe: &'static str,
        call: impl FnOnce(i64, &mut Script) -> R,
    ) -> Result<Started<R>, WriteError> {
        self.writer.begin_with(probe, call).await
    }

    /// Whether the store answers a statement (`/readyz`).
    pub async fn ping(&self) -> Result<(), sqlx::Error> {
        sqlx::query("SELECT 1").execute(&self.reader).await.map(drop)
    }

    /// Write a copy of the (SQLite) database, consistent at one moment, to the file at `path` (`VACUUM INTO`,
    /// which takes an empty file and keeps its mode).
    pub async fn copy_into(&self, path: &str) -> Result<(), sqlx::Error> {
        sqlx::query("VACUUM INTO $1").bind(path).execute(self.writer()).await.map(drop)
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub fn reader(&self) -> &AnyPool {
        &self.reader
    }

    /// The writer connection's pool, for a statement outside any write (it waits for the open batch).
    pub fn writer(&self) -> &AnyPool {
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

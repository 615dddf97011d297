//! The store on PostgreSQL (issue #28): the connection's failures said as what to do, a schema newer than this
//! build refused, and the schema (`migrations-postgres/`, the same tables as SQLite's) applied before
//! [`super::Db`] serves it.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{Connection, Executor as _};

use super::schema::{self, OpenError};

/// The advisory lock every writer of one cloud holds for each of its batches (transaction-scoped), so several
/// emulators' writes to it are serialised as one writer's are: a number for the database and schema the
/// connection is in, the same from every emulator, different for each account's schema.
pub const CLOUD_LOCK: &str = "SELECT CAST(hashtext(current_database() || '.' || current_schema()) AS BIGINT)";

/// The advisory lock on changing the accounts, which several emulators on one database share: "fakeacct",
/// beyond the 32-bit range of [`CLOUD_LOCK`]'s numbers.
pub const ACCOUNTS_LOCK: i64 = 0x6661_6b65_6163_6374;

/// An advisory lock held (transaction-scoped) until this is dropped — the transaction rolled back, which
/// releases it — or the process dies, which ends its session.
pub struct Held(sqlx::Transaction<'static, sqlx::Any>);

impl Held {
    /// Whether the session holding the lock still answers: a replica frozen while it held it (a paused
    /// container) finds its session ended by the server when it wakes (see [`SESSION_BOUNDS`]).
    pub async fn check(&mut self) -> Result<(), sqlx::Error> {
        sqlx::query("SELECT 1").execute(&mut *self.0).await.map(drop)
    }
}

/// Hold the advisory lock `key` (see [`Held`]).
pub async fn hold_lock(pool: &sqlx::AnyPool, key: i64) -> Result<Held, sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)").bind(key).execute(&mut *tx).await?;
    Ok(Held(tx))
}

/// Every connection's bounds on waiting (issue #47): a replica frozen while it holds a lock (a paused container,
/// a partition that keeps its session) must not stall the others. A lock wait — a row, the cloud's writer lock,
/// the accounts' lock — ends after `lock_timeout`, and the call is answered 503 with `Retry-After`; a session
/// idle inside a transaction for `idle_in_transaction_session_timeout` is ended by the server, which releases
/// its locks (the frozen replica finds its session gone when it wakes: its batch fails, nothing of it was
/// acknowledged); no statement runs longer than `statement_timeout`. A write batch or an accounts change is
/// never idle that long while its replica runs: each of its calls takes milliseconds.
pub const SESSION_BOUNDS: &[&str] =
    &["SET lock_timeout = '5s'; SET idle_in_transaction_session_timeout = '10s'; SET statement_timeout = '30s'"];

/// How long a call waits for a connection of a pool (the server down, or every connection busy) before it is
/// answered 503: the pool retries connecting until then.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether the schema `name` exists.
pub async fn schema_exists(pool: &sqlx::AnyPool, name: &str) -> Result<bool, sqlx::Error> {
    let n: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM pg_namespace WHERE nspname = $1").bind(name).fetch_one(pool).await?;
    Ok(n > 0)
}

/// Rename the schema `from` to `to`, both plain identifiers (an account's: see `crate::accounts::schema`).
pub async fn rename_schema(pool: &sqlx::AnyPool, from: &str, to: &str) -> Result<(), sqlx::Error> {
    let rename = sqlx::AssertSqlSafe(format!("ALTER SCHEMA \"{from}\" RENAME TO \"{to}\""));
    sqlx::query(rename).execute(pool).await?;
    Ok(())
}

/// Drop the schema `name` (a plain identifier) and everything in it, if it exists.
pub async fn drop_schema(pool: &sqlx::AnyPool, name: &str) -> Result<(), sqlx::Error> {
    let drop = sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE"));
    sqlx::query(drop).execute(pool).await?;
    Ok(())
}

/// Hold the advisory lock on changing the faults of the cloud whose schema `pool`'s connections are in, as
/// [`hold_lock`] holds its.
pub async fn hold_faults_lock(pool: &sqlx::AnyPool) -> Result<Held, sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext(current_database() || '.' || current_schema() || '.faults'))")
        .execute(&mut *tx)
        .await?;
    Ok(Held(tx))
}

/// How long connecting may take before the host is said not to answer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The migrating connection's bounds. sqlx's migrator holds a session-level advisory lock while it applies the
/// schema; an emulator frozen part way holds it on, and another opening a cloud (an account it catches up with,
/// on the path of a call) would wait for it without end: the wait ends after `lock_timeout` and the open fails,
/// to be tried again. A frozen migrator's open transaction is ended by the server, which releases the lock.
const MIGRATION_BOUNDS: &str = "SET lock_timeout = '10s'; SET idle_in_transaction_session_timeout = '10s'";

/// Apply the schema to the database at `url`; its schema version after.
pub async fn migrate(url: &str) -> Result<i64, OpenError> {
    let label = crate::config::redact(url);
    let open_err = |explained| OpenError::Open { path: label.clone(), explained };
    let opts = PgConnectOptions::from_str(url).map_err(|e| open_err(explain(&e)))?;
    // One connection, not a pool: a pool retries a refused connection until its timeout and then says only that.
    let mut conn = match tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(&opts)).await {
        Ok(conn) => conn.map_err(|e| OpenError::of(&label, &e, explain))?,
        Err(_) => {
            return Err(open_err(format!(
                "no answer within {CONNECT_TIMEOUT:?}: is the host right, and is a firewall in the way?"
            )));
        }
    };
    if let Err(e) = conn.execute(MIGRATION_BOUNDS).await {
        let _ = conn.close().await;
        return Err(open_err(explain(&e)));
    }
    if let Some(name) = schema_of(&opts) {
        // (A plain identifier: `schema_of` takes no other.)
        let create = sqlx::AssertSqlSafe(format!("CREATE SCHEMA IF NOT EXISTS {name}"));
        if let Err(e) = sqlx::query(create).execute(&mut conn).await {
            let _ = conn.close().await;
            return Err(open_err(explain(&e)));
        }
    }
    let applied = sqlx::query_scalar(schema::APPLIED_VERSION).fetch_one(&mut conn).await.unwrap_or(None);
    if let Err(e) = schema::refuse_newer(&MIGRATOR, applied, &label) {
        let _ = conn.close().await;
        return Err(e);
    }
    // Already this build's schema (every open of an account's cloud after the first): nothing to apply, and the
    // migrator's lock is not taken.
    if applied == Some(schema::known_version(&MIGRATOR)) {
        let _ = conn.close().await;
        return Ok(schema::known_version(&MIGRATOR));
    }
    // (`run_direct`: sqlx's own way round "implementation of `Acquire` is not general enough", which `run` on a
    // connection meets in a future that must be `Send`.)
    let ran = MIGRATOR.run_direct(None, &mut conn, false).await;
    let _ = conn.close().await;
    ran.map_err(|cause| OpenError::Migrate { path: label.clone(), cause })?;
    Ok(schema::known_version(&MIGRATOR))
}

/// The URL of the same database with the store in `schema` (an account's cloud: one schema each, the tables the
/// same), made if missing when the schema is applied. `schema`: lowercase letters, digits and `_`.
pub fn in_schema(url: &str, schema: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}options[search_path]={schema}")
}

/// The schema a URL puts the store in (`options[search_path]=NAME`, as [`in_schema`] writes), if it names one
/// plain identifier.
fn schema_of(opts: &PgConnectOptions) -> Option<String> {
    let path = opts.get_options()?.split_whitespace().find_map(|o| o.strip_prefix("search_path="))?;
    let plain = !path.is_empty() && path.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    plain.then(|| path.to_string())
}

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations-postgres");

/// PostgreSQL's answer when a database cannot be used, said as what to do about it.
pub(super) fn explain(e: &sqlx::Error) -> String {
    let code = match e {
        sqlx::Error::Database(db) => db.code(),
        _ => None,
    };
    match (e, code.as_deref()) {
        (sqlx::Error::Io(io), _) if io.kind() == std::io::ErrorKind::InvalidData => format!(
            "the TLS handshake failed ({io}): check that sslrootcert names the CA that signed the server's certificate"
        ),
        (sqlx::Error::Io(io), _) => {
            format!("nothing answers there ({io}): is PostgreSQL running, on that host and port?")
        }
        (sqlx::Error::Tls(_), _) => format!("{e}: turn TLS on in the server, or give the URL sslmode=prefer"),
        (_, Some("3D000")) => format!("{e}: create it (createdb) or name one that exists"),
        (_, Some("28P01" | "28000")) => format!("{e}: check the user and password in the URL"),
        _ => e.to_string(),
    }
}

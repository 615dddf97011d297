//! The store on PostgreSQL (issue #28): the connection's failures said as what to do, a schema newer than this
//! build refused, and the schema (`migrations-postgres/`, the same tables as SQLite's) applied before
//! [`super::Db`] serves it.

use std::str::FromStr;
use std::time::Duration;

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};

use super::schema::{self, OpenError};

/// The advisory lock every writer of a cloud on this database holds for each of its batches (transaction-scoped),
/// so several emulators' writes are serialised as one writer's are. ("fakecloud" in ASCII.)
pub const CLOUD_LOCK: i64 = 0x66_616b_6563_6c6f;

/// How long connecting may take before the host is said not to answer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Apply the schema to the database at `url`; its schema version after.
pub async fn migrate(url: &str) -> Result<i64, OpenError> {
    let label = crate::config::redact(url);
    let open_err = |explained| OpenError::Open { path: label.clone(), explained };
    let opts = PgConnectOptions::from_str(url).map_err(|e| open_err(explain(&e)))?;
    // One connection, not a pool: a pool retries a refused connection until its timeout and then says only that.
    let mut conn = match tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(&opts)).await {
        Ok(conn) => conn.map_err(|e| open_err(explain(&e)))?,
        Err(_) => {
            return Err(open_err(format!(
                "no answer within {CONNECT_TIMEOUT:?}: is the host right, and is a firewall in the way?"
            )));
        }
    };
    let applied = sqlx::query_scalar(schema::APPLIED_VERSION).fetch_one(&mut conn).await;
    if let Err(e) = schema::refuse_newer(&MIGRATOR, applied.unwrap_or(None), &label) {
        let _ = conn.close().await;
        return Err(e);
    }
    // (`run_direct`: sqlx's own way round "implementation of `Acquire` is not general enough", which `run` on a
    // connection meets in a future that must be `Send`.)
    let ran = MIGRATOR.run_direct(None, &mut conn, false).await;
    let _ = conn.close().await;
    ran.map_err(|cause| OpenError::Migrate { path: label.clone(), cause })?;
    Ok(schema::known_version(&MIGRATOR))
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

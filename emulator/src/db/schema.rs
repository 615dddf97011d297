//! The schema's versions, on either backend, and why a database could not be opened.

/// Why the database could not be opened, in words that say what to do. The cause is in the message, not a
/// `source` as well: the CLI prints the chain, and would print it twice.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot open database {path}: {explained}")]
    Open { path: String, explained: String },
    /// The server cannot take the connection now (unreachable, out of connections): a retry may succeed.
    #[error("cannot open database {path} now: {explained}")]
    Unavailable { path: String, explained: String },
    #[error("cannot create database {path}: {cause}")]
    Create { path: String, cause: std::io::Error },
    #[error("cannot apply the schema to {path}: {cause}")]
    Migrate { path: String, cause: sqlx::migrate::MigrateError },
    #[error(
        "{path} was written by a newer fakecloud: its schema is at version {found}, this one knows up to {known}. \
         Run the fakecloud that wrote it, or give --db a new file or database"
    )]
    Newer { path: String, found: i64, known: i64 },
}

impl OpenError {
    /// Why opening the database at `path` failed with `e`, explained by `explain`.
    pub fn of(path: &str, e: &sqlx::Error, explain: impl Fn(&sqlx::Error) -> String) -> Self {
        let (path, explained) = (path.to_string(), explain(e));
        match super::failure::is_unavailable(e) {
            true => Self::Unavailable { path, explained },
            false => Self::Open { path, explained },
        }
    }
}

/// The newest schema version applied to a database (NULL before any; an error before sqlx's table exists).
pub const APPLIED_VERSION: &str = "SELECT MAX(version) FROM _sqlx_migrations WHERE success";

/// The newest schema version this build's `migrator` knows.
pub fn known_version(migrator: &sqlx::migrate::Migrator) -> i64 {
    migrator.iter().map(|m| m.version).max().unwrap_or(0)
}

/// A database whose schema (`applied`: its newest version, if any) is newer than this build's migrations is
/// refused before anything is changed (sqlx would only say a migration is missing).
pub fn refuse_newer(migrator: &sqlx::migrate::Migrator, applied: Option<i64>, path: &str) -> Result<(), OpenError> {
    let known = known_version(migrator);
    match applied {
        Some(found) if found > known => Err(OpenError::Newer { path: path.to_string(), found, known }),
        _ => Ok(()),
    }
}

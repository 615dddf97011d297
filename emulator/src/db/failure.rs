//! Which database errors are not bugs (issue #47): the database cannot answer now, or an account's store was
//! removed under a call. `crate::error` turns them into answers; opening a database says them too.

/// Whether `e` says the database cannot answer now (busy, unreachable, out of connections, a lock held too
/// long), as opposed to a bug.
pub fn is_unavailable(e: &sqlx::Error) -> bool {
    matches!(of(e), Some(Failure::Unavailable(_)))
}

/// A database error that is not a bug: the caller is told what happened instead of a 500 (`crate::error` says
/// how).
pub enum Failure {
    /// The database cannot answer now (busy, a lock held too long, unreachable, full): 503, retry.
    Unavailable(&'static str),
    /// An account's store removed under the call (deleted or wiped through another replica): as its token.
    Gone,
}

pub fn of(e: &sqlx::Error) -> Option<Failure> {
    use Failure::{Gone, Unavailable};
    match e {
        sqlx::Error::Database(db) => match db.code().as_deref()? {
            // SQLite: SQLITE_BUSY, SQLITE_LOCKED and their extended codes.
            "5" | "6" | "261" | "517" => Some(Unavailable("database busy")),
            // PostgreSQL (issue #47): lock_timeout, a statement cancelled (statement_timeout), a deadlock or
            // serialization failure, a session ended (idle too long in a transaction, the server shutting down).
            "55P03" => Some(Unavailable("the database lock this call needs is held by another replica")),
            "57014" | "40001" | "40P01" => Some(Unavailable("the database gave up on this call's statement")),
            "25P03" | "57P01" | "57P02" | "57P03" => Some(Unavailable("the database ended this replica's session")),
            // Too many connections, or out of some other resource.
            c if c.starts_with("53") => Some(Unavailable("the database is out of connections or resources")),
            // A connection failure.
            c if c.starts_with("08") => Some(Unavailable("the database cannot be reached")),
            // undefined_table, invalid_schema_name: an account's schema dropped under the call.
            "42P01" | "3F000" => Some(Gone),
            _ => None,
        },
        sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::Protocol(_) => {
            Some(Unavailable("the database cannot be reached"))
        }
        // A cloud closed under the call: its account was deleted or wiped.
        sqlx::Error::PoolClosed => Some(Gone),
        _ => None,
    }
}

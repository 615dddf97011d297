//! The one error type of the emulator's layers: what kind of failure it is, the API's error code and a
//! message a person can act on. The store, the fault engine and the checks say what went wrong, never which
//! HTTP status that is: the HTTP layer chooses the status of each kind in one place (`http::reply`).

use std::borrow::Cow;

use fakecloud_api::{QuotaName, codes};

use crate::db::failure::{self, Failure};

/// Headers an error's extra headers may not set: the answer's framing and the connection's fate are the
/// server's (a `Content-Length` that disagrees with the body, or a `Transfer-Encoding`, would break the
/// exchange: the client would read a truncated or garbled answer while the audit says it got an error).
pub const SERVER_HEADERS: &[&str] = &[
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "proxy-connection",
];

/// What kind of failure an error is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The request is wrong: a field, a header, a body.
    Invalid,
    /// What it names does not exist.
    NotFound,
    /// It clashes with the state: a name or address in use, a resource in the wrong state, a reused key.
    Conflict,
    /// Well formed and consistent, but past a limit: a quota, a pool's addresses.
    Exceeded,
    /// Too many calls or streams at once.
    Throttled,
    /// The cloud cannot answer now: an outage, a busy database.
    Unavailable,
    /// A bug or a broken database: logged, and said so.
    Internal,
    /// A status chosen where it is the point: by the HTTP layer (401, 405, 413 ...) or by a fault rule.
    Status(u16),
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    pub kind: Kind,
    /// One of `fakecloud_api::codes`, or a code a fault rule chose.
    pub code: Cow<'static, str>,
    pub message: String,
    /// Extra response headers (`Retry-After`, `RateLimit-*`, or a fault rule's).
    pub headers: Vec<(String, String)>,
    /// The quota a refusal is about: a failure-shape preset answers it in its cloud's shape.
    pub quota: Option<QuotaName>,
}

/// On the response to a request refused by a quota: which quota, and the refusal's message.
#[derive(Debug, Clone)]
pub struct QuotaRefused {
    pub quota: QuotaName,
    pub message: String,
}

pub type Result<T, E = ApiError> = std::result::Result<T, E>;

impl ApiError {
    pub fn new(kind: Kind, code: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        Self { kind, code: code.into(), message: message.into(), headers: Vec::new(), quota: None }
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(Kind::Invalid, code, message)
    }

    /// A request field that fails validation: the message starts with the field's name.
    pub fn invalid(field: &str, problem: impl std::fmt::Display) -> Self {
        Self::bad_request(codes::INVALID_PARAMETER, format!("{field}: {problem}"))
    }

    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(Kind::NotFound, code, message)
    }

    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(Kind::Conflict, code, message)
    }

    /// A request that would take `quota` past `limit`; the message says how to raise it.
    pub fn quota_exceeded(quota: QuotaName, limit: u32, what: &str) -> Self {
        let e = Self::new(
            Kind::Exceeded,
            quota.exceeded_code(),
            format!(
                "{what} would exceed the quota {quota} (limit {limit}); raise it with `fakecloud quota set {quota} <n>` \
                 or PUT /v1/quotas/{quota}"
            ),
        );
        Self { quota: Some(quota), ..e }
    }

    /// The same with `Retry-After: 1`: the cloud cannot answer now, and a second later it may.
    pub fn with_retry_after(mut self) -> Self {
        self.headers.push(("Retry-After".into(), "1".into()));
        self
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(Kind::Internal, codes::INTERNAL_ERROR, message)
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        Self::from(&e)
    }
}

impl From<crate::db::WriteError> for ApiError {
    fn from(e: crate::db::WriteError) -> Self {
        match e {
            crate::db::WriteError::Db(e) => Self::from(&*e),
            other => Self::internal(other.to_string()),
        }
    }
}

/// A statement of a list that did not run to its end: read its list's statements in order, and the first that
/// did not is the one that failed.
impl From<crate::db::NotDone<'_>> for ApiError {
    fn from(e: crate::db::NotDone<'_>) -> Self {
        match e {
            crate::db::NotDone::Failed(e) => Self::from(e),
            crate::db::NotDone::Skipped => Self::internal("a statement before this one failed; see the emulator log"),
        }
    }
}

impl From<&sqlx::Error> for ApiError {
    fn from(e: &sqlx::Error) -> Self {
        match failure::of(e) {
            Some(Failure::Unavailable(why)) => {
                tracing::warn!(error = %e, "{why}");
                Self::new(Kind::Unavailable, codes::SERVICE_UNAVAILABLE, format!("{why}; retry")).with_retry_after()
            }
            Some(Failure::Gone) => {
                tracing::info!(error = %e, "a call of an account removed while it ran");
                Self::new(
                    Kind::Status(401),
                    codes::UNAUTHORIZED,
                    "the account this token belongs to was deleted or wiped while the call ran: its tokens no longer \
                     work",
                )
            }
            None => {
                tracing::error!(error = %e, "database error");
                Self::internal("internal database error; see the emulator log")
            }
        }
    }
}

/// True when `e` is a UNIQUE or PRIMARY KEY violation: a conflict the caller should hear about as a 409.
pub fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.is_unique_violation())
}

/// For `map_err` on a write: a unique violation becomes a 409 with `code` and `message`; anything else stays a
/// database error.
pub fn conflict_on_unique(
    code: &'static str,
    message: impl FnOnce() -> String,
) -> impl FnOnce(sqlx::Error) -> ApiError {
    move |e| if is_unique_violation(&e) { ApiError::conflict(code, message()) } else { e.into() }
}

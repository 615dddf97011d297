//! The one error type of the emulator, and the one place it becomes an HTTP response.

use std::borrow::Cow;

use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use fakecloud_api::{ErrorBody, ErrorDetail, QuotaName, codes};

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

/// The error code of a response, for the audit log and metrics.
#[derive(Debug, Clone)]
pub struct ErrorCode(pub String);

#[derive(Debug, Clone, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    pub status: StatusCode,
    /// One of `fakecloud_api::codes`, or a code a fault rule chose.
    pub code: Cow<'static, str>,
    pub message: String,
    /// Extra response headers (`Retry-After`, `RateLimit-*`, or a fault rule's).
    pub headers: Vec<(String, String)>,
}

pub type Result<T, E = ApiError> = std::result::Result<T, E>;

impl ApiError {
    pub fn new(status: StatusCode, code: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        Self { status, code: code.into(), message: message.into(), headers: Vec::new() }
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// A request field that fails validation: the message starts with the field's name.
    pub fn invalid(field: &str, problem: impl std::fmt::Display) -> Self {
        Self::bad_request(codes::INVALID_PARAMETER, format!("{field}: {problem}"))
    }

    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }

    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }

    /// A request that would take `quota` past `limit`; the message says how to raise it.
    pub fn quota_exceeded(quota: QuotaName, limit: u32, what: &str) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            quota.exceeded_code(),
            format!(
                "{what} would exceed the quota {quota} (limit {limit}); raise it with `fakecloud quota set {quota} <n>` \
                 or PUT /v1/quotas/{quota}"
            ),
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, codes::INTERNAL_ERROR, message)
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
        // Busy/locked means the database is momentarily contended: a retryable condition, not a bug.
        if let sqlx::Error::Database(db) = e
            && matches!(db.code().as_deref(), Some("5") | Some("6") | Some("261") | Some("517"))
        {
            tracing::warn!(error = %e, "database busy");
            let mut err =
                Self::new(StatusCode::SERVICE_UNAVAILABLE, codes::SERVICE_UNAVAILABLE, "database busy, retry");
            err.headers = vec![("Retry-After".into(), "1".into())];
            return err;
        }
        tracing::error!(error = %e, "database error");
        Self::internal("internal database error; see the emulator log")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // The call's ID, wherever the error was made.
        let request_id = crate::call::request_id();
        let body = ErrorBody { error: ErrorDetail { code: self.code.to_string(), message: self.message, request_id } };
        let mut resp = (self.status, axum::Json(body)).into_response();
        for (k, v) in &self.headers {
            if let (Ok(k), Ok(v)) = (HeaderName::try_from(k.as_str()), HeaderValue::try_from(v.as_str()))
                && !SERVER_HEADERS.contains(&k.as_str())
            {
                resp.headers_mut().insert(k, v);
            }
        }
        resp.extensions_mut().insert(ErrorCode(self.code.to_string()));
        resp
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

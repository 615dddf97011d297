//! `/v1/audit`: what every call did, for tests and people to check what a client really sent.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use fakecloud_api::limits::{AUDIT_LIMIT_DEFAULT, AUDIT_LIMIT_MAX, AUDIT_LIMIT_MIN};
use fakecloud_api::{AuditList, AuditQuery, ErrorBody};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::extract::ApiQuery;
use super::reply::reply;
use super::state::AppState;
use crate::db::audit::rows as audit;
use crate::error::{ApiError, Result};
use crate::validate;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_audit))
}

/// Audit entries, oldest first. Calls made before this one are all included.
#[utoipa::path(get, path = "/v1/audit", operation_id = "ListAudit", tag = "audit",
    params(AuditQuery), responses((status = 200, body = AuditList), (status = 400, body = ErrorBody)),
    security(("admin" = [])))]
async fn list_audit(State(st): State<AppState>, ApiQuery(q): ApiQuery<AuditQuery>) -> Result<Response> {
    st.audit.flush().await;
    Ok(reply(StatusCode::OK, "", AuditList { items: audit::query(st.db.reader(), &filter(&q)?).await? }))
}

/// The query, checked: what the log is asked for.
fn filter(q: &AuditQuery) -> Result<audit::Filter> {
    let limit = validate::in_range("limit", q.limit.unwrap_or(AUDIT_LIMIT_DEFAULT), AUDIT_LIMIT_MIN, AUDIT_LIMIT_MAX)?;
    let since_ms = match &q.since {
        None => None,
        Some(s) => Some(
            s.parse::<jiff::Timestamp>()
                .map_err(|e| {
                    ApiError::invalid(
                        "since",
                        format!("{s:?} is not an RFC 3339 time such as 2026-11-22T10:00:00Z ({e})"),
                    )
                })?
                .as_millisecond(),
        ),
    };
    Ok(audit::Filter {
        after: q.after.unwrap_or(0),
        operation: q.operation.clone(),
        resource: q.resource.clone(),
        status: q.status,
        since_ms,
        limit: i64::from(limit),
    })
}

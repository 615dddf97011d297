//! `/v1/audit`: what every call did, for tests and people to check what a client really sent.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use fakecloud_api::{AuditList, AuditQuery, ErrorBody};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::extract::ApiQuery;
use super::{AppState, reply};
use crate::error::Result;
use crate::store::audit;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_audit))
}

/// Audit entries, oldest first. Calls made before this one are all included.
#[utoipa::path(get, path = "/v1/audit", operation_id = "ListAudit", tag = "audit",
    params(AuditQuery), responses((status = 200, body = AuditList), (status = 400, body = ErrorBody)),
    security(("admin" = [])))]
async fn list_audit(State(st): State<AppState>, ApiQuery(q): ApiQuery<AuditQuery>) -> Result<Response> {
    st.audit.flush().await;
    Ok(reply(StatusCode::OK, "", AuditList { items: audit::query(&st.db, &q).await? }))
}

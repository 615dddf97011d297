//! `/v1/admin`: reset and snapshot.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use fakecloud_api::{ErrorBody, SnapshotRequest, SnapshotResponse, codes};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::extract::ApiJson;
use super::{AppState, reply};
use crate::error::{ApiError, Result};
use crate::store;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(reset)).routes(routes!(snapshot))
}

/// Delete every resource and the audit log; quotas return to their defaults.
#[utoipa::path(post, path = "/v1/admin/reset", operation_id = "Reset", tag = "admin",
    responses((status = 200, body = serde_json::Value)), security(("admin" = [])))]
async fn reset(State(st): State<AppState>) -> Result<Response> {
    st.audit.flush().await;
    store::reset(&st.db).await?;
    tracing::info!("state reset");
    Ok(reply(StatusCode::OK, "", serde_json::json!({"reset": true})))
}

/// Write a consistent copy of the database (`VACUUM INTO`, safe while serving) to a new file; start an
/// emulator from it with `fakecloud serve --db <copy>`.
#[utoipa::path(post, path = "/v1/admin/snapshot", operation_id = "Snapshot", tag = "admin",
    request_body = SnapshotRequest,
    responses((status = 200, body = SnapshotResponse), (status = 400, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("admin" = [])))]
async fn snapshot(State(st): State<AppState>, ApiJson(req): ApiJson<SnapshotRequest>) -> Result<Response> {
    let path = std::path::Path::new(&req.path);
    if req.path.is_empty() {
        return Err(ApiError::invalid("path", "must not be empty"));
    }
    if path.exists() {
        return Err(ApiError::conflict(
            codes::SNAPSHOT_EXISTS,
            format!("{} already exists; choose a new path", req.path),
        ));
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.is_dir()
    {
        return Err(ApiError::invalid("path", format!("directory {} does not exist", dir.display())));
    }
    st.audit.flush().await;
    sqlx::query("VACUUM INTO ?1").bind(&req.path).execute(st.db.writer()).await.map_err(|e| {
        tracing::warn!(error = %e, path = %req.path, "snapshot failed");
        ApiError::invalid("path", format!("cannot write a snapshot to {}: {e}", req.path))
    })?;
    let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    tracing::info!(path = %req.path, bytes, "snapshot written");
    Ok(reply(StatusCode::OK, "", SnapshotResponse { path: req.path, bytes }))
}

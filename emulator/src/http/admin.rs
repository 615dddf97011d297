//! `/v1/admin`: reset and snapshot.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use fakecloud_api::{ErrorBody, SnapshotRequest, SnapshotResponse};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::extract::ApiJson;
use super::reply::reply;
use super::state::AppState;
use crate::error::{ApiError, Result};
use crate::{snapshot, store};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(reset)).routes(routes!(snapshot))
}

/// Delete every resource and the audit log; quotas and load balancers' provisioning return to their defaults.
#[utoipa::path(post, path = "/v1/admin/reset", operation_id = "Reset", tag = "admin",
    responses((status = 200, body = serde_json::Value)), security(("admin" = [])))]
async fn reset(State(st): State<AppState>) -> Result<Response> {
    st.audit.flush().await;
    store::reset(&st.db).await?;
    tracing::info!("state reset");
    Ok(reply(StatusCode::OK, "", serde_json::json!({"reset": true})))
}

/// Write a consistent copy of the database (`VACUUM INTO`, safe while serving) to a new file in the snapshot
/// directory; start an emulator from it with `fakecloud serve --db <copy>`.
#[utoipa::path(post, path = "/v1/admin/snapshot", operation_id = "Snapshot", tag = "admin",
    request_body = SnapshotRequest,
    responses((status = 200, body = SnapshotResponse), (status = 400, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("admin" = [])))]
async fn snapshot(State(st): State<AppState>, ApiJson(req): ApiJson<SnapshotRequest>) -> Result<Response> {
    let dir = st.cfg.snapshot_dir.as_deref().ok_or_else(|| ApiError::internal("no snapshot directory is set"))?;
    let target = snapshot::target(dir, &req.name)?;
    st.audit.flush().await;
    let bytes = snapshot::write(&st.db, &target).await?;
    let path = target.display().to_string();
    tracing::info!(%path, bytes, "snapshot written");
    Ok(reply(StatusCode::OK, "", SnapshotResponse { path, bytes }))
}

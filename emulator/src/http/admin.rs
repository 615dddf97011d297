//! `/v1/admin`: reset and snapshot.

use std::path::PathBuf;

use axum::extract::{FromRequestParts, State};
use axum::http::{StatusCode, request::Parts};
use axum::response::Response;
use fakecloud_api::{ErrorBody, SnapshotRequest, SnapshotResponse, codes};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::extract::ApiJson;
use super::reply::reply;
use super::state::AppState;
use crate::error::{ApiError, Kind, Result};
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
/// directory; start an emulator from it with `fakecloud serve --db <copy>`. The emulator's own admin token only:
/// an account's is refused (403).
#[utoipa::path(post, path = "/v1/admin/snapshot", operation_id = "Snapshot", tag = "admin",
    request_body = SnapshotRequest,
    responses((status = 200, body = SnapshotResponse), (status = 400, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 403, body = ErrorBody,
            description = "Forbidden: the operation needs the emulator's own admin token (snapshots are the operator's)")),
    security(("admin" = [])))]
async fn snapshot(
    State(st): State<AppState>,
    SnapshotDir(dir): SnapshotDir,
    ApiJson(req): ApiJson<SnapshotRequest>,
) -> Result<Response> {
    let target = snapshot::target(&dir, &req.name)?;
    st.audit.flush().await;
    let bytes = snapshot::write(&st.db, &target).await?;
    let path = target.display().to_string();
    tracing::info!(%path, bytes, "snapshot written");
    Ok(reply(StatusCode::OK, "", SnapshotResponse { path, bytes }))
}

/// The snapshot directory, which only the emulator's own cloud has: a snapshot is a file on the operator's
/// machine, and an account's admin token must reach nothing outside its account (issue #47). An extractor, so
/// that an account's admin is refused before its body is read: 403 whatever it sends.
struct SnapshotDir(PathBuf);

impl FromRequestParts<AppState> for SnapshotDir {
    type Rejection = ApiError;

    async fn from_request_parts(_: &mut Parts, st: &AppState) -> Result<Self> {
        // The server always gives its own cloud one (`Server::start`); an account's has none (`Accounts::open`).
        st.cfg.snapshot_dir.clone().map(Self).ok_or_else(|| {
            ApiError::new(
                Kind::Status(StatusCode::FORBIDDEN.as_u16()),
                codes::FORBIDDEN,
                "snapshots are the operator's: the emulator's own admin token (the one `fakecloud serve` printed) \
                 snapshots the emulator's own cloud; an account's admin token cannot",
            )
        })
    }
}

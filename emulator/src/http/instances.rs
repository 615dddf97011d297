//! `/v1/region` and `/v1/instances`.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use fakecloud_api::{CreateInstanceRequest, ErrorBody, Instance, InstanceList, ListInstancesQuery, Region};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::extract::{ApiJson, ApiPath, ApiQuery, idempotency_key};
use super::reply::{created, reply};
use super::state::AppState;
use crate::error::Result;
use crate::faults::effects::unreachable_in;
use crate::store::instances::{self, Action};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_region))
        .routes(routes!(create_instance, list_instances))
        .routes(routes!(get_instance))
        .routes(routes!(stop_instance))
        .routes(routes!(start_instance))
        .routes(routes!(terminate_instance))
}

/// The region: zones and their subnets, address pools and the instance-type catalog.
#[utoipa::path(get, path = "/v1/region", operation_id = "GetRegion", tag = "region",
    responses((status = 200, body = Region)), security(("user" = [])))]
async fn get_region(State(st): State<AppState>) -> Response {
    reply(StatusCode::OK, &st.cfg.topology.region, st.cfg.topology.to_api())
}

/// Create an instance. It starts `pending` and turns `running` after the boot delay.
#[utoipa::path(post, path = "/v1/instances", operation_id = "CreateInstance", tag = "instances",
    request_body = CreateInstanceRequest,
    params(("Idempotency-Key" = Option<String>, Header, description = "Client token: a retry with the same key returns the original instance")),
    responses((status = 201, body = Instance), (status = 400, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("user" = [])))]
async fn create_instance(
    State(st): State<AppState>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<CreateInstanceRequest>,
) -> Result<Response> {
    let key = idempotency_key(&headers)?;
    let (inst, replayed) = instances::create(&st.db, &st.cfg, &req, key.as_deref()).await?;
    Ok(created(&inst.id.clone(), inst, replayed))
}

/// List instances, oldest first, a page at a time.
#[utoipa::path(get, path = "/v1/instances", operation_id = "ListInstances", tag = "instances",
    params(ListInstancesQuery), responses((status = 200, body = InstanceList), (status = 400, body = ErrorBody)),
    security(("user" = [])))]
async fn list_instances(State(st): State<AppState>, ApiQuery(q): ApiQuery<ListInstancesQuery>) -> Result<Response> {
    let mut page = instances::list(&st.db, &st.cfg, &q).await?;
    let dark = st.faults().dark_zones().await;
    if !dark.is_empty() {
        page.items.iter_mut().for_each(|i| unreachable_in(&dark, i));
        if let Some(want) = q.state {
            page.items.retain(|i| i.state == want);
        }
    }
    Ok(reply(StatusCode::OK, "", page))
}

#[utoipa::path(get, path = "/v1/instances/{id}", operation_id = "GetInstance", tag = "instances",
    params(("id" = String, Path)), responses((status = 200, body = Instance), (status = 404, body = ErrorBody)),
    security(("user" = [])))]
async fn get_instance(State(st): State<AppState>, ApiPath(id): ApiPath<String>) -> Result<Response> {
    let mut inst = instances::get(&st.db, &st.cfg, &id).await?;
    unreachable_in(&st.faults().dark_zones().await, &mut inst);
    Ok(reply(StatusCode::OK, &id, inst))
}

/// Stop a running instance: `stopping`, then `stopped`.
#[utoipa::path(post, path = "/v1/instances/{id}/stop", operation_id = "StopInstance", tag = "instances",
    params(("id" = String, Path)), responses((status = 200, body = Instance), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("user" = [])))]
async fn stop_instance(State(st): State<AppState>, ApiPath(id): ApiPath<String>) -> Result<Response> {
    Ok(reply(StatusCode::OK, &id, instances::transition(&st.db, &st.cfg, &id, Action::Stop).await?))
}

/// Start a stopped instance: `pending`, then `running`.
#[utoipa::path(post, path = "/v1/instances/{id}/start", operation_id = "StartInstance", tag = "instances",
    params(("id" = String, Path)), responses((status = 200, body = Instance), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("user" = [])))]
async fn start_instance(State(st): State<AppState>, ApiPath(id): ApiPath<String>) -> Result<Response> {
    Ok(reply(StatusCode::OK, &id, instances::transition(&st.db, &st.cfg, &id, Action::Start).await?))
}

/// Terminate an instance: `shutting-down`, then `terminated`; it stays listable for the retention period.
#[utoipa::path(post, path = "/v1/instances/{id}/terminate", operation_id = "TerminateInstance", tag = "instances",
    params(("id" = String, Path)), responses((status = 200, body = Instance), (status = 404, body = ErrorBody)),
    security(("user" = [])))]
async fn terminate_instance(State(st): State<AppState>, ApiPath(id): ApiPath<String>) -> Result<Response> {
    Ok(reply(StatusCode::OK, &id, instances::transition(&st.db, &st.cfg, &id, Action::Terminate).await?))
}

//! `/v1/route-tables` and their routes.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use fakecloud_api::{
    CreateRouteRequest, CreateRouteTableRequest, ErrorBody, Route, RouteList, RouteTable, RouteTableList,
};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::extract::{ApiJson, ApiPath, idempotency_key};
use super::reply::{created, reply};
use super::state::AppState;
use crate::error::Result;
use crate::store::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_route_tables, create_route_table))
        .routes(routes!(delete_route_table))
        .routes(routes!(list_routes, create_route))
        .routes(routes!(delete_route))
}

#[utoipa::path(get, path = "/v1/route-tables", operation_id = "ListRouteTables", tag = "network",
    responses((status = 200, body = RouteTableList)), security(("user" = [])))]
async fn list_route_tables(State(st): State<AppState>) -> Result<Response> {
    Ok(reply(StatusCode::OK, "", RouteTableList { items: routes::list_tables(&st.db).await? }))
}

#[utoipa::path(post, path = "/v1/route-tables", operation_id = "CreateRouteTable", tag = "network",
    request_body = CreateRouteTableRequest,
    responses((status = 201, body = RouteTable), (status = 400, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("user" = [])))]
async fn create_route_table(
    State(st): State<AppState>,
    ApiJson(req): ApiJson<CreateRouteTableRequest>,
) -> Result<Response> {
    let table = routes::create_table(&st.db, Some(&req.name), &Default::default()).await?;
    Ok(created(&table.id.clone(), table, false))
}

/// Delete an empty route table (not the main one).
#[utoipa::path(delete, path = "/v1/route-tables/{id}", operation_id = "DeleteRouteTable", tag = "network",
    params(("id" = String, Path, description = "Route table ID, or `main`")),
    responses((status = 200, body = RouteTable), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("user" = [])))]
async fn delete_route_table(State(st): State<AppState>, ApiPath(id): ApiPath<String>) -> Result<Response> {
    let table = routes::delete_table(&st.db, &id).await?;
    Ok(reply(StatusCode::OK, &table.id.clone(), table))
}

#[utoipa::path(get, path = "/v1/route-tables/{id}/routes", operation_id = "ListRoutes", tag = "network",
    params(("id" = String, Path, description = "Route table ID, or `main`")),
    responses((status = 200, body = RouteList), (status = 404, body = ErrorBody)), security(("user" = [])))]
async fn list_routes(State(st): State<AppState>, ApiPath(id): ApiPath<String>) -> Result<Response> {
    Ok(reply(StatusCode::OK, &id, RouteList { items: routes::list(&st.db, &id).await? }))
}

/// Add a route. Fails with `RouteLimitExceeded` at the routes-per-route-table quota.
#[utoipa::path(post, path = "/v1/route-tables/{id}/routes", operation_id = "CreateRoute", tag = "network",
    params(("id" = String, Path, description = "Route table ID, or `main`"),
           ("Idempotency-Key" = Option<String>, Header, description = "Client token: a retry with the same key returns the original route")),
    request_body = CreateRouteRequest,
    responses((status = 201, body = Route), (status = 400, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("user" = [])))]
async fn create_route(
    State(st): State<AppState>,
    ApiPath(id): ApiPath<String>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<CreateRouteRequest>,
) -> Result<Response> {
    let key = idempotency_key(&headers)?;
    let (route, replayed) = routes::create(&st.db, &id, &req, key.as_deref()).await?;
    Ok(created(&route.id.clone(), route, replayed))
}

#[utoipa::path(delete, path = "/v1/route-tables/{id}/routes/{route_id}", operation_id = "DeleteRoute", tag = "network",
    params(("id" = String, Path, description = "Route table ID, or `main`"), ("route_id" = String, Path)),
    responses((status = 200, body = Route), (status = 404, body = ErrorBody)), security(("user" = [])))]
async fn delete_route(
    State(st): State<AppState>,
    ApiPath((id, route_id)): ApiPath<(String, String)>,
) -> Result<Response> {
    Ok(reply(StatusCode::OK, &route_id.clone(), routes::delete(&st.db, &id, &route_id).await?))
}

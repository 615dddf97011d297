//! `/v1/load-balancers`.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use fakecloud_api::{
    CreateLoadBalancerRequest, ErrorBody, LbProvisioning, ListLoadBalancersQuery, LoadBalancer, LoadBalancerList,
    ResetLbProvisioningQuery, SetLbProvisioningRequest, UpdateLoadBalancerRequest,
};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::extract::{ApiJson, ApiPath, ApiQuery, idempotency_key};
use super::reply::{created, reply};
use super::state::AppState;
use crate::dataplane::published;
use crate::db::backend::Backend;
use crate::error::Result;
use crate::store::{lb_provisioning, load_balancers};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_load_balancer, list_load_balancers))
        .routes(routes!(get_load_balancer, update_load_balancer, delete_load_balancer))
        .routes(routes!(get_lb_provisioning, set_lb_provisioning, reset_lb_provisioning))
}

/// How long a load balancer created now stays `provisioning`: its name's setting, else the one for every load
/// balancer, else `--lb-provision-delay`.
#[utoipa::path(get, path = "/v1/load-balancer-provisioning", operation_id = "GetLbProvisioning", tag = "admin",
    responses((status = 200, body = LbProvisioning)), security(("admin" = [])))]
async fn get_lb_provisioning(State(st): State<AppState>) -> Result<Response> {
    Ok(reply(StatusCode::OK, "", lb_provisioning::get(&st.db, &st.cfg).await?))
}

/// Set how long load balancers created from now on stay `provisioning`: every one, or those of one name.
/// Kept across restarts.
#[utoipa::path(put, path = "/v1/load-balancer-provisioning", operation_id = "SetLbProvisioning", tag = "admin",
    request_body = SetLbProvisioningRequest,
    responses((status = 200, body = LbProvisioning), (status = 400, body = ErrorBody)), security(("admin" = [])))]
async fn set_lb_provisioning(
    State(st): State<AppState>,
    ApiJson(req): ApiJson<SetLbProvisioningRequest>,
) -> Result<Response> {
    let set = lb_provisioning::set(&st.db, &st.cfg, &req).await?;
    tracing::info!(seconds = req.seconds, load_balancer = ?req.load_balancer, "load balancer provisioning set");
    Ok(reply(StatusCode::OK, "", set))
}

/// Back to `--lb-provision-delay`: one name's setting, or every setting.
#[utoipa::path(delete, path = "/v1/load-balancer-provisioning", operation_id = "ResetLbProvisioning", tag = "admin",
    params(ResetLbProvisioningQuery),
    responses((status = 200, body = LbProvisioning), (status = 400, body = ErrorBody)), security(("admin" = [])))]
async fn reset_lb_provisioning(
    State(st): State<AppState>,
    ApiQuery(q): ApiQuery<ResetLbProvisioningQuery>,
) -> Result<Response> {
    Ok(reply(StatusCode::OK, "", lb_provisioning::reset(&st.db, &st.cfg, q.load_balancer.as_deref()).await?))
}

/// Create a load balancer. It is `provisioning` (no address) until the provisioning delay has passed.
#[utoipa::path(post, path = "/v1/load-balancers", operation_id = "CreateLoadBalancer", tag = "load-balancers",
    request_body = CreateLoadBalancerRequest,
    params(("Idempotency-Key" = Option<String>, Header, description = "Client token: a retry with the same key returns the original load balancer")),
    responses((status = 201, body = LoadBalancer), (status = 400, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("user" = [])))]
async fn create_load_balancer(
    State(st): State<AppState>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<CreateLoadBalancerRequest>,
) -> Result<Response> {
    let key = idempotency_key(&headers)?;
    let (lb, replayed) = load_balancers::create(&st.db, &st.cfg, &req, key.as_deref()).await?;
    Ok(created(&lb.id.clone(), shown(&st, lb).await, replayed))
}

#[utoipa::path(get, path = "/v1/load-balancers", operation_id = "ListLoadBalancers", tag = "load-balancers",
    params(ListLoadBalancersQuery), responses((status = 200, body = LoadBalancerList), (status = 400, body = ErrorBody)),
    security(("user" = [])))]
async fn list_load_balancers(
    State(st): State<AppState>,
    ApiQuery(q): ApiQuery<ListLoadBalancersQuery>,
) -> Result<Response> {
    let mut list = load_balancers::list(&st.db, &q).await?;
    show(&st, &mut list.items).await;
    Ok(reply(StatusCode::OK, "", list))
}

/// Get a load balancer; with the data plane on, with its listeners' states and its backends' health.
#[utoipa::path(get, path = "/v1/load-balancers/{id}", operation_id = "GetLoadBalancer", tag = "load-balancers",
    params(("id" = String, Path)), responses((status = 200, body = LoadBalancer), (status = 404, body = ErrorBody)),
    security(("user" = [])))]
async fn get_load_balancer(State(st): State<AppState>, ApiPath(id): ApiPath<String>) -> Result<Response> {
    Ok(reply(StatusCode::OK, &id, shown(&st, load_balancers::get(&st.db, &id).await?).await))
}

/// Change listeners, backends, source ranges or the health check; fields left out stay as they are.
#[utoipa::path(patch, path = "/v1/load-balancers/{id}", operation_id = "UpdateLoadBalancer", tag = "load-balancers",
    params(("id" = String, Path)), request_body = UpdateLoadBalancerRequest,
    responses((status = 200, body = LoadBalancer), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("user" = [])))]
async fn update_load_balancer(
    State(st): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<UpdateLoadBalancerRequest>,
) -> Result<Response> {
    Ok(reply(StatusCode::OK, &id, shown(&st, load_balancers::update(&st.db, &id, &req).await?).await))
}

/// Delete: the load balancer is `deleting`, then gone.
#[utoipa::path(delete, path = "/v1/load-balancers/{id}", operation_id = "DeleteLoadBalancer", tag = "load-balancers",
    params(("id" = String, Path)), responses((status = 200, body = LoadBalancer), (status = 404, body = ErrorBody)),
    security(("user" = [])))]
async fn delete_load_balancer(State(st): State<AppState>, ApiPath(id): ApiPath<String>) -> Result<Response> {
    Ok(reply(StatusCode::OK, &id, shown(&st, load_balancers::delete(&st.db, &st.cfg, &id).await?).await))
}

/// Load balancers as every call answers them: with the data plane on, their `ip_mode` (from their forwarding),
/// listeners' states and backends' health — the same from a create, an update or a delete as from a get, since
/// a CCM builds a Service's status from whichever answer it has last. Through a replica without the data
/// plane, on a database another replica serves it from, what that one published. (Classic ELB's
/// DescribeInstanceHealth reads its backends' health from here too.)
pub(crate) async fn show(st: &AppState, lbs: &mut [LoadBalancer]) {
    if let Some(dataplane) = &st.dataplane {
        lbs.iter_mut().for_each(|lb| dataplane.annotate(lb));
    } else if st.db.backend() == Backend::Postgres {
        let one = if let [lb] = &*lbs { Some(lb.id.clone()) } else { None };
        match published::read(&st.db, one.as_deref()).await {
            Ok(mut views) => lbs.iter_mut().for_each(|lb| {
                if let Some(view) = views.remove(&lb.id) {
                    view.apply(lb);
                }
            }),
            Err(e) => tracing::warn!(error = %e, "cannot read the data plane's view another replica published"),
        }
    }
}

pub(crate) async fn shown(st: &AppState, mut lb: LoadBalancer) -> LoadBalancer {
    show(st, std::slice::from_mut(&mut lb)).await;
    lb
}

//! Fault injection API (admin): `/v1/faults`, `/v1/lb-faults`, `/v1/rate-limits`, `/v1/outages`,
//! `/v1/rate-limit-presets` (list, install, clear), `/v1/hangs`, `/v1/spot/reclaim`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use fakecloud_api::{
    CreateFaultRuleRequest, CreateLbFaultRuleRequest, ErrorBody, FaultRule, FaultRuleList, Hang, HangList, LbFaultRule,
    LbFaultRuleList, Outage, OutageList, RateLimit, RateLimitList, RateLimitPreset, RateLimitPresetList,
    ReclaimRequest, ReclaimResponse, SetRateLimitRequest, SpotRandom, SpotRandomRequest, StartHangRequest,
    StartOutageRequest, codes,
};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::extract::{ApiJson, ApiPath};
use super::reply::{created, reply};
use super::state::AppState;
use crate::error::{ApiError, Result};
use crate::store::{hangs, instances};
use crate::validate;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(add_fault, list_faults, clear_faults))
        .routes(routes!(delete_fault))
        .routes(routes!(add_lb_fault, list_lb_faults))
        .routes(routes!(delete_lb_fault))
        .routes(routes!(list_rate_limits))
        .routes(routes!(set_rate_limit, delete_rate_limit))
        .routes(routes!(install_rate_limit_preset))
        .routes(routes!(list_rate_limit_presets, clear_rate_limit_presets))
        .routes(routes!(start_outage, list_outages))
        .routes(routes!(stop_outage))
        .routes(routes!(start_hang, list_hangs))
        .routes(routes!(stop_hang))
        .routes(routes!(reclaim_spot))
        .routes(routes!(start_spot_random, stop_spot_random))
}

/// Reclaim random spot instances at a rate (seeded by `fakecloud serve --seed`), each with a notice.
#[utoipa::path(put, path = "/v1/spot/random", operation_id = "StartSpotRandom", tag = "faults", request_body = SpotRandomRequest,
    responses((status = 200, body = SpotRandom), (status = 400, body = ErrorBody)), security(("admin" = [])))]
async fn start_spot_random(State(st): State<AppState>, ApiJson(req): ApiJson<SpotRandomRequest>) -> Result<Response> {
    Ok(reply(StatusCode::OK, "", st.faults().start_spot_random(req).await?))
}

#[utoipa::path(delete, path = "/v1/spot/random", operation_id = "StopSpotRandom", tag = "faults",
    responses((status = 200, body = serde_json::Value)), security(("admin" = [])))]
async fn stop_spot_random(State(st): State<AppState>) -> Result<Response> {
    st.faults().stop_spot_random().await?;
    Ok(reply(StatusCode::OK, "", serde_json::json!({"stopped": true})))
}

/// Add a fault rule. Rules are tried in order for every user call; the first whose match and trigger fire wins.
#[utoipa::path(post, path = "/v1/faults", operation_id = "AddFault", tag = "faults", request_body = CreateFaultRuleRequest,
    responses((status = 201, body = FaultRule), (status = 400, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("admin" = [])))]
async fn add_fault(State(st): State<AppState>, ApiJson(req): ApiJson<CreateFaultRuleRequest>) -> Result<Response> {
    let rule = st.faults().add_rule(req).await?;
    Ok(created(&rule.id.clone(), rule, false))
}

#[utoipa::path(get, path = "/v1/faults", operation_id = "ListFaults", tag = "faults",
    responses((status = 200, body = FaultRuleList)), security(("admin" = [])))]
async fn list_faults(State(st): State<AppState>) -> Response {
    reply(StatusCode::OK, "", FaultRuleList { items: st.faults().list_rules().await })
}

/// Add a data-plane fault rule: new connections to matching load balancers are reset or delayed, or their
/// backends' health checks fail (black-hole). The first rule that fires wins.
#[utoipa::path(post, path = "/v1/lb-faults", operation_id = "AddLbFault", tag = "faults", request_body = CreateLbFaultRuleRequest,
    responses((status = 201, body = LbFaultRule), (status = 400, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("admin" = [])))]
async fn add_lb_fault(State(st): State<AppState>, ApiJson(req): ApiJson<CreateLbFaultRuleRequest>) -> Result<Response> {
    let rule = st.faults().add_lb_rule(req).await?;
    Ok(created(&rule.id.clone(), rule, false))
}

/// The data-plane fault rules, with how many connections or health checks each matched and faulted.
#[utoipa::path(get, path = "/v1/lb-faults", operation_id = "ListLbFaults", tag = "faults",
    responses((status = 200, body = LbFaultRuleList)), security(("admin" = [])))]
async fn list_lb_faults(State(st): State<AppState>) -> Response {
    reply(StatusCode::OK, "", LbFaultRuleList { items: st.faults().list_lb_rules().await })
}

#[utoipa::path(delete, path = "/v1/lb-faults/{id}", operation_id = "DeleteLbFault", tag = "faults", params(("id" = String, Path)),
    responses((status = 200, body = LbFaultRule), (status = 404, body = ErrorBody)), security(("admin" = [])))]
async fn delete_lb_fault(State(st): State<AppState>, ApiPath(id): ApiPath<String>) -> Result<Response> {
    Ok(reply(StatusCode::OK, &id, st.faults().delete_lb_rule(&id).await?))
}

/// Remove every fault rule (API and data-plane), rate limit and outage.
#[utoipa::path(delete, path = "/v1/faults", operation_id = "ClearFaults", tag = "faults",
    responses((status = 200, body = serde_json::Value)), security(("admin" = [])))]
async fn clear_faults(State(st): State<AppState>) -> Result<Response> {
    st.faults().clear().await?;
    Ok(reply(StatusCode::OK, "", serde_json::json!({"cleared": true})))
}

#[utoipa::path(delete, path = "/v1/faults/{id}", operation_id = "DeleteFault", tag = "faults", params(("id" = String, Path)),
    responses((status = 200, body = FaultRule), (status = 404, body = ErrorBody)), security(("admin" = [])))]
async fn delete_fault(State(st): State<AppState>, ApiPath(id): ApiPath<String>) -> Result<Response> {
    Ok(reply(StatusCode::OK, &id, st.faults().delete_rule(&id).await?))
}

#[utoipa::path(get, path = "/v1/rate-limits", operation_id = "ListRateLimits", tag = "faults",
    responses((status = 200, body = RateLimitList)), security(("admin" = [])))]
async fn list_rate_limits(State(st): State<AppState>) -> Response {
    reply(StatusCode::OK, "", RateLimitList { items: st.faults().list_limits().await })
}

/// Create or replace the named rate limit: a token bucket or a clock-aligned fixed window, with the status,
/// code and headers of its refusals.
#[utoipa::path(put, path = "/v1/rate-limits/{id}", operation_id = "SetRateLimit", tag = "faults", params(("id" = String, Path)),
    request_body = SetRateLimitRequest, responses((status = 200, body = RateLimit), (status = 400, body = ErrorBody)),
    security(("admin" = [])))]
async fn set_rate_limit(
    State(st): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<SetRateLimitRequest>,
) -> Result<Response> {
    Ok(reply(StatusCode::OK, &id, st.faults().set_limit(&id, req).await?))
}

#[utoipa::path(delete, path = "/v1/rate-limits/{id}", operation_id = "DeleteRateLimit", tag = "faults", params(("id" = String, Path)),
    responses((status = 200, body = RateLimit), (status = 404, body = ErrorBody)), security(("admin" = [])))]
async fn delete_rate_limit(State(st): State<AppState>, ApiPath(id): ApiPath<String>) -> Result<Response> {
    Ok(reply(StatusCode::OK, &id, st.faults().delete_limit(&id).await?))
}

/// Install a cloud's throttling as rate limits named `<preset>-...`, replacing any other preset's (limits set
/// by name stay): `aws-ec2` (503 `RequestLimitExceeded`, no Retry-After, request and resource token buckets),
/// `aws-elb` (400 `Throttling`, "Rate exceeded"), `azure-arm` (429 with Retry-After and
/// `x-ms-ratelimit-remaining-*` on every answer; Compute's `HighCostGet3Min` window refuses without it),
/// `gcp-compute` (403 `rateLimitExceeded` in per-minute windows aligned to the clock).
#[utoipa::path(put, path = "/v1/rate-limit-presets/{name}", operation_id = "InstallRateLimitPreset", tag = "faults",
    params(("name" = inline(RateLimitPreset), Path)),
    responses((status = 200, body = RateLimitList), (status = 404, body = ErrorBody)), security(("admin" = [])))]
async fn install_rate_limit_preset(State(st): State<AppState>, ApiPath(name): ApiPath<String>) -> Result<Response> {
    let preset = RateLimitPreset::from_name(&name).ok_or_else(|| {
        let names: Vec<&str> = RateLimitPreset::ALL.iter().map(|p| p.name()).collect();
        ApiError::not_found(
            codes::RATE_LIMIT_PRESET_NOT_FOUND,
            format!("no rate limit preset named {}; presets: {}", validate::quoted(&name), names.join(", ")),
        )
    })?;
    Ok(reply(StatusCode::OK, "", RateLimitList { items: st.faults().install_preset(preset).await? }))
}

/// Every failure-shape preset: the limits installing it sets, how its cloud refuses a request over a quota
/// (while it is installed, such requests are answered so), and whether it is installed.
#[utoipa::path(get, path = "/v1/rate-limit-presets", operation_id = "ListRateLimitPresets", tag = "faults",
    responses((status = 200, body = RateLimitPresetList)), security(("admin" = [])))]
async fn list_rate_limit_presets(State(st): State<AppState>) -> Result<Response> {
    Ok(reply(StatusCode::OK, "", RateLimitPresetList { items: st.faults().presets().await }))
}

/// Remove every preset's rate limits (limits set by name stay); answers with those removed.
#[utoipa::path(delete, path = "/v1/rate-limit-presets", operation_id = "ClearRateLimitPresets", tag = "faults",
    responses((status = 200, body = RateLimitList)), security(("admin" = [])))]
async fn clear_rate_limit_presets(State(st): State<AppState>) -> Result<Response> {
    Ok(reply(StatusCode::OK, "", RateLimitList { items: st.faults().clear_presets().await? }))
}

/// Start an outage of the whole API, one service or one zone.
#[utoipa::path(post, path = "/v1/outages", operation_id = "StartOutage", tag = "faults", request_body = StartOutageRequest,
    responses((status = 201, body = Outage), (status = 400, body = ErrorBody)), security(("admin" = [])))]
async fn start_outage(State(st): State<AppState>, ApiJson(req): ApiJson<StartOutageRequest>) -> Result<Response> {
    let outage = st.faults().start_outage(req, &st.cfg.topology.zone_names()).await?;
    Ok(created(&outage.id.clone(), outage, false))
}

/// Outages in force now.
#[utoipa::path(get, path = "/v1/outages", operation_id = "ListOutages", tag = "faults",
    responses((status = 200, body = OutageList)), security(("admin" = [])))]
async fn list_outages(State(st): State<AppState>) -> Response {
    reply(StatusCode::OK, "", OutageList { items: st.faults().list_outages().await })
}

#[utoipa::path(delete, path = "/v1/outages/{id}", operation_id = "StopOutage", tag = "faults", params(("id" = String, Path)),
    responses((status = 200, body = Outage), (status = 404, body = ErrorBody)), security(("admin" = [])))]
async fn stop_outage(State(st): State<AppState>, ApiPath(id): ApiPath<String>) -> Result<Response> {
    Ok(reply(StatusCode::OK, &id, st.faults().stop_outage(&id).await?))
}

/// Hang running machines: each instance stays `running` while its guest — and so its kubelet — stops
/// answering; the Node goes NotReady after the controller manager's grace period. A restart ends the hang.
#[utoipa::path(post, path = "/v1/hangs", operation_id = "StartHang", tag = "faults", request_body = StartHangRequest,
    responses((status = 200, body = HangList), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("admin" = [])))]
async fn start_hang(State(st): State<AppState>, ApiJson(req): ApiJson<StartHangRequest>) -> Result<Response> {
    let items = hangs::start(&st.db, &st.cfg, &req).await?;
    tracing::warn!(count = items.len(), "machines hung");
    Ok(reply(StatusCode::OK, "", HangList { items }))
}

/// The hung machines.
#[utoipa::path(get, path = "/v1/hangs", operation_id = "ListHangs", tag = "faults",
    responses((status = 200, body = HangList)), security(("admin" = [])))]
async fn list_hangs(State(st): State<AppState>) -> Result<Response> {
    Ok(reply(StatusCode::OK, "", HangList { items: hangs::list(&st.db).await? }))
}

/// Resume a hung machine: its kubelet reports again.
#[utoipa::path(delete, path = "/v1/hangs/{instance_id}", operation_id = "StopHang", tag = "faults", params(("instance_id" = String, Path)),
    responses((status = 200, body = Hang), (status = 404, body = ErrorBody)), security(("admin" = [])))]
async fn stop_hang(State(st): State<AppState>, ApiPath(id): ApiPath<String>) -> Result<Response> {
    Ok(reply(StatusCode::OK, &id, hangs::stop(&st.db, &id).await?))
}

/// Reclaim spot instances after a notice: they turn `stopping`, then `terminated` with the reason
/// `Server.SpotInstanceTermination`.
#[utoipa::path(post, path = "/v1/spot/reclaim", operation_id = "ReclaimSpot", tag = "faults", request_body = ReclaimRequest,
    responses((status = 200, body = ReclaimResponse), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("admin" = [])))]
async fn reclaim_spot(State(st): State<AppState>, ApiJson(req): ApiJson<ReclaimRequest>) -> Result<Response> {
    let items = instances::reclaim(&st.db, &st.cfg, &req).await?;
    tracing::warn!(count = items.len(), "spot instances reclaimed");
    Ok(reply(StatusCode::OK, "", ReclaimResponse { items }))
}

//! `/v1/quotas`: anyone may read them; only an admin may change them.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use fakecloud_api::{ErrorBody, Quota, QuotaList, QuotaName, SetQuotaRequest, codes};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::extract::{ApiJson, ApiPath};
use super::reply::reply;
use super::state::AppState;
use crate::db::now_ms;
use crate::error::{ApiError, Result};
use crate::store::quotas;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_quotas)).routes(routes!(get_quota, set_quota))
}

fn parse_name(name: &str) -> Result<QuotaName> {
    QuotaName::parse(name).ok_or_else(|| {
        let all: Vec<&str> = QuotaName::ALL.iter().map(|q| q.as_str()).collect();
        ApiError::not_found(codes::QUOTA_NOT_FOUND, format!("no quota named {name:?}; quotas: {}", all.join(", ")))
    })
}

#[utoipa::path(get, path = "/v1/quotas", operation_id = "ListQuotas", tag = "quotas",
    responses((status = 200, body = QuotaList)), security(("user" = [])))]
async fn list_quotas(State(st): State<AppState>) -> Result<Response> {
    let now = now_ms();
    let mut items = Vec::new();
    for name in QuotaName::ALL {
        items.push(quotas::get(st.db.reader(), name, now).await?);
    }
    Ok(reply(StatusCode::OK, "", QuotaList { items }))
}

#[utoipa::path(get, path = "/v1/quotas/{name}", operation_id = "GetQuota", tag = "quotas",
    params(("name" = String, Path, description = "e.g. `routes-per-route-table`")),
    responses((status = 200, body = Quota), (status = 404, body = ErrorBody)), security(("user" = [])))]
async fn get_quota(State(st): State<AppState>, ApiPath(name): ApiPath<String>) -> Result<Response> {
    let q = quotas::get(st.db.reader(), parse_name(&name)?, now_ms()).await?;
    Ok(reply(StatusCode::OK, &name, q))
}

/// Set a limit. Lowering it below current usage blocks new creates; nothing existing is removed.
#[utoipa::path(put, path = "/v1/quotas/{name}", operation_id = "SetQuota", tag = "quotas",
    params(("name" = String, Path)), request_body = SetQuotaRequest,
    responses((status = 200, body = Quota), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("admin" = [])))]
async fn set_quota(
    State(st): State<AppState>,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<SetQuotaRequest>,
) -> Result<Response> {
    let quota = parse_name(&name)?;
    quotas::set(&st.db, quota, req.limit).await?;
    tracing::info!(%quota, limit = req.limit, "quota set");
    Ok(reply(StatusCode::OK, &name, quotas::get(st.db.writer(), quota, now_ms()).await?))
}

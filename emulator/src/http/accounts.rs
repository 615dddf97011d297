//! `/v1/accounts` and `/v1/leases`: the operator (the emulator's own admin token) creates, lists and deletes
//! accounts, and leases them out. An account's own tokens reach its cloud, where these paths are refused. The
//! accounts themselves are clouds, which live above this layer (`crate::accounts`): the handlers see them
//! through `state::Registry`.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::{StatusCode, request::Parts};
use axum::response::Response;
use fakecloud_api::{
    Account, AccountList, CreateAccountRequest, CreatedAccount, ErrorBody, LeaseRequest, LeasedAccount,
    RenewLeaseRequest, codes,
};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::extract::{ApiJson, ApiPath};
use super::reply::reply;
use super::state::{AppState, Registry};
use crate::error::{ApiError, Kind, Result};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_accounts, create_account))
        .routes(routes!(get_account, delete_account))
        .routes(routes!(take_lease))
        .routes(routes!(renew_lease, release_lease))
}

/// The registry, which only the emulator's own cloud has: the operator's. An extractor, taken before the body, so
/// that an account's admin (the admin role, in its own cloud) is refused whatever it sends: 403, never a 400 for
/// a bad body first (issue #47).
struct Operator(Arc<dyn Registry>);

impl FromRequestParts<AppState> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(_: &mut Parts, st: &AppState) -> Result<Self> {
        st.accounts.clone().map(Self).ok_or_else(|| {
            ApiError::new(
                Kind::Status(StatusCode::FORBIDDEN.as_u16()),
                codes::FORBIDDEN,
                "accounts are managed with the emulator's own admin token (the one `fakecloud serve` printed), not \
                 an account's",
            )
        })
    }
}

#[utoipa::path(get, path = "/v1/accounts", operation_id = "ListAccounts", tag = "accounts",
    responses((status = 200, body = AccountList), (status = 403, body = ErrorBody)), security(("admin" = [])))]
async fn list_accounts(Operator(accounts): Operator) -> Result<Response> {
    Ok(reply(StatusCode::OK, "", AccountList { items: accounts.list().await? }))
}

/// A new account: a cloud of its own, empty, reached with the tokens in the answer (shown this once).
#[utoipa::path(post, path = "/v1/accounts", operation_id = "CreateAccount", tag = "accounts",
    request_body = CreateAccountRequest,
    responses((status = 201, body = CreatedAccount), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("admin" = [])))]
async fn create_account(Operator(accounts): Operator, ApiJson(req): ApiJson<CreateAccountRequest>) -> Result<Response> {
    let created = accounts.create(&req.id).await?;
    Ok(reply(StatusCode::CREATED, &req.id, created))
}

#[utoipa::path(get, path = "/v1/accounts/{id}", operation_id = "GetAccount", tag = "accounts",
    params(("id" = String, Path)),
    responses((status = 200, body = Account), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("admin" = [])))]
async fn get_account(Operator(accounts): Operator, ApiPath(id): ApiPath<String>) -> Result<Response> {
    Ok(reply(StatusCode::OK, &id, accounts.get(&id).await?))
}

/// Delete the account and everything in it: its tokens stop working at once, its database is removed.
#[utoipa::path(delete, path = "/v1/accounts/{id}", operation_id = "DeleteAccount", tag = "accounts",
    params(("id" = String, Path)),
    responses((status = 200, body = Account), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("admin" = [])))]
async fn delete_account(Operator(accounts): Operator, ApiPath(id): ApiPath<String>) -> Result<Response> {
    Ok(reply(StatusCode::OK, &id, accounts.delete(&id).await?))
}

/// Take an account for a while: the one named, or the first free one. One whose lease lapsed is wiped first. The
/// answer has its tokens; when the lease ends (released, or lapsed unrenewed) the account is wiped — emptied, new
/// tokens — and free again.
#[utoipa::path(post, path = "/v1/leases", operation_id = "TakeLease", tag = "accounts",
    request_body = LeaseRequest,
    responses((status = 201, body = LeasedAccount), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("admin" = [])))]
async fn take_lease(Operator(accounts): Operator, ApiJson(req): ApiJson<LeaseRequest>) -> Result<Response> {
    let leased = accounts.take(&req).await?;
    Ok(reply(StatusCode::CREATED, &leased.account.id.clone(), leased))
}

/// Renew a lease, by its holder, for `ttl_seconds` from now.
#[utoipa::path(put, path = "/v1/leases/{account}", operation_id = "RenewLease", tag = "accounts",
    params(("account" = String, Path)), request_body = RenewLeaseRequest,
    responses((status = 200, body = Account), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("admin" = [])))]
async fn renew_lease(
    Operator(accounts): Operator,
    ApiPath(account): ApiPath<String>,
    ApiJson(req): ApiJson<RenewLeaseRequest>,
) -> Result<Response> {
    Ok(reply(StatusCode::OK, &account, accounts.renew(&account, &req).await?))
}

/// End a lease now: the account is wiped (emptied, new tokens) and free. A free account is left as it is.
#[utoipa::path(delete, path = "/v1/leases/{account}", operation_id = "ReleaseLease", tag = "accounts",
    params(("account" = String, Path)),
    responses((status = 200, body = Account), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("admin" = [])))]
async fn release_lease(Operator(accounts): Operator, ApiPath(account): ApiPath<String>) -> Result<Response> {
    Ok(reply(StatusCode::OK, &account, accounts.release(&account).await?))
}

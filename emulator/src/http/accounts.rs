//! `/v1/accounts`: the operator (the emulator's own admin token) creates, lists and deletes accounts. An
//! account's own tokens reach its cloud, where these paths are refused. The accounts themselves are clouds,
//! which live above this layer (`crate::accounts`): the handlers see them through `state::Registry`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use fakecloud_api::{Account, AccountList, CreateAccountRequest, CreatedAccount, ErrorBody, codes};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::extract::{ApiJson, ApiPath};
use super::reply::reply;
use super::state::{AppState, Registry};
use crate::error::{ApiError, Kind, Result};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_accounts, create_account)).routes(routes!(get_account, delete_account))
}

/// The registry, which only the emulator's own cloud has.
fn registry(st: &AppState) -> Result<&dyn Registry> {
    st.accounts.as_deref().ok_or_else(|| {
        ApiError::new(
            Kind::Status(StatusCode::FORBIDDEN.as_u16()),
            codes::FORBIDDEN,
            "accounts are managed with the emulator's own admin token (the one `fakecloud serve` printed), not an \
             account's",
        )
    })
}

#[utoipa::path(get, path = "/v1/accounts", operation_id = "ListAccounts", tag = "accounts",
    responses((status = 200, body = AccountList), (status = 403, body = ErrorBody)), security(("admin" = [])))]
async fn list_accounts(State(st): State<AppState>) -> Result<Response> {
    Ok(reply(StatusCode::OK, "", AccountList { items: registry(&st)?.list().await? }))
}

/// A new account: a cloud of its own, empty, reached with the tokens in the answer (shown this once).
#[utoipa::path(post, path = "/v1/accounts", operation_id = "CreateAccount", tag = "accounts",
    request_body = CreateAccountRequest,
    responses((status = 201, body = CreatedAccount), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("admin" = [])))]
async fn create_account(State(st): State<AppState>, ApiJson(req): ApiJson<CreateAccountRequest>) -> Result<Response> {
    let created = registry(&st)?.create(&req.id).await?;
    Ok(reply(StatusCode::CREATED, &req.id, created))
}

#[utoipa::path(get, path = "/v1/accounts/{id}", operation_id = "GetAccount", tag = "accounts",
    params(("id" = String, Path)),
    responses((status = 200, body = Account), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("admin" = [])))]
async fn get_account(State(st): State<AppState>, ApiPath(id): ApiPath<String>) -> Result<Response> {
    Ok(reply(StatusCode::OK, &id, registry(&st)?.get(&id).await?))
}

/// Delete the account and everything in it: its tokens stop working at once, its database is removed.
#[utoipa::path(delete, path = "/v1/accounts/{id}", operation_id = "DeleteAccount", tag = "accounts",
    params(("id" = String, Path)),
    responses((status = 200, body = Account), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("admin" = [])))]
async fn delete_account(State(st): State<AppState>, ApiPath(id): ApiPath<String>) -> Result<Response> {
    Ok(reply(StatusCode::OK, &id, registry(&st)?.delete(&id).await?))
}

//! How handlers answer: JSON tagged with the resource it is about, for the audit log.

use axum::Json;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use fakecloud_api::REPLAYED_HEADER;
use serde::Serialize;

use crate::call::ResourceId;

/// A JSON response tagged with the resource it is about (`""`: none, as for a listing).
pub fn reply<T: Serialize>(status: StatusCode, id: &str, body: T) -> Response {
    let mut resp = (status, Json(body)).into_response();
    if !id.is_empty() {
        resp.extensions_mut().insert(ResourceId(id.to_string()));
    }
    resp
}

/// A create's response: 201, or 200 with `Idempotent-Replayed: true` when the key matched an earlier create.
pub fn created<T: Serialize>(id: &str, body: T, replayed: bool) -> Response {
    let mut resp = reply(if replayed { StatusCode::OK } else { StatusCode::CREATED }, id, body);
    if replayed {
        resp.headers_mut().insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    }
    resp
}

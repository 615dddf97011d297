//! How calls are answered: JSON tagged with the resource it is about (for the audit log), and errors as the
//! one error envelope, with the HTTP status of each kind of failure chosen here.

use axum::Json;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use fakecloud_api::{ErrorBody, ErrorDetail, REPLAYED_HEADER};
use serde::Serialize;

use crate::call::{ErrorCode, ResourceId};
use crate::error::{ApiError, Kind, QuotaRefused, SERVER_HEADERS};

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

/// The HTTP status of each kind of failure.
pub fn status_of(kind: Kind) -> StatusCode {
    match kind {
        Kind::Invalid => StatusCode::BAD_REQUEST,
        Kind::NotFound => StatusCode::NOT_FOUND,
        Kind::Conflict => StatusCode::CONFLICT,
        Kind::Exceeded => StatusCode::UNPROCESSABLE_ENTITY,
        Kind::Throttled => StatusCode::TOO_MANY_REQUESTS,
        Kind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Kind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        // Checked where it is chosen (a fault rule's status is an error status); a bad one is a bug, said so.
        Kind::Status(s) => StatusCode::from_u16(s).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
    }
}

/// An error as the API answers it: its kind's status, the envelope with the call's request ID (wherever the
/// error was made), and its extra headers except those that frame the answer.
impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let request_id = crate::call::request_id();
        let body_message = self.quota.map(|_| self.message.clone()).unwrap_or_default();
        let body = ErrorBody { error: ErrorDetail { code: self.code.to_string(), message: self.message, request_id } };
        let mut resp = (status_of(self.kind), Json(body)).into_response();
        for (k, v) in &self.headers {
            if let (Ok(k), Ok(v)) = (HeaderName::try_from(k.as_str()), HeaderValue::try_from(v.as_str()))
                && !SERVER_HEADERS.contains(&k.as_str())
            {
                resp.headers_mut().insert(k, v);
            }
        }
        resp.extensions_mut().insert(ErrorCode(self.code.to_string()));
        if let Some(quota) = self.quota {
            resp.extensions_mut().insert(QuotaRefused { quota, message: body_message });
        }
        resp
    }
}

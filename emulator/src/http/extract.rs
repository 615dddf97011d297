//! Extractors whose rejections use the API's error envelope and name the offending field.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::{HeaderMap, StatusCode, header, request::Parts};
use fakecloud_api::{IDEMPOTENCY_KEY_HEADER, codes};
use serde::de::DeserializeOwned;

use crate::error::{ApiError, Kind};
use crate::store::idempotency;

/// The largest request body read, in bytes.
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

/// A JSON body. Malformed JSON is `InvalidJson`; a wrong field is `InvalidParameter` with the field's path.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let is_json =
            req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|ct| {
                ct.split(';').next().is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
            });
        if !is_json {
            return Err(ApiError::new(
                Kind::Status(StatusCode::UNSUPPORTED_MEDIA_TYPE.as_u16()),
                codes::UNSUPPORTED_MEDIA_TYPE,
                "send the body as JSON with Content-Type: application/json",
            ));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(body_rejection)?;
        parse_json(&bytes).map(ApiJson)
    }
}

/// A body that could not be read: over the size limit (413), or cut off.
pub fn body_rejection(e: BytesRejection) -> ApiError {
    let status = e.status();
    let code = if status == StatusCode::PAYLOAD_TOO_LARGE { codes::PAYLOAD_TOO_LARGE } else { codes::INVALID_JSON };
    let limit = MAX_BODY_BYTES;
    let detail =
        if code == codes::PAYLOAD_TOO_LARGE { format!("the body is over {limit} bytes") } else { e.body_text() };
    ApiError::new(Kind::Status(status.as_u16()), code, format!("cannot read the request body: {detail}"))
}

/// A request body: exactly one JSON object. serde alone would read a struct from an array (its fields in
/// order: `["x"]` as `{"name":"x"}`) and would stop after the first value, ignoring whatever follows.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let not_an_object = match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'[') => Some("an array"),
        Some(b'"') => Some("a string"),
        Some(b'-' | b'0'..=b'9') => Some("a number"),
        Some(b't' | b'f') => Some("a boolean"),
        Some(b'n') => Some("null"),
        // An object, nothing at all, or not JSON: serde says which.
        _ => None,
    };
    if let Some(kind) = not_an_object {
        return Err(ApiError::bad_request(
            codes::INVALID_PARAMETER,
            format!("body: must be a JSON object, got {kind}"),
        ));
    }
    // Read as a value first: `from_slice` also refuses anything after the one value.
    let mut value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| {
        ApiError::bad_request(codes::INVALID_JSON, format!("malformed JSON: {e} (the body must be one JSON object)"))
    })?;
    if let Some(field) = nul_in(&value, "body") {
        return Err(nul_refused(&field));
    }
    integral_floats_as_integers(&mut value);
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." { "body".to_string() } else { path };
        ApiError::bad_request(codes::INVALID_PARAMETER, format!("{field}: {}", e.into_inner()))
    })
}

/// The first field (as `body.tags.k`) whose name or text holds a NUL character. PostgreSQL's text cannot hold
/// one, so neither store takes one: the same answer on both.
fn nul_in(value: &serde_json::Value, at: &str) -> Option<String> {
    use serde_json::Value;
    match value {
        Value::String(s) => s.contains('\0').then(|| at.to_string()),
        Value::Array(items) => items.iter().enumerate().find_map(|(i, v)| nul_in(v, &format!("{at}[{i}]"))),
        Value::Object(fields) => fields.iter().find_map(|(k, v)| {
            let field = format!("{at}.{k}");
            if k.contains('\0') { Some(field) } else { nul_in(v, &field) }
        }),
        Value::Null | Value::Bool(_) | Value::Number(_) => None,
    }
}

fn nul_refused(field: &str) -> ApiError {
    ApiError::bad_request(
        codes::INVALID_PARAMETER,
        format!("{}: a NUL character (\\u0000) is not allowed in text; remove it", field.escape_debug()),
    )
}

/// A path or query string that decodes to a NUL character (see [`nul_in`]).
fn refuse_encoded_nul(encoded: Option<&str>, part: &str) -> Result<(), ApiError> {
    if encoded.is_some_and(|s| s.contains("%00")) { Err(nul_refused(part)) } else { Ok(()) }
}

/// JSON has one kind of number: `5.0` is the integer 5 (JSON Schema's `integer` says so, and the OpenAPI
/// document promises JSON Schema), but serde refuses a float where it expects an integer. A number without a
/// fractional part becomes an integer where one can hold it; `f64` fields take integers as they are.
fn integral_floats_as_integers(value: &mut serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::Number(n) => {
            // 2^64 and -2^63 are exact as f64; `as` is exact for integral values strictly inside them.
            const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;
            const MINUS_TWO_POW_63: f64 = -9_223_372_036_854_775_808.0;
            if let Some(f) = n.as_f64().filter(|f| n.is_f64() && f.fract() == 0.0) {
                if (0.0..TWO_POW_64).contains(&f) {
                    *n = (f as u64).into();
                } else if (MINUS_TWO_POW_63..0.0).contains(&f) {
                    *n = (f as i64).into();
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral_floats_as_integers),
        Value::Object(fields) => fields.values_mut().for_each(integral_floats_as_integers),
        Value::Null | Value::Bool(_) | Value::String(_) => {}
    }
}

/// Path parameters, with the same error envelope (a percent-encoded ID that is not UTF-8, say).
pub struct ApiPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        refuse_encoded_nul(Some(parts.uri.path()), "path")?;
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(v)) => Ok(ApiPath(v)),
            Err(e) => Err(ApiError::bad_request(codes::INVALID_PARAMETER, format!("path: {}", e.body_text()))),
        }
    }
}

/// A query string, with the same error envelope.
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        refuse_encoded_nul(parts.uri.query(), "query")?;
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(v)) => Ok(ApiQuery(v)),
            Err(e) => {
                let text = e.body_text();
                let detail = text.strip_prefix("Failed to deserialize query string: ").unwrap_or(&text);
                Err(ApiError::bad_request(codes::INVALID_PARAMETER, format!("query: {detail}")))
            }
        }
    }
}

/// The `Idempotency-Key` header, validated.
pub fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get(IDEMPOTENCY_KEY_HEADER) else { return Ok(None) };
    let key = v.to_str().map_err(|_| ApiError::invalid(IDEMPOTENCY_KEY_HEADER, "must be printable ASCII"))?;
    idempotency::validate_key(key)?;
    Ok(Some(key.to_string()))
}

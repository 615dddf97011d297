//! `/console`: the web console, a page and its scripts built into the binary (no other server, no CDN, works
//! offline). The page and its assets are open to all, like `/healthz`; everything they show comes from the API,
//! called with the token the person signs in with, which the page keeps in `sessionStorage` only.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderName, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use fakecloud_api::codes;

use super::state::AppState;
use crate::error::ApiError;

/// Every file of the console: its name under `/console/`, its media type and its bytes.
const ASSETS: &[(&str, &str, &[u8])] = &[
    ("index.html", "text/html; charset=utf-8", include_bytes!("../../console/index.html")),
    ("console.css", "text/css; charset=utf-8", include_bytes!("../../console/console.css")),
    ("app.js", "text/javascript; charset=utf-8", include_bytes!("../../console/app.js")),
    ("api.js", "text/javascript; charset=utf-8", include_bytes!("../../console/api.js")),
    ("views.js", "text/javascript; charset=utf-8", include_bytes!("../../console/views.js")),
    ("tail.js", "text/javascript; charset=utf-8", include_bytes!("../../console/tail.js")),
];

/// Scripts only from files served here (no inline script, no eval), data only from this origin, and the page
/// not to be framed: an injected string can run nothing, and nothing can be sent elsewhere.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console", get(|| async { asset("index.html") }))
        .route("/console/", get(|| async { asset("index.html") }))
        .route("/console/{file}", get(|Path(file): Path<String>| async move { asset(&file) }))
}

fn asset(name: &str) -> Response {
    let Some((_, media_type, bytes)) = ASSETS.iter().find(|(n, _, _)| *n == name) else {
        return ApiError::not_found(codes::NOT_FOUND, format!("the console has no file {name:?}")).into_response();
    };
    let headers: [(HeaderName, HeaderValue); 6] = [
        (header::CONTENT_TYPE, HeaderValue::from_static(media_type)),
        (header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP)),
        (header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
        (header::REFERRER_POLICY, HeaderValue::from_static("no-referrer")),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        // A new emulator binary may bring a new console: always revalidate.
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
    ];
    (headers, *bytes).into_response()
}

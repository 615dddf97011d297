//! The HTTP API. Each resource module has its handlers and `router()`; this module assembles them, serves the
//! OpenAPI document generated from those handlers, and runs every call through `gatekeeper`: request ID,
//! authentication and role (read from each operation's `security` in the spec), metrics and the audit log.

mod admin;
mod audit;
mod audit_stream;
mod console;
mod extract;
mod faults;
mod instances;
mod load_balancers;
mod network;
mod openapi;
mod quotas;

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, MatchedPath, RawPathParams, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use fakecloud_api::{NoResponseMode, REPLAYED_HEADER, REQUEST_ID_HEADER, codes};
use serde::Serialize;
use tower_http::catch_panic::CatchPanicLayer;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;

use crate::auth::{Role, Tokens};
use crate::call::CallContext;
use crate::config::Config;
use crate::dataplane::DataPlane;
use crate::db::audit::{AuditSink, Record};
use crate::db::group_commit::settled;
use crate::db::{Db, now_ms};
use crate::error::{ApiError, ErrorCode};
use crate::faults::{Call, FaultEngine, Subject, Verdict};
use crate::metrics::Metrics;
use crate::validate;

/// The largest request body read, in bytes.
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;
/// The most of a request's path its audit entry keeps.
const AUDITED_PATH_MAX_CHARS: usize = 1024;

/// Everything a handler needs.
#[derive(Clone, Debug)]
pub struct AppState(Arc<Inner>);

#[derive(Debug)]
pub struct Inner {
    pub db: Db,
    pub cfg: Config,
    pub tokens: Tokens,
    pub metrics: Metrics,
    pub audit: AuditSink,
    faults: Arc<FaultEngine>,
    /// The load balancer data plane, when the emulator serves it (`serve --serve-load-balancers`).
    pub dataplane: Option<DataPlane>,
    /// Tasks that live as long as the app (random spot reclamation, the data plane); stopped by
    /// `stop_background`.
    background: Vec<tokio::task::JoinHandle<()>>,
    operations: Operations,
    openapi: String,
    /// Turns true when the server shuts down: open calls that would run on (audit streams) end then.
    pub stopping: tokio::sync::watch::Sender<bool>,
    /// The audit streams the admin token may have open (only it may stream).
    audit_streams: Arc<tokio::sync::Semaphore>,
}

impl AppState {
    pub fn faults(&self) -> &FaultEngine {
        &self.0.faults
    }

    pub fn stop_background(&self) {
        self.0.background.iter().for_each(|t| t.abort());
    }
}

impl Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "fakecloud",
        description = "A local cloud emulator: instances, networks and route tables, load balancers, quotas and an audit log. \
                       Every call needs `Authorization: Bearer <token>`; admin calls need the admin token. Every error \
                       has the body `ErrorBody`; a method a path does not have is answered as \
                       `components.responses.MethodNotAllowed` (405, with `Allow`)."
    ),
    modifiers(&BearerTokens),
    components(schemas(fakecloud_api::ErrorBody))
)]
struct ApiDoc;

struct BearerTokens;

impl Modify for BearerTokens {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        for name in ["user", "admin"] {
            components.add_security_scheme(
                name,
                SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
            );
        }
    }
}

/// The API's operations by method and route, read from the OpenAPI document.
#[derive(Debug, Default)]
struct Operations(HashMap<(Method, String), Operation>);

#[derive(Debug, Clone)]
struct Operation {
    name: String,
    role: Role,
    /// The status of success: 201 for a create, else 200.
    success: u16,
}

impl Operations {
    fn from_spec(api: &utoipa::openapi::OpenApi) -> Self {
        let mut map = HashMap::new();
        for (path, item) in &api.paths.paths {
            let methods = [
                (Method::GET, &item.get),
                (Method::POST, &item.post),
                (Method::PUT, &item.put),
                (Method::PATCH, &item.patch),
                (Method::DELETE, &item.delete),
            ];
            for (method, op) in methods {
                let Some(op) = op else { continue };
                let security = serde_json::to_string(&op.security).unwrap_or_default();
                let role = if security.contains("\"user\"") { Role::User } else { Role::Admin };
                let name = op.operation_id.clone().unwrap_or_else(|| path.clone());
                let success = if op.responses.responses.contains_key("201") { 201 } else { 200 };
                map.insert((method, path.clone()), Operation { name, role, success });
            }
        }
        Self(map)
    }

    /// The operation `method` calls on `route`; HEAD calls a GET operation, without the body.
    fn get(&self, method: &Method, route: &str) -> Option<&Operation> {
        let method = if method == Method::HEAD { &Method::GET } else { method };
        self.0.get(&(method.clone(), route.to_string()))
    }

    /// The methods `route` has, for `Allow` (`None`: not an API route).
    fn allow(&self, route: &str) -> Option<String> {
        let has = |m: &Method| self.0.contains_key(&(m.clone(), route.to_string()));
        let mut methods = Vec::new();
        for m in [Method::GET, Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            if has(&m) {
                methods.push(m.to_string());
                if m == Method::GET {
                    methods.push(Method::HEAD.to_string());
                }
            }
        }
        (!methods.is_empty()).then(|| methods.join(", "))
    }

    /// Every operation name, sorted.
    fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.0.values().map(|o| o.name.clone()).collect();
        v.sort();
        v
    }
}

/// The resource a response is about, for the audit log.
#[derive(Debug, Clone)]
pub struct ResourceId(pub String);

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

fn api_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(instances::router())
        .merge(network::router())
        .merge(load_balancers::router())
        .merge(quotas::router())
        .merge(audit::router())
        .merge(audit_stream::router())
        .merge(admin::router())
        .merge(faults::router())
}

/// The API's operation names, sorted: what fault rules and rate limits may name.
pub fn operation_names() -> Vec<String> {
    Operations::from_spec(&api_routes().split_for_parts().1).names()
}

/// Build the application: the API, `/healthz`, `/metrics` and `/openapi.json`.
pub async fn app(db: Db, cfg: Config, tokens: Tokens) -> Result<(Router, AppState), ApiError> {
    assemble(api_routes(), db, cfg, tokens).await
}

/// The application around `api` (the tests add an operation that panics).
async fn assemble(
    api: OpenApiRouter<AppState>,
    db: Db,
    cfg: Config,
    tokens: Tokens,
) -> Result<(Router, AppState), ApiError> {
    let (router, spec) = api.split_for_parts();
    let operations = Operations::from_spec(&spec);
    let seed = cfg.seed.unwrap_or_else(rand::random);
    tracing::info!(seed, "fault injection seed (pass --seed {seed} to repeat this run's random faults)");
    let faults = Arc::new(FaultEngine::load(db.clone(), seed, operations.names()).await?);
    let mut background = vec![faults.spawn_spot_ticker(cfg.clone())];
    let metrics = Metrics::default();
    let audit = AuditSink::spawn(db.clone(), cfg.audit_max_entries);
    let dataplane = cfg.serve_load_balancers.then(|| {
        let faults = crate::dataplane::Faults::new(faults.clone(), metrics.dataplane.clone(), audit.clone());
        let (dataplane, supervisor) = DataPlane::spawn(db.clone(), cfg.clone(), metrics.dataplane.clone(), faults);
        background.push(supervisor);
        dataplane
    });
    let openapi =
        serde_json::to_string_pretty(&openapi::document(&spec, &cfg, &operations.names())).unwrap_or_default();
    let state = AppState(Arc::new(Inner {
        db,
        cfg,
        tokens,
        metrics,
        audit,
        faults,
        dataplane,
        background,
        operations,
        openapi,
        stopping: tokio::sync::watch::Sender::new(false),
        audit_streams: Arc::new(tokio::sync::Semaphore::new(fakecloud_api::limits::AUDIT_STREAMS_PER_TOKEN as usize)),
    }));
    let router = router
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(serve_metrics))
        .route("/openapi.json", get(serve_openapi))
        .merge(console::router())
        .fallback(|| async { ApiError::not_found(codes::NOT_FOUND, "no such API path; see /openapi.json") })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        // Inside the gatekeeper, so a panicking call still gets its request ID and audit entry.
        .layer(CatchPanicLayer::custom(on_panic))
        .layer(middleware::from_fn_with_state(state.clone(), gatekeeper))
        .with_state(state.clone());
    Ok((router, state))
}

/// A handler panicked: the caller gets the envelope like any other error, the log gets the panic.
fn on_panic(panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    tracing::error!(panic = %what, "a handler panicked; answered 500");
    ApiError::internal(
        "the emulator failed on this call (a bug, logged with this request ID); it may or may not have been applied",
    )
    .into_response()
}

async fn serve_metrics(State(st): State<AppState>) -> Result<Response, ApiError> {
    let body = st.metrics.render(&st.db).await?;
    Ok(([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], body).into_response())
}

async fn serve_openapi(State(st): State<AppState>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], st.openapi.clone()).into_response()
}

/// Authenticate, authorise, and record every API call.
async fn gatekeeper(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    // A path is audited as long as a path of this API can be; a longer one (64 KB, say) only to that length.
    let path: String = req.uri().path().chars().take(AUDITED_PATH_MAX_CHARS).collect();
    let route = req.extensions().get::<MatchedPath>().map(|m| m.as_str().to_string());
    let op = route.as_deref().and_then(|r| st.operations.get(&method, r)).cloned();
    let mutating = !matches!(method, Method::GET | Method::HEAD);
    // Health, metrics and the spec are open to all and not audited; other methods on them get the 405 below.
    if route.is_some() && op.is_none() && !path.starts_with("/v1") && !mutating {
        return next.run(req).await;
    }
    let role = st.tokens.role_of(req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()));
    let (mut parts, body) = req.into_parts();
    let (body, body_read) = BodyWatch::watch(&parts.headers, body, st.cfg.connections.body_read_timeout);
    let path_params: Vec<String> = RawPathParams::from_request_parts(&mut parts, &())
        .await
        .map(|p| p.iter().map(|(_, v)| v.to_string()).collect())
        .unwrap_or_default();
    // An ID far longer than any this API hands out is refused, not looked up, repeated or audited whole.
    let bad_input = path_params
        .iter()
        .find_map(|v| validate::PATH_ID.check("path", v).err())
        .or_else(|| extract::idempotency_key(&parts.headers).err());
    let path_id = path_params.last().filter(|_| bad_input.is_none()).cloned();
    let req = Request::from_parts(parts, body);
    let request_id = uuid::Uuid::new_v4().simple().to_string();
    let entry = Record {
        time_ms: 0,
        request_id: request_id.clone(),
        role: role.map_or("anonymous", Role::as_str),
        operation: op.as_ref().map_or_else(|| "Unknown".to_string(), |o| o.name.clone()),
        method: method.to_string(),
        path,
        resource_id: None,
        status: 0,
        error_code: None,
        latency_us: 0,
        fault: None,
    };
    // A change is audited in its own transaction, as if it succeeds (see store::audit).
    let change =
        op.as_ref().filter(|_| mutating).map(|o| (Record { status: o.success, ..entry.clone() }, st.audit.clone()));
    let ctx = CallContext::new(request_id.clone(), change);

    let mut fault = None;
    // Answered only once every change the call read is committed (see db::group_commit).
    let mut resp = settled(ctx.scope(async {
            match (&op, role) {
                (None, _) if route.is_none() => next.run(req).await,
                (None, _) => {
                    // The open endpoints (health, metrics, the spec) are GET only.
                    let allow = route.as_deref().and_then(|r| st.operations.allow(r)).unwrap_or_else(|| "GET, HEAD".into());
                    let message = format!("{method} is not allowed on {}; it allows {allow}", entry.path);
                    let mut r = ApiError::new(StatusCode::METHOD_NOT_ALLOWED, codes::METHOD_NOT_ALLOWED, message).into_response();
                    if let Ok(v) = HeaderValue::from_str(&allow) {
                        r.headers_mut().insert(header::ALLOW, v);
                    }
                    r
                }
                (Some(_), None) => {
                    let mut r = ApiError::new(
                        StatusCode::UNAUTHORIZED,
                        codes::UNAUTHORIZED,
                        "missing or invalid bearer token: send Authorization: Bearer <token> (see the credentials file the emulator printed at start)",
                    )
                    .into_response();
                    r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                    r
                }
                (Some(op), Some(role)) if role < op.role => {
                    ApiError::new(StatusCode::FORBIDDEN, codes::FORBIDDEN, format!("{} needs the admin token", op.name)).into_response()
                }
                (Some(op), Some(role)) => {
                    if let Some(e) = &bad_input {
                        return e.clone().into_response();
                    }
                    let token = if role == Role::Admin { &st.tokens.admin } else { &st.tokens.user };
                    let admin_only = op.role == Role::Admin;
                    let (subject, req) = if !admin_only && st.faults().wants_subject().await {
                        match describe(&st, path_id.as_deref(), req).await {
                            Ok(described) => described,
                            Err(e) => return e.into_response(),
                        }
                    } else {
                        (None, req)
                    };
                    // Faults see a HEAD as the GET it is.
                    let call_method = if method == Method::HEAD { Method::GET } else { method.clone() };
                    let call = Call {
                        operation: &op.name,
                        method: &call_method,
                        resource_id: path_id.as_deref(),
                        role,
                        admin_only,
                        token,
                        subject: subject.as_ref(),
                    };
                    let verdict = st.faults().judge(&call).await;
                    let resp = apply(verdict, req, next, &st, path_id.as_deref(), &mut fault).await;
                    // Eventual consistency is the public API's lag: the admin token is the cloud's own view (its
                    // machines — the simulated kubelets — and the operator), which sees every instance at once.
                    if mutating || role == Role::Admin {
                        resp
                    } else {
                        conceal(resp, &op.name, path_id.as_deref(), st.faults()).await
                    }
                }
            }
        }))
        .await;

    if let Ok(v) = HeaderValue::from_str(&request_id) {
        resp.headers_mut().insert(REQUEST_ID_HEADER, v);
    }
    if let Some(read) = &body_read {
        // The body did not arrive in time: whatever the call made of a cut-off body, the answer is that.
        if read.timed_out.load(Ordering::Acquire) {
            let timeout = st.cfg.connections.body_read_timeout;
            resp = ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                codes::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {timeout:?} of the request's head (--body-read-timeout)"
                ),
            )
            .into_response();
        }
        // Answered before its body was read (refused, say): the rest of the body may still be on its way, and a
        // client that pooled the connection would send its next request after it. Say the connection is done.
        if !read.done.load(Ordering::Acquire) {
            resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
    }
    let status = resp.status().as_u16();
    // Whatever changed (a load balancer, an instance behind one, a reset), the data plane follows it now.
    if mutating
        && resp.status().is_success()
        && let Some(dataplane) = &st.dataplane
    {
        dataplane.poke();
    }
    let elapsed = started.elapsed();
    st.metrics.observe(&entry.operation, status, elapsed.as_secs_f64());
    let record = Record {
        time_ms: now_ms(),
        resource_id: resp.extensions().get::<ResourceId>().map(|r| r.0.clone()).or(path_id),
        status,
        error_code: resp.extensions().get::<ErrorCode>().map(|c| c.0.to_string()),
        latency_us: i64::try_from(elapsed.as_micros()).unwrap_or(i64::MAX),
        fault: fault.clone(),
        ..entry
    };
    match ctx.written() {
        // Written with the change, and the answer is the one it was written as.
        Some((_, w)) if (w.status, &w.resource_id, &w.fault) == (status, &record.resource_id, &record.fault) => {}
        Some((seq, _)) => st.audit.amend(seq, &record).await,
        None if mutating => st.audit.record_now(record).await,
        None => st.audit.record(record),
    }
    if let Some(f) = fault {
        st.metrics.fault_injected(&f);
    }
    resp
}

/// A request body that notes when it has been read to its end, and fails once its deadline has passed: a body
/// that trickles in (a byte every few seconds) holds its connection no longer than the body-read timeout.
struct BodyWatch {
    inner: axum::body::Body,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    read: Arc<BodyRead>,
}

/// What became of a watched body.
#[derive(Debug, Default)]
struct BodyRead {
    done: AtomicBool,
    timed_out: AtomicBool,
}

impl BodyWatch {
    /// `body`, and what becomes of it, if the headers say there is one.
    fn watch(
        headers: &axum::http::HeaderMap,
        body: axum::body::Body,
        timeout: std::time::Duration,
    ) -> (axum::body::Body, Option<Arc<BodyRead>>) {
        let length =
            headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
        let declared = length.is_some_and(|n| n > 0) || headers.contains_key(header::TRANSFER_ENCODING);
        if !declared {
            return (body, None);
        }
        let read = Arc::new(BodyRead::default());
        // A timeout too long for the clock is none.
        let deadline = tokio::time::Instant::now().checked_add(timeout).unwrap_or_else(far_future);
        let watched = Self { inner: body, deadline: Box::pin(tokio::time::sleep_until(deadline)), read: read.clone() };
        (axum::body::Body::new(watched), Some(read))
    }
}

fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + std::time::Duration::from_secs(86_400 * 365)
}

impl hyper::body::Body for BodyWatch {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        use std::task::Poll;
        let frame = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(frame, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.read.done.store(true, Ordering::Release);
        }
        if frame.is_pending() && self.deadline.as_mut().poll(cx).is_ready() {
            self.read.timed_out.store(true, Ordering::Release);
            return Poll::Ready(Some(Err(axum::Error::new("the request body did not arrive in time"))));
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// What a call is about, for faults that match on zone, name or tag: the instance or load balancer named in
/// the path, or what a create's JSON body asks for (the body is read and put back).
async fn describe(st: &AppState, path_id: Option<&str>, req: Request) -> Result<(Option<Subject>, Request), ApiError> {
    let db = st.db.reader();
    if let Some(id) = path_id {
        let row: Option<(String, Option<String>, Option<String>)> = if id.starts_with("i-") {
            sqlx::query_as("SELECT name, zone, tags FROM instances WHERE id = ?1")
                .bind(id)
                .fetch_optional(db)
                .await
                .ok()
                .flatten()
        } else if id.starts_with("lb-") {
            sqlx::query_as("SELECT name, NULL, NULL FROM load_balancers WHERE id = ?1")
                .bind(id)
                .fetch_optional(db)
                .await
                .ok()
                .flatten()
        } else {
            None
        };
        let subject = row.map(|(name, zone, tags)| Subject {
            name: Some(name),
            zone,
            tags: tags.and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default(),
        });
        return Ok((subject, req));
    }
    if req.method() != Method::POST {
        return Ok((None, req));
    }
    let (parts, body) = req.into_parts();
    let bytes = axum::body::Bytes::from_request(Request::from_parts(parts.clone(), body), &())
        .await
        .map_err(extract::body_rejection)?;
    let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let text = |k: &str| value.get(k).and_then(|v| v.as_str()).map(str::to_string);
    let subject = Subject {
        name: text("name"),
        zone: text("zone"),
        tags: value.get("tags").and_then(|t| serde_json::from_value(t.clone()).ok()).unwrap_or_default(),
    };
    Ok((Some(subject), Request::from_parts(parts, axum::body::Body::from(bytes))))
}

/// The API representation of an instance or load balancer, for eventual consistency's "previous version".
async fn current_json(st: &AppState, id: &str) -> Option<serde_json::Value> {
    let value = if id.starts_with("i-") {
        serde_json::to_value(crate::store::instances::get(&st.db, &st.cfg, id).await.ok()?)
    } else if id.starts_with("lb-") {
        serde_json::to_value(crate::store::load_balancers::get(&st.db, id).await.ok()?)
    } else {
        return None;
    };
    value.ok()
}

/// Eventual consistency: reads see resources as they were before a lagging write — not at all for a creation,
/// the previous version for a change.
async fn conceal(resp: Response, operation: &str, path_id: Option<&str>, faults: &FaultEngine) -> Response {
    let lagging = faults.lagging_now();
    // Only JSON is rewritten: a stream (the audit tail) must not be read to its end here.
    let json =
        resp.headers().get(header::CONTENT_TYPE).is_some_and(|ct| ct.as_bytes().starts_with(b"application/json"));
    if lagging.is_empty() || !resp.status().is_success() || !json {
        return resp;
    }
    if let Some(id) = path_id
        && let Some(previous) = lagging.get(id)
    {
        return match previous {
            Some(prev) => {
                let mut r = (StatusCode::OK, Json(prev.clone())).into_response();
                r.extensions_mut().insert(ResourceId(id.to_string()));
                r
            }
            // GetInstance -> InstanceNotFound, as the resource's own 404 would say.
            None => {
                let code = format!("{}NotFound", operation.trim_start_matches("Get"));
                ApiError::new(StatusCode::NOT_FOUND, code, format!("{id} does not exist")).into_response()
            }
        };
    }
    let (parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return ApiError::internal("cannot read a response body").into_response();
    };
    let mut value: serde_json::Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(_) => return Response::from_parts(parts, axum::body::Body::from(bytes)),
    };
    if let Some(items) = value.get_mut("items").and_then(|i| i.as_array_mut()) {
        let id_of = |item: &serde_json::Value| item.get("id").and_then(|id| id.as_str()).map(str::to_string);
        items.retain(|item| !matches!(id_of(item).and_then(|id| lagging.get(&id).cloned()), Some(None)));
        for item in items.iter_mut() {
            if let Some(Some(prev)) = id_of(item).and_then(|id| lagging.get(&id).cloned()) {
                *item = prev;
            }
        }
    }
    let mut resp = Response::from_parts(parts, axum::body::Body::from(value.to_string()));
    resp.headers_mut().remove(header::CONTENT_LENGTH);
    resp
}

/// Carry out a fault verdict around the call.
async fn apply(
    verdict: Verdict,
    req: Request,
    next: Next,
    st: &AppState,
    path_id: Option<&str>,
    fault: &mut Option<String>,
) -> Response {
    match verdict {
        Verdict::Pass => next.run(req).await,
        Verdict::Refuse { error, fault: f } => {
            *fault = Some(f);
            error.into_response()
        }
        Verdict::Delay { by, fault: f } => {
            *fault = Some(f);
            tokio::time::sleep(by).await;
            next.run(req).await
        }
        Verdict::Hide { for_, fault: f } => {
            // A change to an existing resource: reads keep seeing the version from before it.
            let previous = match path_id {
                Some(id) => current_json(st, id).await,
                None => None,
            };
            let resp = next.run(req).await;
            if resp.status().is_success()
                && let Some(ResourceId(id)) = resp.extensions().get::<ResourceId>()
            {
                let faults = st.faults();
                match (path_id, previous) {
                    (Some(_), Some(prev)) => faults.lag(id, Some(prev), for_),
                    (Some(_), None) => {}
                    (None, _) => faults.lag(id, None, for_),
                }
                *fault = Some(f);
            }
            resp
        }
        Verdict::ApplyThenFail { error, fault: f } => {
            let resp = next.run(req).await;
            if resp.status().is_success() {
                *fault = Some(f);
                error.into_response()
            } else {
                resp
            }
        }
        Verdict::NoResponse { mode, hang, fault: f } => {
            *fault = Some(f);
            if mode == NoResponseMode::Hang {
                tokio::time::sleep(hang).await;
            }
            // A body that fails makes the server drop the connection: the client gets no complete answer.
            let body = axum::body::Body::from_stream(futures::stream::once(async {
                Err::<axum::body::Bytes, std::io::Error>(std::io::Error::other("fault injection: no response"))
            }));
            let mut resp = Response::new(body);
            resp.extensions_mut().insert(ErrorCode("NoResponse".into()));
            resp
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use fakecloud_api::{AuditQuery, ErrorBody};
    use utoipa_axum::routes;

    use super::*;
    use crate::config::DbLocation;

    const USER: &str = "user-token-0123456789";
    const ADMIN: &str = "admin-token-0123456789";

    /// Stands for a bug in any handler.
    #[utoipa::path(post, path = "/v1/panic", operation_id = "Panic", responses((status = 200)), security(("user" = [])))]
    async fn panics() -> Response {
        panic!("a bug in a handler")
    }

    #[tokio::test]
    async fn a_handler_that_panics_answers_the_envelope_and_is_audited() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&DbLocation::File(dir.path().join("fc.db"))).await.unwrap();
        let tokens = Tokens { user: USER.into(), admin: ADMIN.into() };
        let api = api_routes().routes(routes!(panics));
        let (router, _) = assemble(api, db, Config::default(), tokens).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await });

        let resp = reqwest::Client::new().post(format!("{url}/v1/panic")).bearer_auth(USER).send().await.unwrap();
        assert_eq!(resp.status(), 500);
        let header_id = resp.headers()[REQUEST_ID_HEADER].to_str().unwrap().to_string();
        let body: ErrorBody = resp.json().await.unwrap();
        assert_eq!(
            (body.error.code.as_str(), body.error.request_id.as_str()),
            (codes::INTERNAL_ERROR, header_id.as_str())
        );

        let admin = fakecloud_api::Client::new(&url, ADMIN).unwrap();
        let audit = admin.audit(&AuditQuery { operation: Some("Panic".into()), ..Default::default() }).await.unwrap();
        let entry = &audit.items[0];
        assert_eq!(
            (entry.status, entry.error_code.as_deref(), entry.request_id.as_str()),
            (500, Some(codes::INTERNAL_ERROR), header_id.as_str())
        );
    }
}

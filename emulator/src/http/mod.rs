//! The HTTP API. Each resource module has its handlers and `router()`; this module assembles them, serves the
//! OpenAPI document generated from those handlers, and runs every call through `gatekeeper`: request ID,
//! authentication and role (read from each operation's `security` in the spec), metrics and the audit log.

mod accounts;
mod admin;
mod audit;
mod audit_stream;
mod console;
mod extract;
mod faults;
mod gatekeeper;
mod instances;
mod load_balancers;
mod network;
mod openapi;
mod operations;
mod quotas;
mod reply;
mod state;

/// How the native API shows load balancers (the data plane's listener states and backend health), for the AWS
/// face's DescribeInstanceHealth and DescribeTargetHealth.
pub(crate) use self::load_balancers::{show, shown as shown_load_balancer};
pub use self::state::{AppState, Registry};
// For the other faces of the cloud (`crate::aws`): the bound on a request body, and how a call is recorded.
pub(crate) use self::extract::MAX_BODY_BYTES;
pub(crate) use self::gatekeeper::Recorder;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::header;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use fakecloud_api::codes;
use tower_http::catch_panic::CatchPanicLayer;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;

use self::operations::Operations;
use crate::auth::Tokens;
use crate::config::Config;
use crate::dataplane::DataPlane;
use crate::db::Db;
use crate::db::audit::writer::AuditSink;
use crate::error::{ApiError, Kind};
use crate::faults::FaultEngine;
use crate::metrics::Metrics;

fn api_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .merge(instances::router())
        .merge(network::router())
        .merge(load_balancers::router())
        .merge(quotas::router())
        .merge(audit::router())
        .merge(audit_stream::router())
        .merge(admin::router())
        .merge(faults::router())
        .merge(accounts::router())
}

/// The native API's operation names, sorted (fault rules and rate limits may name these and the other faces':
/// `crate::cloud::operation_names`).
pub fn operation_names() -> Vec<String> {
    Operations::from_spec(&api_routes().split_for_parts().1).names()
}

/// `native` and `faces` operation names, sorted, each once (a face's action may share a native name).
pub fn with_faces(mut native: Vec<String>, faces: &[String]) -> Vec<String> {
    native.extend_from_slice(faces);
    native.sort();
    native.dedup();
    native
}

/// Build the application: the API, `/healthz`, `/metrics` and `/openapi.json`. `accounts`: those its operator
/// manages (the emulator's own cloud's; `None` in an account's cloud). `face_operations`: the other faces'
/// operations (the AWS face's actions), which fault rules and rate limits may name too.
pub async fn app(
    db: Db,
    cfg: Config,
    tokens: Tokens,
    accounts: Option<Arc<dyn Registry>>,
    face_operations: &[String],
) -> Result<(Router, AppState), ApiError> {
    assemble(api_routes(), db, cfg, tokens, accounts, face_operations).await
}

/// The application around `api` (the tests add an operation that panics).
async fn assemble(
    api: OpenApiRouter<AppState>,
    db: Db,
    cfg: Config,
    tokens: Tokens,
    accounts: Option<Arc<dyn Registry>>,
    face_operations: &[String],
) -> Result<(Router, AppState), ApiError> {
    let (router, spec) = api.split_for_parts();
    let operations = Operations::from_spec(&spec);
    let names = with_faces(operations.names(), face_operations);
    let seed = cfg.seed.unwrap_or_else(rand::random);
    tracing::info!(seed, "fault injection seed (pass --seed {seed} to repeat this run's random faults)");
    let faults = Arc::new(FaultEngine::load(db.clone(), seed, names.clone()).await?);
    let mut background = vec![faults.spawn_spot_ticker(cfg.clone())];
    let metrics = Metrics::default();
    let audit = AuditSink::spawn(db.clone(), cfg.audit_max_entries);
    let dataplane = cfg.serve_load_balancers.then(|| {
        let faults = crate::dataplane::Faults::new(faults.clone(), metrics.dataplane.clone(), audit.clone());
        let (dataplane, supervisor) = DataPlane::spawn(db.clone(), cfg.clone(), metrics.dataplane.clone(), faults);
        background.push(supervisor);
        dataplane
    });
    let openapi = serde_json::to_string_pretty(&openapi::document(&spec, &cfg, &names)).unwrap_or_default();
    let state = AppState(Arc::new(state::Inner {
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
        accounts,
    }));
    let router = router
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .route("/metrics", get(serve_metrics))
        .route("/openapi.json", get(serve_openapi))
        .merge(console::router())
        .fallback(|| async { ApiError::not_found(codes::NOT_FOUND, "no such API path; see /openapi.json") })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        // Inside the gatekeeper, so a panicking call still gets its request ID and audit entry.
        .layer(CatchPanicLayer::custom(on_panic))
        .layer(middleware::from_fn_with_state(state.clone(), gatekeeper::gatekeeper))
        .with_state(state.clone());
    Ok((router, state))
}

/// Readiness, apart from `/healthz`'s liveness (as Kubernetes' probes expect): 200 while the store answers
/// within [`READY_WITHIN`], else 503 saying why — a replica whose database is away is not sent calls, and not
/// restarted for it either.
async fn ready(State(st): State<AppState>) -> Response {
    match tokio::time::timeout(READY_WITHIN, st.db.ping()).await {
        Ok(Ok(())) => "ready".into_response(),
        Ok(Err(e)) => {
            ApiError::new(Kind::Unavailable, codes::SERVICE_UNAVAILABLE, format!("the store is unreachable: {e}"))
                .into_response()
        }
        Err(_) => ApiError::new(
            Kind::Unavailable,
            codes::SERVICE_UNAVAILABLE,
            format!("the store is unreachable: no answer within {READY_WITHIN:?}"),
        )
        .into_response(),
    }
}

/// How long `/readyz` waits for the store.
const READY_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use fakecloud_api::{AuditQuery, ErrorBody, REQUEST_ID_HEADER};
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
        let (router, _) = assemble(api, db, Config::default(), tokens, None, &[]).await.unwrap();
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

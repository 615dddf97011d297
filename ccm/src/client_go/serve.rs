//! The secure port (`--secure-port`, 10258): HTTPS with `/healthz` and `/metrics`, as upstream's controller
//! manager serves them. `/healthz` answers on the exact path only (no `/healthz/<check>`, no `/livez` or
//! `/readyz`), takes `?verbose` and `?exclude=<check>`, and withholds failure reasons. Nothing else is served.
//!
//! Upstream also delegates authentication and authorization (a TokenReview/SubjectAccessReview per `/metrics`
//! scrape); this CCM serves `/metrics` to anyone who can reach the port.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::client_go::metrics::Metrics;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr} (--bind-address/--secure-port): {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("--cert-dir {dir}: {reason}")]
    CertDir { dir: PathBuf, reason: String },
    #[error("serving certificate: {0}")]
    Certificate(String),
}

type CheckFn = Box<dyn Fn() -> Result<(), String> + Send + Sync>;

/// The named health checks behind `/healthz`; checks are added as their components start.
#[derive(Clone, Default)]
pub struct Health {
    checks: Arc<RwLock<Vec<(String, CheckFn)>>>,
}

impl Health {
    pub fn add(&self, name: &str, check: impl Fn() -> Result<(), String> + Send + Sync + 'static) {
        self.checks.write().unwrap_or_else(|p| p.into_inner()).push((name.to_string(), Box::new(check)));
    }

    /// A check that passes while the process answers (upstream's `NamedPingChecker` for a started controller).
    pub fn add_ping(&self, name: &str) {
        self.add(name, || Ok(()));
    }

    /// upstream's `handleRootHealth`: status and body for the query's parameters.
    fn answer(&self, params: &[(String, String)]) -> (StatusCode, String) {
        let verbose = params.iter().any(|(k, _)| k == "verbose");
        let mut excluded: BTreeSet<String> =
            params.iter().filter(|(k, _)| k == "exclude").map(|(_, v)| v.clone()).collect();
        let checks = self.checks.read().unwrap_or_else(|p| p.into_inner());
        let ping: [(String, CheckFn); 1] = [("ping".to_string(), Box::new(|| Ok(())))];
        let checks: &[(String, CheckFn)] = if checks.is_empty() { &ping } else { &checks };
        let mut out = String::new();
        let mut failed = Vec::new();
        for (name, check) in checks {
            if excluded.remove(name) {
                let _ = writeln!(out, "[+]{name} excluded: ok");
                continue;
            }
            match check() {
                Ok(()) => {
                    let _ = writeln!(out, "[+]{name} ok");
                }
                Err(reason) => {
                    tracing::warn!(check = %name, %reason, "health check failed");
                    let _ = writeln!(out, "[-]{name} failed: reason withheld");
                    failed.push(name.clone());
                }
            }
        }
        if !excluded.is_empty() {
            let names: Vec<String> = excluded.iter().map(|e| format!("{e:?}")).collect();
            let _ = writeln!(out, "warn: some health checks cannot be excluded: no matches for {}", names.join(","));
        }
        if !failed.is_empty() {
            return (StatusCode::INTERNAL_SERVER_ERROR, format!("{out}healthz check failed\n"));
        }
        if !verbose {
            return (StatusCode::OK, "ok".into());
        }
        (StatusCode::OK, format!("{out}healthz check passed\n"))
    }
}

#[derive(Clone)]
struct AppState {
    health: Health,
    metrics: Arc<Metrics>,
}

/// The routes of the secure port.
pub fn router(health: Health, metrics: Arc<Metrics>) -> axum::Router {
    axum::Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics_text))
        .with_state(AppState { health, metrics })
}

async fn healthz(State(s): State<AppState>, Query(params): Query<Vec<(String, String)>>) -> Response {
    let (status, body) = s.health.answer(&params);
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8"), (header::X_CONTENT_TYPE_OPTIONS, "nosniff")], body)
        .into_response()
}

async fn metrics_text(State(s): State<AppState>) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], s.metrics.render()).into_response()
}

/// The serving certificate: from `--cert-dir` (`cloud-controller-manager.crt`/`.key`, written there self-signed
/// when missing, as upstream's `MaybeDefaultWithSelfSignedCerts`), else self-signed in memory, for `localhost`,
/// `127.0.0.1` and the bind address.
pub fn tls_config(cert_dir: Option<&Path>, bind: IpAddr) -> Result<Arc<ServerConfig>, ServeError> {
    let (cert_pem, key_pem) = match cert_dir {
        Some(dir) => {
            let err = |reason: String| ServeError::CertDir { dir: dir.to_path_buf(), reason };
            let (crt, key) = (dir.join("cloud-controller-manager.crt"), dir.join("cloud-controller-manager.key"));
            if !crt.exists() || !key.exists() {
                let (c, k) = self_signed(bind)?;
                std::fs::create_dir_all(dir).map_err(|e| err(format!("cannot create it: {e}")))?;
                std::fs::write(&crt, c).map_err(|e| err(format!("cannot write {}: {e}", crt.display())))?;
                std::fs::write(&key, k).map_err(|e| err(format!("cannot write {}: {e}", key.display())))?;
            }
            let read = |p: &Path| std::fs::read(p).map_err(|e| err(format!("cannot read {}: {e}", p.display())));
            (read(&crt)?, read(&key)?)
        }
        None => {
            let (c, k) = self_signed(bind)?;
            (c.into_bytes(), k.into_bytes())
        }
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| ServeError::Certificate(format!("bad certificate PEM: {e}")))?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| ServeError::Certificate(format!("bad private key PEM: {e}")))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ServeError::Certificate(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| ServeError::Certificate(e.to_string()))?;
    Ok(Arc::new(config))
}

/// A self-signed certificate and key (PEM), CN `localhost@<unix time>` as upstream names its own.
fn self_signed(bind: IpAddr) -> Result<(String, String), ServeError> {
    let err = |e: rcgen::Error| ServeError::Certificate(e.to_string());
    let mut sans = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    if !bind.is_unspecified() && !bind.is_loopback() {
        sans.push(bind.to_string());
    }
    let mut params = rcgen::CertificateParams::new(sans).map_err(err)?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    params.distinguished_name.push(rcgen::DnType::CommonName, format!("localhost@{}", now.as_secs()));
    let key = rcgen::KeyPair::generate().map_err(err)?;
    let cert = params.self_signed(&key).map_err(err)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Listen now, so a taken port fails the start rather than a background task.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr).await.map_err(|source| ServeError::Bind { addr, source })
}

/// Serve `app` over TLS on `listener` until the process ends; each connection on its own task.
pub async fn serve(listener: TcpListener, tls: Arc<ServerConfig>, app: axum::Router) {
    let acceptor = TlsAcceptor::from(tls);
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(std::time::Duration::from_secs(10), acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => return tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => return tracing::debug!(%peer, "TLS handshake timed out"),
            };
            let service = hyper_util::service::TowerToHyperService::new(app);
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                .await
            {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    async fn get(app: &axum::Router, uri: &str) -> (u16, String) {
        let req = axum::http::Request::get(uri).body(axum::body::Body::empty()).unwrap();
        let res = app.clone().oneshot(req).await.unwrap();
        let status = res.status().as_u16();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn healthz_is_upstreams() {
        let health = Health::default();
        let app = router(health.clone(), Arc::default());
        assert_eq!(get(&app, "/healthz?verbose").await, (200, "[+]ping ok\nhealthz check passed\n".into()));
        let failing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let f = failing.clone();
        health.add("leaderElection", move || {
            if f.load(std::sync::atomic::Ordering::Relaxed) { Err("stuck".into()) } else { Ok(()) }
        });
        health.add_ping("cloud-node-controller");
        assert_eq!(get(&app, "/healthz").await, (200, "ok".into()));
        assert_eq!(
            get(&app, "/healthz?verbose").await,
            (200, "[+]leaderElection ok\n[+]cloud-node-controller ok\nhealthz check passed\n".into())
        );
        failing.store(true, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(
            get(&app, "/healthz").await,
            (
                500,
                "[-]leaderElection failed: reason withheld\n[+]cloud-node-controller ok\nhealthz check failed\n".into()
            )
        );
        assert_eq!(get(&app, "/healthz?exclude=leaderElection&exclude=nope").await, (200, "ok".into()));
        let (_, verbose) = get(&app, "/healthz?verbose&exclude=leaderElection&exclude=nope").await;
        assert!(verbose.contains("[+]leaderElection excluded: ok\n"), "{verbose}");
        assert!(verbose.contains("warn: some health checks cannot be excluded: no matches for \"nope\"\n"));
        // Exact path only.
        for path in ["/healthz/leaderElection", "/livez", "/readyz", "/"] {
            assert_eq!(get(&app, path).await.0, 404, "{path}");
        }
    }

    #[tokio::test]
    async fn metrics_are_served_as_text() {
        let metrics = Arc::new(Metrics::default());
        metrics.api_request("GetInstance", std::time::Duration::from_millis(3), true);
        let (status, body) = get(&router(Health::default(), metrics), "/metrics").await;
        assert_eq!(status, 200);
        assert!(body.contains("cloudprovider_fakecloud_api_request_errors{request=\"GetInstance\"} 1\n"));
    }

    #[test]
    fn cert_dir_gets_a_self_signed_pair_once() {
        let dir = tempfile::tempdir().unwrap();
        let bind: IpAddr = "0.0.0.0".parse().unwrap();
        tls_config(Some(dir.path()), bind).unwrap();
        let crt = std::fs::read(dir.path().join("cloud-controller-manager.crt")).unwrap();
        tls_config(Some(dir.path()), bind).unwrap();
        assert_eq!(std::fs::read(dir.path().join("cloud-controller-manager.crt")).unwrap(), crt, "reused");
        std::fs::write(dir.path().join("cloud-controller-manager.key"), "garbage").unwrap();
        assert!(tls_config(Some(dir.path()), bind).unwrap_err().to_string().contains("private key"));
        assert!(tls_config(None, bind).is_ok());
    }
}

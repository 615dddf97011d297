//! Start the emulator: open the database, apply the schema, start the lifecycle ticker, serve HTTP.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::http::header;
use axum::response::IntoResponse;
use fakecloud_api::codes;
use tokio::net::TcpListener;
use tower::ServiceExt;

use crate::accounts::{self, Accounts, Synced};
use crate::auth::Tokens;
use crate::cloud::{self, Cloud};
use crate::config::{Config, DbLocation};
use crate::db::Db;
use crate::error::{ApiError, Kind};
use crate::http::AppState;

/// A running emulator. Dropping it does not stop it; call [`Server::shutdown`] or let the process end.
pub struct Server {
    pub addr: SocketAddr,
    /// The emulator's own cloud's state.
    pub state: AppState,
    cloud: Cloud,
    pub accounts: Arc<Accounts>,
    janitor: tokio::task::JoinHandle<()>,
    /// The cloud's names over DNS, when served ([`Server::serve_dns`]).
    dns: Option<tokio::task::JoinHandle<()>>,
    shutdown: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Db(#[from] crate::db::OpenError),
    #[error("cannot listen on {addr}: {source} (is another fakecloud running? pick another address with --listen)")]
    Bind { addr: String, source: std::io::Error },
    #[error(transparent)]
    Cloud(#[from] cloud::OpenError),
    #[error(transparent)]
    Accounts(#[from] accounts::OpenError),
    #[error("cannot serve DNS on {addr} (UDP and TCP on one port): {source}")]
    DnsBind { addr: String, source: std::io::Error },
    #[error("cannot use {path} as the snapshot directory: {source}")]
    SnapshotDir { path: String, source: std::io::Error },
}

impl Server {
    /// Open `db` and serve on `listen` (port 0 picks a free port; see `addr`): the emulator's own cloud, and the
    /// accounts created on it.
    pub async fn start(listen: &str, db: &DbLocation, mut cfg: Config, tokens: Tokens) -> Result<Self, StartError> {
        let snapshots = cfg.snapshot_dir.take().unwrap_or_else(|| db.dir());
        cfg.snapshot_dir = Some(snapshot_dir(&snapshots)?);
        let location = db;
        let db = Db::open(location).await?;
        let listener =
            TcpListener::bind(listen).await.map_err(|source| StartError::Bind { addr: listen.to_string(), source })?;
        let addr = listener.local_addr().map_err(|source| StartError::Bind { addr: listen.to_string(), source })?;
        let accounts = Accounts::open(db.clone(), location, &cfg).await?;
        let janitor = accounts.spawn_janitor();
        let limits = cfg.connections.clone();
        let own = tokens.clone();
        let cloud = Cloud::on(db, cfg, tokens, Some(accounts.clone() as Arc<dyn crate::http::Registry>)).await?;
        let state = cloud.state.clone();
        let router = dispatch(accounts.clone(), own, cloud.router.clone());
        // The app's own signal, so that calls still streaming (the audit tail) end with the server.
        let shutdown = state.stopping.clone();
        let rx = shutdown.subscribe();
        let task = tokio::spawn(crate::listener::serve(listener, router, limits, rx));
        Ok(Self { addr, state, cloud, accounts, janitor, dns: None, shutdown, task })
    }

    /// Answer the own cloud's names over DNS on `listen`, UDP and TCP on one port (port 0 picks a free one): see
    /// [`crate::dns`]. The accounts' clouds have no data plane, so their names are not served. Returns the address.
    pub async fn serve_dns(&mut self, listen: &str) -> Result<SocketAddr, StartError> {
        let bind = |source| StartError::DnsBind { addr: listen.to_string(), source };
        let (udp, tcp, addr) = bind_both(listen).await.map_err(bind)?;
        let names = crate::dns::Names::new(self.state.db.clone(), &self.state.cfg.topology.region);
        if let Some(old) = self.dns.replace(tokio::spawn(crate::dns::serve(names, udp, tcp))) {
            old.abort();
        }
        Ok(addr)
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stop accepting, finish in-flight calls, write the audit logs down and close the databases.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.task.await;
        self.janitor.abort();
        if let Some(dns) = &self.dns {
            dns.abort();
        }
        self.accounts.close().await;
        self.cloud.close().await;
    }

    /// Serve until the task ends (it does not, unless the listener fails).
    pub async fn wait(self) -> std::io::Result<()> {
        self.task.await.unwrap_or(Ok(()))
    }

    pub fn shutdown_handle(&self) -> tokio::sync::watch::Sender<bool> {
        self.shutdown.clone()
    }
}

/// A UDP socket and a TCP listener on one port of `listen`. Port 0 is picked by UDP, and the pick may be taken
/// on TCP by another program: then another pick, a few times.
async fn bind_both(listen: &str) -> std::io::Result<(tokio::net::UdpSocket, TcpListener, SocketAddr)> {
    const PICKS: usize = 20;
    let any_port = listen.ends_with(":0");
    let mut picks = 1;
    loop {
        let udp = tokio::net::UdpSocket::bind(listen).await?;
        let addr = udp.local_addr()?;
        match TcpListener::bind(addr).await {
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && any_port && picks < PICKS => picks += 1,
            tcp => return Ok((udp, tcp?, addr)),
        }
    }
}

/// Route each call, before anything else looks at it, to the cloud its token belongs to (or, for an AWS call,
/// whose access key ID its SigV4 header names: routing only, the cloud's AWS face verifies it): an account's, whole
/// (its gatekeeper, audit log, faults), or else the emulator's own (`own`, whose tokens are `own_tokens`), which
/// also answers calls without a valid token. With other emulators on the database, the accounts are first
/// brought up to date ([`Accounts::sync`]; a database that cannot be reached there answers the call 503) — but
/// not for a call without a token (`/healthz`, `/readyz` and the other open paths answer whatever the database
/// does), nor for one with the emulator's own tokens, which no account has (what such a call does with the
/// accounts reads them from the database); and a token that none of the accounts known here has is not refused
/// while they may be out of date: the caller is told to retry (503), never that a valid token is not (401).
fn dispatch(accounts: Arc<Accounts>, own_tokens: Tokens, own: Router) -> Router {
    let own_key_id: Arc<str> = crate::aws::credentials::Keys::access_key_id_of(&own_tokens).into();
    let service = tower::service_fn(move |req: Request| {
        let (accounts, own, own_tokens, own_key_id) =
            (accounts.clone(), own.clone(), own_tokens.clone(), own_key_id.clone());
        async move {
            let authorization = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
            let open_path = matches!(req.uri().path(), "/healthz" | "/readyz");
            let own_call =
                own_tokens.role_of(authorization).is_some() || crate::aws::names_cloud(authorization, &own_key_id);
            if authorization.is_none() || open_path || own_call {
                return own.oneshot(req).await;
            }
            let mut synced = accounts.sync(false).await;
            if matches!(synced, Synced::CatchingUp) && accounts.route(authorization).is_none() {
                synced = accounts.sync(true).await;
            }
            let synced = match synced {
                // Answered at once: each of the call's statements would wait as long to fail.
                Synced::Unreachable(e) => return Ok(e.into_response()),
                Synced::Stale(e) => Err(e),
                Synced::Current | Synced::CatchingUp => Ok(()),
            };
            let cloud = match (accounts.route(authorization), synced) {
                (Some(cloud), _) => cloud,
                // (Not the emulator's own: those were routed above.)
                (None, Err(e)) => {
                    return Ok(ApiError::new(
                        Kind::Unavailable,
                        codes::SERVICE_UNAVAILABLE,
                        format!("cannot tell whose token this is: {}", e.message),
                    )
                    .with_retry_after()
                    .into_response());
                }
                (None, _) => own,
            };
            cloud.oneshot(req).await
        }
    });
    Router::new().fallback_service(service)
}

/// Create the snapshot directory if it is missing (private to this user), and name it canonically.
fn snapshot_dir(dir: &Path) -> Result<PathBuf, StartError> {
    let err = |source| StartError::SnapshotDir { path: dir.display().to_string(), source };
    crate::db::create_private_dir(dir).map_err(err)?;
    std::fs::canonicalize(dir).map_err(err)
}

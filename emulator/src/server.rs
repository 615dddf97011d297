//! Start the emulator: open the database, apply the schema, start the lifecycle ticker, serve HTTP.

use std::net::SocketAddr;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::net::TcpListener;

use crate::auth::Tokens;
use crate::config::{Config, DbLocation};
use crate::db::Db;
use crate::http::{self, AppState};
use crate::store::{self, lifecycle};

/// A running emulator. Dropping it does not stop it; call [`Server::shutdown`] or let the process end.
pub struct Server {
    pub addr: SocketAddr,
    pub state: AppState,
    shutdown: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    ticker: tokio::task::JoinHandle<()>,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Db(#[from] crate::db::OpenError),
    #[error("cannot listen on {addr}: {source} (is another fakecloud running? pick another address with --listen)")]
    Bind { addr: String, source: std::io::Error },
    #[error("cannot prepare the database: {0}")]
    Seed(#[from] crate::error::ApiError),
    #[error("cannot use {path} as the snapshot directory: {source}")]
    SnapshotDir { path: String, source: std::io::Error },
}

impl Server {
    /// Open `db` and serve on `listen` (port 0 picks a free port; see `addr`).
    pub async fn start(listen: &str, db: &DbLocation, mut cfg: Config, tokens: Tokens) -> Result<Self, StartError> {
        let snapshots = cfg.snapshot_dir.take().unwrap_or_else(|| db.dir());
        cfg.snapshot_dir = Some(snapshot_dir(&snapshots)?);
        let db = Db::open(db).await?;
        let mut tx = db.write().await.map_err(crate::error::ApiError::from)?;
        store::routes::ensure_main_table(&mut tx).await?;
        store::routes::canonicalize_destinations(&mut tx).await?;
        tx.commit().await.map_err(crate::error::ApiError::from)?;
        let listener =
            TcpListener::bind(listen).await.map_err(|source| StartError::Bind { addr: listen.to_string(), source })?;
        let addr = listener.local_addr().map_err(|source| StartError::Bind { addr: listen.to_string(), source })?;
        let ticker = lifecycle::spawn_ticker(db.clone(), cfg.timings.terminated_retention, Duration::from_millis(250));
        let limits = cfg.connections.clone();
        let (router, state) = http::app(db, cfg, tokens).await?;
        // The app's own signal, so that calls still streaming (the audit tail) end with the server.
        let shutdown = state.stopping.clone();
        let rx = shutdown.subscribe();
        let task = tokio::spawn(crate::listener::serve(listener, router, limits, rx));
        Ok(Self { addr, state, shutdown, task, ticker })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stop accepting, finish in-flight calls, write the audit log down and close the database.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.task.await;
        self.ticker.abort();
        self.state.stop_background();
        self.state.audit.flush().await;
        self.state.db.close().await;
    }

    /// Serve until the task ends (it does not, unless the listener fails).
    pub async fn wait(self) -> std::io::Result<()> {
        self.task.await.unwrap_or(Ok(()))
    }

    pub fn shutdown_handle(&self) -> tokio::sync::watch::Sender<bool> {
        self.shutdown.clone()
    }
}

/// Create the snapshot directory if it is missing (private to this user), and name it canonically.
fn snapshot_dir(dir: &Path) -> Result<PathBuf, StartError> {
    let err = |source| StartError::SnapshotDir { path: dir.display().to_string(), source };
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(err)?;
    std::fs::canonicalize(dir).map_err(err)
}

//! What every handler is given: the database, the configuration, the tokens, metrics, the audit log, the fault
//! engine and the data plane — made once, when the application is assembled (`super::app`).

use std::ops::Deref;
use std::sync::Arc;

use fakecloud_api::{Account, CreatedAccount, LeaseRequest, LeasedAccount, RenewLeaseRequest};
use futures::future::BoxFuture;

use super::operations::Operations;
use crate::auth::Tokens;
use crate::config::Config;
use crate::dataplane::DataPlane;
use crate::db::Db;
use crate::db::audit::writer::AuditSink;
use crate::error::Result;
use crate::faults::FaultEngine;
use crate::metrics::Metrics;

/// What the accounts' handlers need of the accounts, which are clouds above this layer (`crate::accounts`).
pub trait Registry: Send + Sync + std::fmt::Debug {
    fn list(&self) -> BoxFuture<'_, Result<Vec<Account>>>;
    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Account>>;
    fn create<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<CreatedAccount>>;
    fn delete<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Account>>;
    fn take<'a>(&'a self, req: &'a LeaseRequest) -> BoxFuture<'a, Result<LeasedAccount>>;
    fn renew<'a>(&'a self, id: &'a str, req: &'a RenewLeaseRequest) -> BoxFuture<'a, Result<Account>>;
    fn release<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Account>>;
}

/// Everything a handler needs.
#[derive(Clone, Debug)]
pub struct AppState(pub(super) Arc<Inner>);

#[derive(Debug)]
pub struct Inner {
    pub db: Db,
    pub cfg: Config,
    pub tokens: Tokens,
    pub metrics: Metrics,
    pub audit: AuditSink,
    pub(super) faults: Arc<FaultEngine>,
    /// The load balancer data plane, when the emulator serves it (`serve --serve-load-balancers`).
    pub dataplane: Option<DataPlane>,
    /// Tasks that live as long as the app (random spot reclamation, the data plane); stopped by
    /// `stop_background`.
    pub(super) background: Vec<tokio::task::JoinHandle<()>>,
    pub(super) operations: Operations,
    pub(super) openapi: String,
    /// Turns true when the server shuts down: open calls that would run on (audit streams) end then.
    pub stopping: tokio::sync::watch::Sender<bool>,
    /// The audit streams the admin token may have open (only it may stream).
    pub(super) audit_streams: Arc<tokio::sync::Semaphore>,
    /// The accounts its operator manages: the emulator's own cloud only (`None` in an account's).
    pub(super) accounts: Option<Arc<dyn Registry>>,
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

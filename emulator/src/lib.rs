//! fakecloud's emulator: a cloud API (instances, networks and route tables, load balancers, quotas, an audit
//! log) served over HTTP from a SQLite file.
//!
//! - [`config`]: what the cloud looks like (region, zones, pools) and how fast it moves.
//! - [`addresses`]: which addresses a machine may have (and so the data plane may forward to).
//! - [`store`]: the SQL, one module per resource; quotas and idempotency are enforced there.
//! - [`http`]: handlers per resource, auth, audit and metrics.
//! - [`dataplane`]: the load balancers' listeners, proxy and health checks (`serve --serve-load-balancers`).
//! - [`server`]: start it all (used by `fakecloud serve` and by tests).

pub mod addresses;
pub mod cli;
pub mod config;
pub mod credentials;
pub mod dataplane;
pub mod db;
pub mod error;
pub mod faults;
pub mod http;
pub mod listener;
pub mod server;
pub mod snapshot;
pub mod store;
pub mod validate;

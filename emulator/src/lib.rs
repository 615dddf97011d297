//! fakecloud's emulator: a cloud API (instances, networks and route tables, load balancers, quotas, an audit
//! log) served over HTTP from a SQLite file.
//!
//! - [`config`]: what the cloud looks like (region, zones, pools) and how fast it moves.
//! - [`addresses`]: which addresses a machine may have (and so the data plane may forward to).
//! - [`store`]: the SQL, one module per resource; quotas and idempotency are enforced there.
//! - [`http`]: handlers per resource, and the gatekeeper every call goes through (authentication, audit).
//! - [`aws`]: the AWS face (EC2's Query protocol, SigV4) beside `http`, on the same store.
//! - [`auth`]: the tokens and the roles they grant; [`metrics`]: what `/metrics` shows (the API's calls and the
//!   data plane's connections).
//! - [`dataplane`]: the load balancers' listeners, proxy and health checks (`serve --serve-load-balancers`).
//! - [`cloud`]: one cloud (database, API, lifecycle); [`accounts`]: clouds of their own for accounts, routed to by
//!   their tokens.
//! - [`server`]: start it all (used by tests); [`serve`]: the `fakecloud serve` command (its flags, logging).

pub mod accounts;
pub mod addresses;
pub mod auth;
pub mod aws;
pub mod call;
pub mod cloud;
pub mod config;
pub mod credentials;
pub mod dataplane;
pub mod db;
pub mod dns;
pub mod error;
pub mod faults;
pub mod http;
pub mod listener;
pub mod metrics;
pub mod serve;
pub mod server;
pub mod snapshot;
pub mod store;
pub mod validate;

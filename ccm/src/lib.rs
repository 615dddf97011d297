//! fakecloud-ccm: a cloud-controller-manager that speaks to the fakecloud emulator and behaves like the
//! upstream `k8s.io/cloud-provider` controllers (see `docs/upstream-ccm.md` for the behaviour it copies).
//!
//! - [`cloud`]: the one [`cloud::Cloud`] trait the controllers use, and its emulator implementation.
//! - [`controllers`]: one module per controller (`node`, `node_lifecycle`, `service`, `route`), plus the
//!   `--controllers` names.
//! - [`nodes`]: the label, address and taint rules the node controllers share.
//! - [`config`]: flags and the cloud-config file.
//! - [`client_go`]: what client-go and the controller-manager framework give upstream's controllers — the event
//!   recorder, the shared informer, the API client, leader election, rate limiters, `/healthz` and `/metrics`.

pub mod client_go;
pub mod cloud;
pub mod config;
pub mod controllers;
pub mod nodes;

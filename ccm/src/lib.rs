//! fakecloud-ccm: a cloud-controller-manager that speaks to the fakecloud emulator and behaves like the
//! upstream `k8s.io/cloud-provider` controllers (see `docs/upstream-ccm.md` for the behaviour it copies).
//!
//! - [`cloud`]: the one [`cloud::Cloud`] trait the controllers use, and its emulator implementation.
//! - [`controllers`]: one module per controller (`node`, `node_lifecycle`, `service`, `route`), plus the
//!   `--controllers` names.
//! - [`config`]: flags and the cloud-config file.
//! - [`leader`]: leader election on a Lease; [`serve`]: `/healthz` and `/metrics` over HTTPS; [`metrics`].
//! - [`events`], [`informer`], [`kube_client`], [`ratelimit`]: client-go's event recorder, shared informer,
//!   client and rate limiters; [`nodes`]: the label, address and taint rules.

pub mod cloud;
pub mod config;
pub mod controllers;
pub mod events;
pub mod informer;
pub mod kube_client;
pub mod leader;
pub mod metrics;
pub mod nodes;
pub mod ratelimit;
pub mod serve;

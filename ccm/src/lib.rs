//! fakecloud-ccm: a cloud-controller-manager that speaks to the fakecloud emulator and behaves like the
//! upstream `k8s.io/cloud-provider` controllers (see `shared/docs/ccm-semantics.md` for the behaviour it copies).
//!
//! - [`cloud`]: the one [`cloud::Cloud`] trait the controllers use, and its emulator implementation.
//! - [`controllers`]: one module per controller (`node`, `node_lifecycle`), plus the `--controllers` names.
//! - [`config`]: flags and the cloud-config file.

pub mod cloud;
pub mod config;
pub mod controllers;
pub mod nodes;

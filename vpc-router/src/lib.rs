//! fakecloud-vpc-router: a kind cluster's pod network, built the way a cloud with kubenet-style
//! routing builds it. It runs on every node (a hostNetwork DaemonSet) and does two jobs:
//!
//! - [`cni`]: writes the node's CNI config (bridge + host-local + portmap) from the Node's
//!   `spec.podCIDRs`, as the kubelet's kubenet did;
//! - [`router`]: follows the emulator's route table and programs each other node's pod CIDR on the host
//!   as `dest via <that node's private IP>` through netlink ([`netlink`]). The plan is the pure
//!   function in [`routes`], and it touches only routes marked with [`routes::ROUTE_PROTOCOL`].
//!
//! The cloud's table is the VPC's routing. A node whose route is missing there (the route quota, a
//! route the CCM has not made yet) cannot be reached at its pods.

pub mod cni;
pub mod config;
mod error;
pub mod netlink;
pub mod node;
pub mod router;
pub mod routes;

pub use error::Error;

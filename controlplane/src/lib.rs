//! A real Kubernetes control plane on loopback for fakecloud's tests and `make up`.
//!
//! Upstream etcd, kube-apiserver and kube-controller-manager (built by
//! `scripts/build-control-plane.sh` from the modules pinned in `upstream/go.mod`) run as
//! processes on 127.0.0.1 in a fresh run directory, with generated certificates. The
//! controller manager is configured as beside an external cloud controller manager.
//!
//! ```no_run
//! # async fn demo() -> fakecloud_controlplane::Result<()> {
//! let cp = fakecloud_controlplane::ControlPlane::builder()
//!     .node_monitor_grace_period(std::time::Duration::from_secs(10))
//!     .start()
//!     .await?;
//! let nodes = kube::Api::<k8s_openapi::api::core::v1::Node>::all(cp.client());
//! # Ok(()) }
//! ```

pub mod aws_cloud_config;
pub mod aws_cluster;
pub mod binaries;
pub mod composition;
pub mod error;
pub mod files;
pub mod kubeconfig;
pub mod kubelets;
pub mod launcher;
pub mod names;
pub mod pki;
pub mod ports;
pub mod process;

pub use binaries::{
    Binaries, Kwok, default_bin_dir, kwok, kwok_at, kwok_for_tests, pinned_etcd_version, pinned_kubernetes_version,
    pinned_kwok_version,
};
pub use error::{Error, Result};
pub use launcher::{
    CLUSTER_CIDR, ControlPlane, ControlPlaneBuilder, NODE_CIDR_MASK_SIZE, SERVICE_CLUSTER_IP_RANGE, SMALLEST_NODE_CIDR,
    down, max_nodes, node_cidr_mask_size,
};

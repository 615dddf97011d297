//! The cloud behind one interface, as upstream's `cloudprovider.Interface`: the controllers are generic over
//! [`Cloud`], and [`fakecloud::FakeCloud`] is the implementation that talks to the emulator.

pub mod fakecloud;

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeAddress};

/// What the cloud knows about a node's machine (upstream `InstanceMetadata`).
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceMetadata {
    pub provider_id: String,
    pub instance_type: String,
    pub zone: String,
    pub region: String,
    pub addresses: Vec<NodeAddress>,
}

/// Cloud errors, classified so each loop can react right.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CloudError {
    /// The instance (or other resource) does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// The cloud throttled or is unavailable, and said when to come back.
    #[error("retry after {after:?}: {message}")]
    RetryAfter { after: Duration, message: String },
    /// A quota stops the call; the message names it.
    #[error("quota exceeded ({code}): {message}")]
    QuotaExceeded { code: String, message: String },
    /// The request is wrong and retrying it unchanged will not help.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// Anything else: worth retrying with backoff.
    #[error("{0}")]
    Transient(String),
}

/// The instance calls of upstream's `InstancesV2`. Load balancers and routes join with the service and route
/// controllers.
pub trait Cloud: Send + Sync + 'static {
    /// Whether the node's instance exists (a terminated instance does not).
    fn instance_exists(&self, node: &Node) -> impl Future<Output = Result<bool, CloudError>> + Send;
    /// Whether the node's instance is shut down (stopped or stopping).
    fn instance_shutdown(&self, node: &Node) -> impl Future<Output = Result<bool, CloudError>> + Send;
    /// The node's metadata, in one cloud call.
    fn instance_metadata(&self, node: &Node) -> impl Future<Output = Result<InstanceMetadata, CloudError>> + Send;
}

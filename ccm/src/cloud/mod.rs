//! The cloud behind one interface, as upstream's `cloudprovider.Interface`: the controllers are generic over
//! [`Cloud`], and [`fakecloud::FakeCloud`] is the implementation that talks to the emulator. The controllers' unit
//! tests use `in_memory::InMemoryCloud`, which records every call.

pub mod fakecloud;
#[cfg(test)]
pub mod in_memory;
pub mod load_balancer;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

pub use k8s_openapi::api::core::v1::LoadBalancerStatus;
use k8s_openapi::api::core::v1::{Node, NodeAddress, Service};

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

/// A route in the cloud: traffic for `destination` goes to the instance `target_instance`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudRoute {
    /// The cloud's ID for the route (what deleting it needs).
    pub id: String,
    pub name: String,
    /// The instance's ID, as in the providerID of its node.
    pub target_instance: String,
    /// As the cloud stores it: compared textually (docs/upstream-ccm.md, trap 16).
    pub destination: String,
}

/// The calls of upstream's `InstancesV2`, `Routes` and `LoadBalancer`.
pub trait Cloud: Send + Sync + 'static {
    /// Whether the node's instance exists (a terminated instance does not).
    fn instance_exists(&self, node: &Node) -> impl Future<Output = Result<bool, CloudError>> + Send;
    /// Whether the node's instance is shut down (stopped or stopping).
    fn instance_shutdown(&self, node: &Node) -> impl Future<Output = Result<bool, CloudError>> + Send;
    /// The node's metadata, in one cloud call.
    fn instance_metadata(&self, node: &Node) -> impl Future<Output = Result<InstanceMetadata, CloudError>> + Send;
    /// The cloud's instance ID in a node's providerID (what a route targets), if it is one of this cloud's.
    fn instance_id<'p>(&self, provider_id: &'p str) -> Option<&'p str>;
    /// This cluster's routes, in one call.
    fn list_routes(&self, cluster: &str) -> impl Future<Output = Result<Vec<CloudRoute>, CloudError>> + Send;
    /// Route `destination` to `node`'s instance; `name_hint` is the node's UID.
    fn create_route(
        &self,
        cluster: &str,
        name_hint: &str,
        node: &Node,
        destination: &str,
    ) -> impl Future<Output = Result<(), CloudError>> + Send;
    fn delete_route(&self, route: &CloudRoute) -> impl Future<Output = Result<(), CloudError>> + Send;

    /// The Service's load balancer status, `None` when it has none (or only one being deleted).
    fn get_load_balancer(
        &self,
        cluster: &str,
        svc: &Service,
    ) -> impl Future<Output = Result<Option<LoadBalancerStatus>, CloudError>> + Send;
    /// Create or update the Service's load balancer with these nodes as backends; its status once it serves.
    /// While it is being provisioned: [`CloudError::RetryAfter`].
    fn ensure_load_balancer(
        &self,
        cluster: &str,
        svc: &Service,
        nodes: &[Arc<Node>],
    ) -> impl Future<Output = Result<LoadBalancerStatus, CloudError>> + Send;
    /// Set the backends of the Service's existing load balancer to these nodes.
    fn update_load_balancer(
        &self,
        cluster: &str,
        svc: &Service,
        nodes: &[Arc<Node>],
    ) -> impl Future<Output = Result<(), CloudError>> + Send;
    /// Delete the Service's load balancer; done when there is none. Idempotent.
    fn ensure_load_balancer_deleted(
        &self,
        cluster: &str,
        svc: &Service,
    ) -> impl Future<Output = Result<(), CloudError>> + Send;
}

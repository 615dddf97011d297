//! [`Cloud`] on the fakecloud emulator, through the one typed client.

use fakecloud_api::{Client, ClientError, Instance, InstanceState, ListInstancesQuery};
use k8s_openapi::api::core::v1::{Node, NodeAddress};

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use super::{Cloud, CloudError, InstanceMetadata};
use crate::metrics::Metrics;

pub const PROVIDER_NAME: &str = "fakecloud";

#[derive(Clone)]
pub struct FakeCloud {
    client: Client,
    metrics: Option<Arc<Metrics>>,
}

impl FakeCloud {
    pub fn new(client: Client) -> Self {
        Self { client, metrics: None }
    }

    /// Count every API call in `cloudprovider_fakecloud_api_request_{duration_seconds,errors}{request}`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// One API call (`request` is the emulator's operation name), measured and classified.
    async fn call<T>(
        &self,
        request: &'static str,
        call: impl Future<Output = Result<T, ClientError>>,
    ) -> Result<T, CloudError> {
        let start = Instant::now();
        let result = call.await;
        if let Some(m) = &self.metrics {
            m.api_request(request, start.elapsed(), result.is_err());
        }
        result.map_err(classify)
    }

    /// The instance behind a node: by the ID in its providerID, or (before one is set) by its name. One call.
    async fn lookup(&self, node: &Node) -> Result<Instance, CloudError> {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        match node.spec.as_ref().and_then(|s| s.provider_id.as_deref()).filter(|p| !p.is_empty()) {
            Some(pid) => {
                let id = parse_provider_id(pid).ok_or_else(|| {
                    CloudError::Invalid(format!("node {name}: providerID {pid:?} is not fakecloud://<zone>/<id>"))
                })?;
                self.call("GetInstance", self.client.get_instance(id)).await
            }
            None => {
                let q = ListInstancesQuery { name: Some(name.to_string()), ..Default::default() };
                let found = self.call("ListInstances", self.client.list_instances(&q)).await?;
                found
                    .items
                    .into_iter()
                    .rev()
                    .find(|i| i.state != InstanceState::Terminated)
                    .ok_or_else(|| CloudError::NotFound(format!("instance not found for node {name}")))
            }
        }
    }
}

/// `fakecloud://<zone>/<id>` → `<id>`.
pub fn parse_provider_id(pid: &str) -> Option<&str> {
    let rest = pid.strip_prefix("fakecloud://")?;
    let (_zone, id) = rest.split_once('/')?;
    (!id.is_empty() && !id.contains('/')).then_some(id)
}

/// Map an API error to what a controller does about it.
pub fn classify(e: ClientError) -> CloudError {
    match (&e, e.status()) {
        (_, Some(404)) => CloudError::NotFound(e.to_string()),
        (_, Some(429 | 503)) if e.retry_after().is_some() => {
            CloudError::RetryAfter { after: e.retry_after().unwrap_or_default(), message: e.to_string() }
        }
        (ClientError::Api(api), Some(422)) => {
            CloudError::QuotaExceeded { code: api.code.clone(), message: api.message.clone() }
        }
        (_, Some(s)) if (400..500).contains(&s) && s != 429 => CloudError::Invalid(e.to_string()),
        _ => CloudError::Transient(e.to_string()),
    }
}

impl Cloud for FakeCloud {
    async fn instance_exists(&self, node: &Node) -> Result<bool, CloudError> {
        match self.lookup(node).await {
            Ok(i) => Ok(i.state != InstanceState::Terminated),
            Err(CloudError::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn instance_shutdown(&self, node: &Node) -> Result<bool, CloudError> {
        let i = self.lookup(node).await?;
        Ok(matches!(i.state, InstanceState::Stopped | InstanceState::Stopping))
    }

    async fn instance_metadata(&self, node: &Node) -> Result<InstanceMetadata, CloudError> {
        let i = self.lookup(node).await?;
        Ok(InstanceMetadata {
            provider_id: i.provider_id,
            instance_type: i.instance_type,
            zone: i.zone,
            region: i.region,
            addresses: vec![
                NodeAddress { type_: "InternalIP".into(), address: i.private_ip.to_string() },
                NodeAddress { type_: "Hostname".into(), address: i.name },
            ],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids_are_parsed_strictly() {
        assert_eq!(parse_provider_id("fakecloud://local-1a/i-0123"), Some("i-0123"));
        assert_eq!(parse_provider_id("aws:///us-east-1a/i-0123"), None);
        assert_eq!(parse_provider_id("fakecloud://local-1a/"), None);
        assert_eq!(parse_provider_id("fakecloud://local-1a/a/b"), None);
    }
}

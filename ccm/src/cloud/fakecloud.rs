//! [`Cloud`] on the fakecloud emulator, through the one typed client.

use fakecloud_api::{Client, ClientError, Instance, InstanceState, ListInstancesQuery};
use k8s_openapi::api::core::v1::{Node, NodeAddress};

use super::{Cloud, CloudError, InstanceMetadata};

pub const PROVIDER_NAME: &str = "fakecloud";

#[derive(Debug, Clone)]
pub struct FakeCloud {
    client: Client,
}

impl FakeCloud {
    pub fn new(client: Client) -> Self {
        Self { client }
    }

    /// The instance behind a node: by the ID in its providerID, or (before one is set) by its name. One call.
    async fn lookup(&self, node: &Node) -> Result<Instance, CloudError> {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        match node.spec.as_ref().and_then(|s| s.provider_id.as_deref()) {
            Some(pid) => {
                let id = parse_provider_id(pid).ok_or_else(|| {
                    CloudError::Invalid(format!("node {name}: providerID {pid:?} is not fakecloud://<zone>/<id>"))
                })?;
                self.client.get_instance(id).await.map_err(classify)
            }
            None => {
                let q = ListInstancesQuery { name: Some(name.to_string()), ..Default::default() };
                let found = self.client.list_instances(&q).await.map_err(classify)?;
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

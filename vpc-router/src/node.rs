//! This node as the Kubernetes API describes it: its pod CIDRs (for the CNI config), its InternalIPs
//! and providerID (to find its instance in the cloud). One watch of the one Node, by field selector.

use std::net::IpAddr;

use futures::StreamExt;
use ipnet::IpNet;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

/// What the router needs of its Node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeInfo {
    pub name: String,
    /// `spec.podCIDRs` (or the older `spec.podCIDR`), in the Node's order. Empty until the controller
    /// manager allocates them.
    pub pod_cidrs: Vec<IpNet>,
    /// The `InternalIP` addresses in `status.addresses`.
    pub internal_ips: Vec<IpAddr>,
    /// `spec.providerID`, once a CCM has set it.
    pub provider_id: Option<String>,
}

impl NodeInfo {
    /// Values that do not parse are left out with a warning: a bad one must not hide the good ones.
    pub fn from_node(node: &Node) -> Self {
        let name = node.metadata.name.clone().unwrap_or_default();
        let spec = node.spec.as_ref();
        let mut cidrs = spec.and_then(|s| s.pod_cidrs.clone()).unwrap_or_default();
        if cidrs.is_empty()
            && let Some(c) = spec.and_then(|s| s.pod_cidr.clone())
        {
            cidrs.push(c);
        }
        let pod_cidrs = cidrs
            .iter()
            .filter_map(|c| match c.parse::<IpNet>() {
                Ok(n) => Some(n.trunc()),
                Err(e) => {
                    tracing::warn!(node = %name, cidr = %c, error = %e, "ignoring a pod CIDR that does not parse");
                    None
                }
            })
            .collect();
        let internal_ips = node
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .into_iter()
            .flatten()
            .filter(|a| a.type_ == "InternalIP")
            .filter_map(|a| a.address.parse().ok())
            .collect();
        let provider_id = spec.and_then(|s| s.provider_id.clone()).filter(|p| !p.is_empty());
        Self { name, pod_cidrs, internal_ips, provider_id }
    }
}

/// Watch the Node named `name` and publish what the router needs of it whenever that changes. It
/// runs until the receivers are gone. Watch errors are retried with kube's default backoff. The last
/// known state stays published meanwhile.
pub async fn watch_node(client: kube::Client, name: String, tx: watch::Sender<Option<NodeInfo>>) {
    let api = Api::<Node>::all(client);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut nodes = watcher(api, config).default_backoff().applied_objects().boxed();
    while let Some(item) = nodes.next().await {
        match item {
            Ok(node) => {
                let info = NodeInfo::from_node(&node);
                tx.send_if_modified(|cur| {
                    if cur.as_ref() == Some(&info) {
                        return false;
                    }
                    tracing::info!(node = %info.name, pod_cidrs = ?info.pod_cidrs, internal_ips = ?info.internal_ips,
                        provider_id = info.provider_id.as_deref().unwrap_or(""), "node seen");
                    *cur = Some(info);
                    true
                });
            }
            Err(e) => tracing::warn!(node = %name, error = %e, "watching the node failed; retrying"),
        }
        if tx.is_closed() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(v: serde_json::Value) -> Node {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn dual_stack_node() {
        let n = node(serde_json::json!({
            "metadata": {"name": "kind-worker"},
            "spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24", "fd00:10:244:1::/64"],
                     "providerID": "fakecloud://local-1a/i-0abc"},
            "status": {"addresses": [
                {"type": "InternalIP", "address": "172.18.0.3"},
                {"type": "InternalIP", "address": "fc00:f853:ccd:e793::3"},
                {"type": "Hostname", "address": "kind-worker"}
            ]}
        }));
        let info = NodeInfo::from_node(&n);
        assert_eq!(info.name, "kind-worker");
        assert_eq!(info.pod_cidrs, ["10.244.1.0/24".parse::<IpNet>().unwrap(), "fd00:10:244:1::/64".parse().unwrap()]);
        assert_eq!(
            info.internal_ips,
            ["172.18.0.3".parse::<IpAddr>().unwrap(), "fc00:f853:ccd:e793::3".parse().unwrap()]
        );
        assert_eq!(info.provider_id.as_deref(), Some("fakecloud://local-1a/i-0abc"));
    }

    #[test]
    fn a_new_node_has_no_cidrs_and_no_provider_id_yet() {
        let info = NodeInfo::from_node(&node(serde_json::json!({
            "metadata": {"name": "kind-worker2"},
            "spec": {"providerID": ""},
            "status": {"addresses": [{"type": "InternalIP", "address": "172.18.0.4"}]}
        })));
        assert!(info.pod_cidrs.is_empty());
        assert_eq!(info.provider_id, None);
        // The older single field still counts, and a bad value does not hide the rest.
        let info = NodeInfo::from_node(&node(serde_json::json!({
            "metadata": {"name": "old"}, "spec": {"podCIDR": "10.244.7.0/24"}
        })));
        assert_eq!(info.pod_cidrs, ["10.244.7.0/24".parse::<IpNet>().unwrap()]);
        let info = NodeInfo::from_node(&node(serde_json::json!({
            "metadata": {"name": "bad"}, "spec": {"podCIDRs": ["nope", "10.244.8.0/24"]}
        })));
        assert_eq!(info.pod_cidrs, ["10.244.8.0/24".parse::<IpNet>().unwrap()]);
    }
}

//! `fakecloud adopt`: make an existing cluster's machines (kind nodes, say) cloud instances, so a CCM talking
//! to the emulator finds an instance behind every Node.
//!
//! The logic lives here rather than in the `fakecloud-controlplane` crate: the `fakecloud` binary would
//! otherwise link the launcher's dependencies, and that crate's tests already depend on this one.

use std::collections::{BTreeMap, HashSet};
use std::net::{IpAddr, Ipv6Addr};
use std::path::Path;

use anyhow::{Context, Result, bail};
use fakecloud_api::{Client, CreateInstanceRequest, InstanceState, ListInstancesQuery};
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;

/// The label a kind (or any) node may carry naming its zone.
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// Where a kubelet with `--node-ip` and an external cloud provider records its address before a CCM sets
/// `status.addresses`.
const PROVIDED_NODE_IP: &str = "alpha.kubernetes.io/provided-node-ip";
/// The tag every adopted instance carries.
pub const ADOPTED_TAG: &str = "fakecloud.io/adopted";

/// What happened to one Node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Adopted {
        instance_id: String,
        /// The instance's addresses, comma-separated: the private IP, then a dual-stack node's IPv6 address.
        addresses: String,
        zone: String,
    },
    /// A live instance of its name exists already.
    AlreadyAnInstance,
    /// No InternalIP (nor provided-node-ip annotation) to adopt it with.
    NoAddress,
    /// An earlier run adopted it and that instance has since been terminated: a machine that is gone is not
    /// brought back (the CCM deletes such a Node; if its kubelet registers it again, the new Node is adopted).
    InstanceGone { instance_id: String },
    /// The emulator refused (quota, an address it does not take, ...): the message says why.
    Failed(String),
}

pub async fn kube_client(kubeconfig: Option<&Path>) -> Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?
        }
        None => kube::Config::infer().await.context("no --kubeconfig, no KUBECONFIG and not in a cluster")?,
    };
    Ok(kube::Client::try_from(config)?)
}

/// `fakecloud adopt`: adopt, print a line per Node, and fail if the emulator refused any.
pub async fn run(kubeconfig: Option<&Path>, cloud: &Client) -> Result<()> {
    let kube = kube_client(kubeconfig).await?;
    let done = adopt(kube, cloud).await?;
    if done.is_empty() {
        println!("the cluster has no Nodes; nothing to adopt");
    }
    let mut failed = 0;
    for (node, outcome) in &done {
        match outcome {
            Outcome::Adopted { instance_id, addresses, zone } => {
                println!("{node}: adopted as {instance_id} ({addresses}, {zone})")
            }
            Outcome::AlreadyAnInstance => println!("{node}: already an instance"),
            Outcome::NoAddress => println!("{node}: skipped, it has no InternalIP"),
            Outcome::InstanceGone { instance_id } => {
                println!("{node}: skipped, adopted earlier as {instance_id}, which has been terminated")
            }
            Outcome::Failed(why) => {
                failed += 1;
                println!("{node}: not adopted: {why}");
            }
        }
    }
    if failed > 0 {
        bail!("{failed} of {} Nodes could not be adopted (see above); fix that and run adopt again", done.len());
    }
    Ok(())
}

/// Adopt every Node that has no live instance of its name: an instance with the Node's name, its InternalIP
/// (IPv4 preferred on dual-stack nodes; outside the VPC, in a network the emulator adopts from) and a zone — the Node's zone label
/// if the emulator has that zone, else round-robin over the region's zones in the order of the Nodes' names.
/// Safe to run again: the idempotency key comes from the Node's UID, and Nodes with instances are skipped.
pub async fn adopt(kube: kube::Client, cloud: &Client) -> Result<BTreeMap<String, Outcome>> {
    let zones: Vec<String> = cloud.region().await?.zones.into_iter().map(|z| z.name).collect();
    if zones.is_empty() {
        bail!("the emulator's region has no zones");
    }
    let live: HashSet<String> = cloud
        .list_all_instances(&ListInstancesQuery { page_size: Some(1000), ..Default::default() })
        .await?
        .into_iter()
        .filter(|i| i.state != InstanceState::Terminated)
        .map(|i| i.name)
        .collect();
    let mut nodes = Api::<Node>::all(kube).list(&Default::default()).await.context("listing Nodes")?.items;
    nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut out = BTreeMap::new();
    // The index among all Nodes (not only those adopted now) keeps a Node's zone, and so its request, the same
    // on a rerun; the idempotency key would refuse a changed request.
    for (n, node) in nodes.iter().enumerate() {
        let Some(name) = node.metadata.name.clone() else { continue };
        if live.contains(&name) {
            out.insert(name, Outcome::AlreadyAnInstance);
            continue;
        }
        let Some((ip, ipv6_address)) = node_ips(node) else {
            out.insert(name, Outcome::NoAddress);
            continue;
        };
        let labelled = node.metadata.labels.as_ref().and_then(|l| l.get(ZONE_LABEL)).filter(|z| zones.contains(z));
        let zone = labelled.cloned().unwrap_or_else(|| zones[n % zones.len()].clone());
        let req = CreateInstanceRequest {
            name: name.clone(),
            zone: Some(zone.clone()),
            private_ip: Some(ip),
            ipv6_address,
            tags: [(ADOPTED_TAG.to_string(), "true".to_string())].into(),
            ..Default::default()
        };
        let key = format!("adopt-{}", node.metadata.uid.as_deref().unwrap_or(&name));
        let outcome = match cloud.create_instance(&req, Some(&key)).await {
            // A replay of an earlier adoption whose instance is gone since.
            Ok(inst) if inst.state == InstanceState::Terminated => Outcome::InstanceGone { instance_id: inst.id },
            Ok(inst) => {
                let addresses = inst.addresses().map(|a| a.to_string()).collect::<Vec<_>>().join(", ");
                Outcome::Adopted { instance_id: inst.id, addresses, zone }
            }
            Err(e @ fakecloud_api::ClientError::Api(_)) => Outcome::Failed(e.to_string()),
            // Not the emulator refusing one Node but the emulator unreachable: stop.
            Err(e) => return Err(e).with_context(|| format!("adopting node {name}")),
        };
        out.insert(name, outcome);
    }
    Ok(out)
}

/// The addresses to adopt a Node with, from its InternalIPs (set by the kubelet or a CCM), else from the
/// address its kubelet was given (`provided-node-ip`, comma-separated on dual-stack): the private IP is the
/// first IPv4 one, else the first IPv6 one; a dual-stack Node's first IPv6 one goes beside an IPv4 private IP.
/// Strings that are not addresses are ignored.
fn node_ips(node: &Node) -> Option<(IpAddr, Option<Ipv6Addr>)> {
    let from_status: Vec<IpAddr> = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
        .filter(|a| a.type_ == "InternalIP")
        .filter_map(|a| a.address.trim().parse().ok())
        .collect();
    let candidates = if from_status.is_empty() {
        let annotation = node.metadata.annotations.as_ref().and_then(|a| a.get(PROVIDED_NODE_IP));
        annotation.into_iter().flat_map(|v| v.split(',')).filter_map(|a| a.trim().parse().ok()).collect()
    } else {
        from_status
    };
    let first_v6 = candidates.iter().find_map(|ip| match ip {
        IpAddr::V6(v6) => Some(*v6),
        IpAddr::V4(_) => None,
    });
    match candidates.iter().find(|ip| ip.is_ipv4()) {
        Some(v4) => Some((*v4, first_v6)),
        None => first_v6.map(|v6| (IpAddr::V6(v6), None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an IP")
    }

    fn v6(s: &str) -> Ipv6Addr {
        s.parse().expect("an IPv6 address")
    }

    fn node(json: serde_json::Value) -> Node {
        serde_json::from_value(json).expect("a Node")
    }

    #[test]
    fn picks_the_ipv4_internal_ip_then_the_provided_node_ip() {
        let dual = node(serde_json::json!({"metadata": {"name": "w"}, "status": {"addresses": [
            {"type": "Hostname", "address": "w"},
            {"type": "InternalIP", "address": "fc00:f853:ccd:e793::3"},
            {"type": "InternalIP", "address": "172.18.0.3"},
        ]}}));
        assert_eq!(node_ips(&dual), Some((ip("172.18.0.3"), Some(v6("fc00:f853:ccd:e793::3")))));
        let v6_only = node(serde_json::json!({"metadata": {"name": "w"}, "status": {"addresses": [
            {"type": "InternalIP", "address": "fc00::3"},
        ]}}));
        assert_eq!(node_ips(&v6_only), Some((ip("fc00::3"), None)));
        let annotated = node(serde_json::json!({"metadata": {"name": "w", "annotations": {
            PROVIDED_NODE_IP: "fc00::4, 172.18.0.4"}}}));
        assert_eq!(node_ips(&annotated), Some((ip("172.18.0.4"), Some(v6("fc00::4")))));
        let garbage = node(serde_json::json!({"metadata": {"name": "w"}, "status": {"addresses": [
            {"type": "InternalIP", "address": "not-an-ip"},
            {"type": "ExternalIP", "address": "1.2.3.4"},
        ]}}));
        assert_eq!(node_ips(&garbage), None);
    }
}

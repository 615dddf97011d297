//! Pure Node edits shared by the controllers: the upstream label set, the address merge and taint matching.
//! Everything here is side-effect free and unit-tested; the controllers do the I/O.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Node, NodeAddress, Taint};

use crate::cloud::InstanceMetadata;

pub const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";
pub const SHUTDOWN_TAINT: &str = "node.cloudprovider.kubernetes.io/shutdown";
/// Not `node.alpha.…` (docs/upstream-ccm.md, trap 1).
pub const PROVIDED_NODE_IP: &str = "alpha.kubernetes.io/provided-node-ip";

/// (beta, GA) pairs. The beta label is still written at init and is the source of truth afterwards
/// (docs/upstream-ccm.md, trap 3).
pub const LABEL_PAIRS: [(&str, &str); 3] = [
    ("beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type"),
    ("failure-domain.beta.kubernetes.io/zone", "topology.kubernetes.io/zone"),
    ("failure-domain.beta.kubernetes.io/region", "topology.kubernetes.io/region"),
];

pub fn taints(node: &Node) -> &[Taint] {
    node.spec.as_ref().and_then(|s| s.taints.as_deref()).unwrap_or_default()
}

/// Matched by key only (docs/upstream-ccm.md, trap 2).
pub fn has_taint(node: &Node, key: &str) -> bool {
    taints(node).iter().any(|t| t.key == key)
}

/// The taint list with the shutdown taint (`NoSchedule`, no value) added or removed; `None` when it already is
/// as wanted. Matched by key and effect, as upstream's `MatchTaint`.
pub fn shutdown_taint_edit(taints: &[Taint], add: bool) -> Option<Vec<Taint>> {
    let matches = |t: &Taint| t.key == SHUTDOWN_TAINT && t.effect == "NoSchedule";
    match (add, taints.iter().any(matches)) {
        (true, false) => {
            let taint =
                Taint { key: SHUTDOWN_TAINT.into(), effect: "NoSchedule".into(), value: None, time_added: None };
            Some(taints.iter().cloned().chain([taint]).collect())
        }
        (false, true) => Some(taints.iter().filter(|t| !matches(t)).cloned().collect()),
        _ => None,
    }
}

/// The Node's resourceVersion as a number, 0 if it is not one. Only used to tell that the cache has not yet seen
/// a write this CCM made (its version below the one the write returned), so as not to make the write again:
/// versions are etcd's revisions on every API server this runs against, and where one does not parse nothing is
/// skipped.
pub fn version(node: &Node) -> u64 {
    node.metadata.resource_version.as_deref().and_then(|v| v.parse().ok()).unwrap_or(0)
}

pub fn ready_status(node: &Node) -> &str {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .map_or("Unknown", |c| c.status.as_str())
}

/// The labels init writes: instance type, zone and region, GA and beta.
pub fn init_labels(md: &InstanceMetadata) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    for ((beta, ga), value) in LABEL_PAIRS.iter().zip([&md.instance_type, &md.zone, &md.region]) {
        if !value.is_empty() {
            labels.insert(beta.to_string(), value.to_string());
            labels.insert(ga.to_string(), value.to_string());
        }
    }
    labels
}

/// Label reconcile for initialized nodes: GA labels that are missing or differ from their beta label.
/// Never copies GA back to beta.
pub fn labels_to_reconcile(node: &Node) -> BTreeMap<String, String> {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    LABEL_PAIRS
        .iter()
        .filter_map(|(beta, ga)| {
            let b = labels.get(*beta)?;
            (labels.get(*ga) != Some(b)).then(|| (ga.to_string(), b.clone()))
        })
        .collect()
}

/// The node IPs the kubelet chose (`ip` or `ip4,ip6`), strictly parsed.
pub fn provided_node_ips(node: &Node) -> Result<Vec<IpAddr>, String> {
    let Some(v) = node.metadata.annotations.as_ref().and_then(|a| a.get(PROVIDED_NODE_IP)) else {
        return Ok(Vec::new());
    };
    let ips: Vec<IpAddr> = v
        .split(',')
        .map(|s| s.parse())
        .collect::<Result<_, _>>()
        .map_err(|_| format!("{PROVIDED_NODE_IP} {v:?} is not an IP or a dual-stack pair"))?;
    if ips.len() > 2 || (ips.len() == 2 && ips[0].is_ipv4() == ips[1].is_ipv4()) {
        return Err(format!("{PROVIDED_NODE_IP} {v:?} is not an IP or a dual-stack pair"));
    }
    Ok(ips)
}

/// The addresses to write (upstream `updateNodeAddress` + `GetNodeAddressesFromNodeIP`): the kubelet's Hostname
/// addresses are appended when the cloud has none (docs/upstream-ccm.md, trap 7); each provided node IP's
/// address comes first and other addresses of its type are dropped. `Err` when a provided IP is not among the
/// cloud's addresses. Empty when the cloud has no addresses: then nothing is checked or written.
pub fn merge_addresses(node: &Node, cloud: &[NodeAddress]) -> Result<Vec<NodeAddress>, String> {
    if cloud.is_empty() {
        return Ok(Vec::new());
    }
    let mut addrs = cloud.to_vec();
    if !addrs.iter().any(|a| a.type_ == "Hostname") {
        let existing = node.status.as_ref().and_then(|s| s.addresses.as_deref()).unwrap_or_default();
        addrs.extend(existing.iter().filter(|a| a.type_ == "Hostname").cloned());
    }
    provided_ips_first(node, addrs)
}

/// Upstream `GetNodeAddressesFromNodeIP`: each provided node IP's address first, other addresses of its type
/// dropped; `Err` when a provided IP does not parse or is not among `addrs` (none at all included). Without a
/// provided IP, `addrs` as they are. Init checks this on the cloud's own addresses, even none (trap 1).
pub fn provided_ips_first(node: &Node, addrs: Vec<NodeAddress>) -> Result<Vec<NodeAddress>, String> {
    let ips = provided_node_ips(node)?;
    if ips.is_empty() {
        return Ok(addrs);
    }
    let mut first = Vec::new();
    let mut claimed = Vec::new();
    for ip in &ips {
        let matching: Vec<NodeAddress> =
            addrs.iter().filter(|a| a.address.parse::<IpAddr>().ok() == Some(*ip)).cloned().collect();
        if matching.is_empty() {
            return Err(format!("failed to get node address from cloud provider that matches ip: {ip}"));
        }
        for a in matching {
            if !claimed.contains(&a.type_) {
                claimed.push(a.type_.clone());
            }
            first.push(a);
        }
    }
    let rest = addrs.into_iter().filter(|a| !claimed.contains(&a.type_));
    Ok(first.into_iter().chain(rest).collect())
}

/// Upstream's change test: different length, or an entry whose type maps to another address. A pure reorder
/// of unique types is not a change.
pub fn addresses_changed(old: &[NodeAddress], new: &[NodeAddress]) -> bool {
    if old.len() != new.len() {
        return true;
    }
    let by_type: BTreeMap<&str, &str> = old.iter().map(|a| (a.type_.as_str(), a.address.as_str())).collect();
    new.iter().any(|a| by_type.get(a.type_.as_str()) != Some(&a.address.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(t: &str, a: &str) -> NodeAddress {
        NodeAddress { type_: t.into(), address: a.into() }
    }

    fn node(annotation: Option<&str>, kubelet: &[NodeAddress], taints: &[&str]) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n", "annotations": annotation.map(|a| serde_json::json!({PROVIDED_NODE_IP: a}))},
            "spec": {"taints": taints.iter().map(|k| serde_json::json!({"key": k, "effect": "NoSchedule"})).collect::<Vec<_>>()},
            "status": {"addresses": kubelet},
        }))
        .unwrap()
    }

    fn md() -> InstanceMetadata {
        InstanceMetadata {
            provider_id: "fakecloud://z/i-1".into(),
            instance_type: "fc.small".into(),
            zone: "local-1b".into(),
            region: "local-1".into(),
            addresses: vec![addr("InternalIP", "10.0.0.5"), addr("ExternalIP", "203.0.113.9")],
        }
    }

    #[test]
    fn init_writes_the_upstream_label_set_ga_and_beta() {
        let l = init_labels(&md());
        let keys: Vec<&str> = l.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "beta.kubernetes.io/instance-type",
                "failure-domain.beta.kubernetes.io/region",
                "failure-domain.beta.kubernetes.io/zone",
                "node.kubernetes.io/instance-type",
                "topology.kubernetes.io/region",
                "topology.kubernetes.io/zone"
            ]
        );
        assert_eq!(l["topology.kubernetes.io/zone"], "local-1b");
    }

    #[test]
    fn beta_labels_are_the_source_of_truth() {
        let mut n = node(None, &[], &[]);
        n.metadata.labels = Some(
            [
                ("failure-domain.beta.kubernetes.io/zone", "a"),
                ("topology.kubernetes.io/zone", "b"),
                ("topology.kubernetes.io/region", "r"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        );
        let fix = labels_to_reconcile(&n);
        assert_eq!(fix.len(), 1, "GA region without beta is left alone: {fix:?}");
        assert_eq!(fix["topology.kubernetes.io/zone"], "a");
    }

    #[test]
    fn taints_match_by_key_only() {
        let n = node(None, &[], &[UNINITIALIZED_TAINT]);
        assert!(has_taint(&n, UNINITIALIZED_TAINT));
        assert!(!has_taint(&n, SHUTDOWN_TAINT));
    }

    #[test]
    fn shutdown_taint_is_added_once_and_removed_by_key_and_effect() {
        let n = node(None, &[], &[UNINITIALIZED_TAINT]);
        let added = shutdown_taint_edit(taints(&n), true).unwrap();
        assert_eq!(added.len(), 2);
        assert_eq!((added[1].key.as_str(), added[1].effect.as_str()), (SHUTDOWN_TAINT, "NoSchedule"));
        assert_eq!(added[1].value, None);
        assert!(shutdown_taint_edit(&added, true).is_none(), "already there");
        let removed = shutdown_taint_edit(&added, false).unwrap();
        assert_eq!(removed, taints(&n), "only the shutdown taint goes");
        assert!(shutdown_taint_edit(&removed, false).is_none());
        // A NoExecute taint with the same key is somebody else's.
        let other = Taint { key: SHUTDOWN_TAINT.into(), effect: "NoExecute".into(), ..Default::default() };
        assert!(shutdown_taint_edit(&[other], false).is_none());
    }

    #[test]
    fn addresses_put_the_provided_ip_first_and_keep_the_kubelet_hostname() {
        let kubelet = [addr("InternalIP", "10.0.0.5"), addr("Hostname", "n")];
        let n = node(Some("10.0.0.5"), &kubelet, &[]);
        let cloud = [addr("ExternalIP", "203.0.113.9"), addr("InternalIP", "10.0.0.7"), addr("InternalIP", "10.0.0.5")];
        let merged = merge_addresses(&n, &cloud).unwrap();
        assert_eq!(merged, [addr("InternalIP", "10.0.0.5"), addr("ExternalIP", "203.0.113.9"), addr("Hostname", "n")]);
        // Cloud hostnames win: the kubelet's is not appended then.
        let merged = merge_addresses(&n, &[addr("InternalIP", "10.0.0.5"), addr("Hostname", "cloud-name")]).unwrap();
        assert_eq!(merged, [addr("InternalIP", "10.0.0.5"), addr("Hostname", "cloud-name")]);
        // A provided IP the cloud does not know blocks the update.
        let n = node(Some("10.9.9.9"), &kubelet, &[]);
        assert!(merge_addresses(&n, &cloud).unwrap_err().contains("10.9.9.9"));
        let n = node(Some("not-an-ip"), &kubelet, &[]);
        assert!(merge_addresses(&n, &cloud).is_err());
        // No cloud addresses: nothing to write, not even the kubelet's hostname...
        assert_eq!(merge_addresses(&n, &[]).unwrap(), []);
        // ...but init's check of a provided IP fails then, as upstream's does.
        let n = node(Some("10.0.0.5"), &kubelet, &[]);
        assert!(provided_ips_first(&n, Vec::new()).unwrap_err().contains("10.0.0.5"));
        let unannotated = node(None, &kubelet, &[]);
        assert_eq!(provided_ips_first(&unannotated, Vec::new()).unwrap(), []);
    }

    #[test]
    fn a_reorder_is_not_a_change() {
        let a = [addr("InternalIP", "1.1.1.1"), addr("Hostname", "n")];
        let b = [addr("Hostname", "n"), addr("InternalIP", "1.1.1.1")];
        assert!(!addresses_changed(&a, &b));
        assert!(addresses_changed(&a, &[addr("InternalIP", "1.1.1.2"), addr("Hostname", "n")]));
        assert!(addresses_changed(&a, &a[..1]));
    }
}

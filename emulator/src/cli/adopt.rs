//! `fakecloud adopt`: make an existing cluster's machines (kind nodes, say) cloud instances, so a CCM talking
//! to the emulator finds an instance behind every Node.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use anyhow::{Context, Result};
use fakecloud_api::{Client, CreateInstanceRequest, InstanceState, ListInstancesQuery};
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;

/// What happened to one Node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Adopted {
        instance_id: String,
        ip: String,
        zone: String,
    },
    AlreadyAnInstance,
    /// No InternalIP (nor provided-node-ip annotation) to adopt it with.
    NoAddress,
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

/// Adopt every Node that has no live instance of its name. Safe to run again: the idempotency key comes from
/// the Node's UID.
pub async fn adopt(kube: kube::Client, cloud: &Client) -> Result<BTreeMap<String, Outcome>> {
    let zones: Vec<String> = cloud.region().await?.zones.into_iter().map(|z| z.name).collect();
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
    for (n, node) in nodes.iter().enumerate() {
        let name = node.metadata.name.clone().unwrap_or_default();
        if live.contains(&name) {
            out.insert(name, Outcome::AlreadyAnInstance);
            continue;
        }
        let addresses = node.status.as_ref().and_then(|s| s.addresses.as_ref());
        let ip = addresses
            .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
            .map(|a| a.address.clone())
            .or_else(|| node.metadata.annotations.as_ref()?.get("alpha.kubernetes.io/provided-node-ip").cloned());
        let Some(ip) = ip.and_then(|ip| ip.split(',').next().map(str::to_string)) else {
            out.insert(name, Outcome::NoAddress);
            continue;
        };
        let labelled = node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("topology.kubernetes.io/zone"))
            .filter(|z| zones.contains(z));
        let zone = labelled.cloned().unwrap_or_else(|| zones[n % zones.len()].clone());
        let req = CreateInstanceRequest {
            name: name.clone(),
            zone: Some(zone.clone()),
            private_ip: Some(ip.parse().with_context(|| format!("node {name}: {ip:?} is not an IP address"))?),
            tags: [("fakecloud.io/adopted".to_string(), "true".to_string())].into(),
            ..Default::default()
        };
        let key = format!("adopt-{}", node.metadata.uid.as_deref().unwrap_or(&name));
        let inst = cloud.create_instance(&req, Some(&key)).await.with_context(|| format!("adopting node {name}"))?;
        out.insert(name, Outcome::Adopted { instance_id: inst.id, ip, zone });
    }
    Ok(out)
}

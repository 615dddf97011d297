//! The route controller (upstream `controllers/route/route_controller.go`): every
//! `--route-reconciliation-period`, one route per node pod CIDR (dual-stack: one per family), routes of this
//! cluster inside `--cluster-cidr` that no node needs are deleted, and each node's `NetworkUnavailable` says
//! whether its routes exist. One route listing per period; at most 200 cloud operations in flight.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use ipnet::IpNet;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::Store;

use crate::cloud::{Cloud, CloudError, CloudRoute};
use crate::events::{EventType, Recorder, node_ref};
use crate::informer::Synced;

pub const COMPONENT: &str = "route_controller";
/// Upstream's `maxConcurrentRouteOperations`.
const MAX_IN_FLIGHT: usize = 200;

pub struct Settings {
    pub cluster_name: String,
    pub cluster_cidrs: Vec<IpNet>,
    pub period: Duration,
}

/// Run until the process ends; `store` is the shared Node cache, complete once `synced`. The period does not
/// slide (upstream's `NonSlidingUntil`): a slow reconcile does not push the next one back.
pub async fn run<C: Cloud>(
    client: kube::Client,
    cloud: Arc<C>,
    settings: Settings,
    store: Store<Node>,
    synced: Synced,
) {
    let recorder = Recorder::new(client.clone(), COMPONENT);
    let api = Api::<Node>::all(client);
    if !synced.wait().await {
        return;
    }
    let mut tick = tokio::time::interval(settings.period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = reconcile(&api, &*cloud, &recorder, &store, &settings).await {
            tracing::warn!(error = %e, "route reconcile failed; next try at the next period");
        }
    }
}

fn pod_cidrs(node: &Node) -> Vec<String> {
    let spec = node.spec.as_ref();
    let mut cidrs = spec.and_then(|s| s.pod_cidrs.clone()).unwrap_or_default();
    if cidrs.is_empty()
        && let Some(c) = spec.and_then(|s| s.pod_cidr.clone())
    {
        cidrs.push(c);
    }
    cidrs
}

async fn reconcile<C: Cloud>(
    api: &Api<Node>,
    cloud: &C,
    recorder: &Recorder,
    store: &Store<Node>,
    s: &Settings,
) -> Result<(), CloudError> {
    let routes = cloud.list_routes(&s.cluster_name).await?;
    let nodes = store.state();
    // A route's node is the one whose providerID names the route's instance.
    let node_of: HashMap<&str, String> = nodes
        .iter()
        .filter_map(|n| Some((cloud.instance_id(n.spec.as_ref()?.provider_id.as_deref()?)?, n.name_any())))
        .collect();
    let target_node = |r: &CloudRoute| node_of.get(r.target_instance.as_str()).cloned().unwrap_or_default();
    // Textual comparison of destinations, as upstream (trap 16).
    let have: HashSet<(String, &str)> = routes.iter().map(|r| (target_node(r), r.destination.as_str())).collect();
    let mut creates = Vec::new();
    for node in &nodes {
        if node.spec.as_ref().and_then(|s| s.provider_id.as_deref()).is_none() {
            continue; // not initialized yet: no instance to route to
        }
        for cidr in pod_cidrs(node) {
            if !have.contains(&(node.name_any(), cidr.as_str())) {
                creates.push((node.clone(), cidr));
            }
        }
    }
    // Each create with its node, CIDR and how long it took (for the event).
    type Attempt = (Arc<Node>, String, Duration, Result<(), CloudError>);
    let created: Vec<Attempt> = futures::stream::iter(creates)
        .map(|(node, cidr)| async move {
            let uid = node.metadata.uid.clone().unwrap_or_default();
            let start = Instant::now();
            let r = cloud.create_route(&s.cluster_name, &uid, &node, &cidr).await;
            (node, cidr, start.elapsed(), r)
        })
        .buffer_unordered(MAX_IN_FLIGHT)
        .collect()
        .await;
    let mut failed: HashSet<String> = HashSet::new();
    for (node, cidr, took, r) in &created {
        if let Err(e) = r {
            failed.insert(node.name_any());
            let message = format!(
                "Could not create route {} {cidr} for node {} after {took:?}: {e}",
                node.metadata.uid.clone().unwrap_or_default(),
                node.name_any()
            );
            tracing::warn!(node = %node.name_any(), %cidr, error = %e, "route not created");
            recorder.publish(node_ref(node), EventType::Warning, "FailedToCreateRoute", message);
        }
    }
    // Stale routes: only inside the cluster CIDR, and only when no node needs them.
    let needed: HashSet<(String, String)> =
        nodes.iter().flat_map(|n| pod_cidrs(n).into_iter().map(move |c| (n.name_any(), c))).collect();
    let stale: Vec<CloudRoute> = routes
        .iter()
        .filter(|r| {
            let inside = r.destination.parse::<IpNet>().is_ok_and(|d| s.cluster_cidrs.iter().any(|c| c.contains(&d)));
            inside && !needed.contains(&(target_node(r), r.destination.clone()))
        })
        .cloned()
        .collect();
    futures::stream::iter(stale)
        .map(|r| async move {
            match cloud.delete_route(&r).await {
                Ok(()) => {
                    tracing::info!(route = %r.name, destination = %r.destination, "deleted a route no node needs")
                }
                Err(e) => tracing::warn!(route = %r.name, error = %e, "cannot delete a stale route"),
            }
        })
        .buffer_unordered(MAX_IN_FLIGHT)
        .collect::<Vec<()>>()
        .await;
    for node in &nodes {
        if node.spec.as_ref().and_then(|s| s.provider_id.as_deref()).is_none() || pod_cidrs(node).is_empty() {
            continue;
        }
        let ok = !failed.contains(&node.name_any());
        if let Err(e) = set_network_condition(api, node, ok).await {
            tracing::warn!(node = %node.name_any(), error = %e, "cannot update NetworkUnavailable");
        }
    }
    Ok(())
}

/// `NetworkUnavailable`: False/RouteCreated when the node's routes exist, True/NoRouteCreated when creating one
/// failed. Written when it differs, or when the reason is not this controller's own (trap 18).
async fn set_network_condition(api: &Api<Node>, node: &Node, routes_ok: bool) -> Result<(), kube::Error> {
    let (status, reason, message) = if routes_ok {
        ("False", "RouteCreated", "RouteController created a route")
    } else {
        ("True", "NoRouteCreated", "RouteController failed to create a route")
    };
    let current = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "NetworkUnavailable"));
    if current.is_some_and(|c| c.status == status && c.reason.as_deref() == Some(reason)) {
        return Ok(());
    }
    let now = jiff::Timestamp::now().to_string();
    let patch = serde_json::json!({"status": {"conditions": [{
        "type": "NetworkUnavailable", "status": status, "reason": reason, "message": message,
        "lastTransitionTime": now, "lastHeartbeatTime": now,
    }]}});
    api.patch_status(&node.name_any(), &PatchParams::default(), &Patch::Strategic(patch)).await?;
    Ok(())
}

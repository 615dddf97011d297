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

use crate::client_go::events::{EventType, Recorder, node_ref};
use crate::client_go::informer::Synced;
use crate::cloud::{Cloud, CloudError, CloudRoute};
use crate::nodes::version;

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
    let mut written = Written::default();
    loop {
        tick.tick().await;
        if let Err(e) = reconcile(&api, &*cloud, &recorder, &store, &settings, &mut written).await {
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

/// The `NetworkUnavailable` this controller last wrote on each Node, with the resourceVersion the write returned.
/// While the cache shows an older version it has not seen the write yet, and the condition is known: a period
/// that starts right after a long pass (1,000 patches take seconds) would otherwise read the old condition and
/// write it again (upstream does; the outcome is the same, the write is not). Once the cache reaches that version
/// it is the truth again.
#[derive(Default)]
struct Written(HashMap<String, (u64, bool)>);

impl Written {
    fn pending(&self, node: &Node, routes_ok: bool) -> Option<(u64, bool)> {
        self.0.get(&node.name_any()).copied().filter(|&(written, ok)| ok == routes_ok && version(node) < written)
    }
}

/// What one reconcile does to the cloud.
#[derive(Debug, PartialEq)]
struct Plan {
    /// (node, pod CIDR) without its route: one per CIDR, so both families on a dual-stack node.
    creates: Vec<(Arc<Node>, String)>,
    /// Routes this controller is responsible for that no node needs.
    stale: Vec<CloudRoute>,
    /// The nodes some listed route targets.
    routed: HashSet<String>,
}

/// Upstream's reconcile, without the calls. A route belongs to the node whose providerID names its instance;
/// destinations compare as text (docs/upstream-ccm.md, trap 16); a route is deleted only if this controller is
/// responsible for it (its first or last address inside a cluster CIDR, upstream's `isResponsibleForRoute`) and no
/// node needs it.
/// A node without a providerID is planned like any other, as upstream does: the cloud then refuses the
/// create, and the node is told so (event and condition) until it is initialized.
fn plan(
    nodes: &[Arc<Node>],
    routes: &[CloudRoute],
    cluster_cidrs: &[IpNet],
    instance_id: impl Fn(&str) -> Option<String>,
) -> Plan {
    let node_of: HashMap<String, String> = nodes
        .iter()
        .filter_map(|n| Some((instance_id(n.spec.as_ref()?.provider_id.as_deref()?)?, n.name_any())))
        .collect();
    let target_node = |r: &CloudRoute| node_of.get(&r.target_instance).cloned().unwrap_or_default();
    let have: HashSet<(String, &str)> = routes.iter().map(|r| (target_node(r), r.destination.as_str())).collect();
    let mut creates = Vec::new();
    for node in nodes {
        for cidr in pod_cidrs(node) {
            if !have.contains(&(node.name_any(), cidr.as_str())) {
                creates.push((node.clone(), cidr));
            }
        }
    }
    let needed: HashSet<(String, String)> =
        nodes.iter().flat_map(|n| pod_cidrs(n).into_iter().map(move |c| (n.name_any(), c))).collect();
    let responsible = |dest: &str| {
        dest.parse::<IpNet>()
            .is_ok_and(|d| cluster_cidrs.iter().any(|c| c.contains(&d.network()) || c.contains(&d.broadcast())))
    };
    let stale = routes
        .iter()
        .filter(|r| responsible(&r.destination) && !needed.contains(&(target_node(r), r.destination.clone())))
        .cloned()
        .collect();
    let routed = routes.iter().map(target_node).filter(|n| !n.is_empty()).collect();
    Plan { creates, stale, routed }
}

async fn reconcile<C: Cloud>(
    api: &Api<Node>,
    cloud: &C,
    recorder: &Recorder,
    store: &Store<Node>,
    s: &Settings,
    written: &mut Written,
) -> Result<(), CloudError> {
    let routes = cloud.list_routes(&s.cluster_name).await?;
    let nodes = store.state();
    let Plan { creates, stale, routed } =
        plan(&nodes, &routes, &s.cluster_cidrs, |pid| cloud.instance_id(pid).map(str::to_string));
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
    // Upstream's condition pass (L488-523): every node with pod CIDRs or with routes; one with routes but no
    // pod CIDR has none of its own, so NoRouteCreated. All at once, as upstream's goroutine per node: only the
    // client's rate limit paces them (one after another, 5,000 Nodes took minutes and held the next period).
    let (routed, failed, memo) = (&routed, &failed, &*written);
    let outcomes = futures::future::join_all(nodes.iter().map(|node| async move {
        let name = node.name_any();
        let has_cidrs = !pod_cidrs(node).is_empty();
        if !has_cidrs && !routed.contains(&name) {
            return None;
        }
        let ok = has_cidrs && !failed.contains(&name);
        if let Some(written) = memo.pending(node, ok) {
            return Some((name, written));
        }
        match set_network_condition(api, node, ok).await {
            Ok(written) => written.map(|version| (name, (version, ok))),
            Err(e) => {
                tracing::warn!(node = %name, error = %e, "cannot update NetworkUnavailable");
                None
            }
        }
    }))
    .await;
    // Only the writes the cache may not show yet: a deleted Node's entry goes, and a failed write is tried again.
    written.0 = outcomes.into_iter().flatten().collect();
    Ok(())
}

/// `NetworkUnavailable`: False/RouteCreated when the node's routes exist, True/NoRouteCreated when creating one
/// failed. Written when it differs, or when the reason is not this controller's own (docs/upstream-ccm.md, trap 18).
/// The Node's version after the write, if there was one.
async fn set_network_condition(api: &Api<Node>, node: &Node, routes_ok: bool) -> Result<Option<u64>, kube::Error> {
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
        return Ok(None);
    }
    let now = jiff::Timestamp::now().to_string();
    let patch = serde_json::json!({"status": {"conditions": [{
        "type": "NetworkUnavailable", "status": status, "reason": reason, "message": message,
        "lastTransitionTime": now, "lastHeartbeatTime": now,
    }]}});
    let written = api.patch_status(&node.name_any(), &PatchParams::default(), &Patch::Strategic(patch)).await?;
    Ok(Some(version(&written)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, instance: Option<&str>, cidrs: &[&str]) -> Arc<Node> {
        let mut spec = serde_json::json!({"podCIDRs": cidrs});
        if let Some(i) = instance {
            spec["providerID"] = serde_json::json!(format!("fc://{i}"));
        }
        if let Some(first) = cidrs.first() {
            spec["podCIDR"] = serde_json::json!(first);
        }
        Arc::new(serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "spec": spec})).unwrap())
    }

    fn route(id: &str, instance: &str, destination: &str) -> CloudRoute {
        CloudRoute {
            id: id.into(),
            name: format!("kubernetes-{id}"),
            target_instance: instance.into(),
            destination: destination.into(),
        }
    }

    fn run(nodes: &[Arc<Node>], routes: &[CloudRoute], cidrs: &[&str]) -> (Vec<(String, String)>, Vec<String>) {
        let cidrs: Vec<IpNet> = cidrs.iter().map(|c| c.parse().unwrap()).collect();
        let p = plan(nodes, routes, &cidrs, |pid| pid.strip_prefix("fc://").map(str::to_string));
        (p.creates.into_iter().map(|(n, c)| (n.name_any(), c)).collect(), p.stale.into_iter().map(|r| r.id).collect())
    }

    #[test]
    fn dual_stack_nodes_get_a_route_per_family() {
        let n = node("a", Some("i-a"), &["10.244.1.0/24", "fd00:10:244:1::/64"]);
        let (creates, stale) =
            run(&[n], &[route("r1", "i-a", "10.244.1.0/24")], &["10.244.0.0/16", "fd00:10:244::/56"]);
        assert_eq!(creates, [("a".to_string(), "fd00:10:244:1::/64".to_string())]);
        assert!(stale.is_empty());
    }

    #[test]
    fn nodes_without_a_provider_id_are_attempted() {
        // As upstream: the cloud refuses the create, and the node hears of it.
        let (creates, _) = run(&[node("a", None, &["10.244.1.0/24"])], &[], &["10.244.0.0/16"]);
        assert_eq!(creates, [("a".to_string(), "10.244.1.0/24".to_string())]);
    }

    #[test]
    fn only_unneeded_routes_inside_the_cluster_cidr_are_deleted() {
        let nodes = [node("a", Some("i-a"), &["10.244.1.0/24"])];
        let routes = [
            route("keep", "i-a", "10.244.1.0/24"),
            route("gone-node", "i-gone", "10.244.2.0/24"),
            route("moved-cidr", "i-a", "10.244.3.0/24"),
            route("outside", "i-gone", "192.168.0.0/24"),
            // Its first address is inside the cluster CIDR: upstream's controller is responsible for it.
            route("overlapping", "i-gone", "10.244.0.0/15"),
            route("unparsable", "i-gone", "not-a-cidr"),
        ];
        let (creates, mut stale) = run(&nodes, &routes, &["10.244.0.0/16"]);
        stale.sort();
        assert!(creates.is_empty());
        assert_eq!(stale, ["gone-node", "moved-cidr", "overlapping"]);
    }

    #[test]
    fn destinations_compare_as_text() {
        // The cloud stored another spelling of the same network: upstream re-creates it
        // (docs/upstream-ccm.md, trap 16).
        let nodes = [node("a", Some("i-a"), &["fd00:10:244:1::/64"])];
        let routes = [route("r", "i-a", "fd00:10:244:1:0::/64")];
        let (creates, stale) = run(&nodes, &routes, &["fd00:10:244::/56"]);
        assert_eq!(creates.len(), 1);
        assert_eq!(stale, ["r"]);
    }

    // `reconcile`, table-driven as upstream's `TestReconcile`: Nodes and the cloud's routes in → the cloud calls,
    // the NetworkUnavailable writes, the events. Creates, deletes and condition writes run concurrently, so the
    // calls and requests compare sorted.

    use crate::client_go::fake_api::{FakeApi, assert_contains, merged, settle};
    use crate::cloud::in_memory::{Call, InMemoryCloud, Op};
    use kube::runtime::watcher;
    use serde_json::{Value, json};

    const CLUSTER: &str = "kubernetes";

    /// A Node as the API has it: `instance` in its providerID, `cidrs` its pod CIDRs.
    fn api_node(name: &str, instance: Option<&str>, cidrs: &[&str], extra: Value) -> Value {
        let mut spec = json!({"podCIDRs": cidrs});
        if let Some(i) = instance {
            spec["providerID"] = json!(format!("fakecloud://local-1a/{i}"));
        }
        let base = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": format!("u-{name}")},
            "spec": spec});
        merged(base, extra)
    }

    fn network(status: &str, reason: &str) -> Value {
        json!({"status": {"conditions": [{"type": "NetworkUnavailable", "status": status, "reason": reason}]}})
    }

    fn create(node: &str, destination: &str) -> Call {
        Call::CreateRoute { node: node.into(), destination: destination.into() }
    }

    fn condition_patch(node: &'static str, status: &str, reason: &str, message: &str) -> (String, Value) {
        let body = json!({"status": {"conditions": [{"type": "NetworkUnavailable", "status": status,
            "reason": reason, "message": message}]}});
        (format!("PATCH /api/v1/nodes/{node}/status"), body)
    }

    fn route_created(node: &'static str) -> (String, Value) {
        condition_patch(node, "False", "RouteCreated", "RouteController created a route")
    }

    fn no_route_created(node: &'static str) -> (String, Value) {
        condition_patch(node, "True", "NoRouteCreated", "RouteController failed to create a route")
    }

    struct Case {
        name: &'static str,
        nodes: Vec<Value>,
        cloud: InMemoryCloud,
        calls: Vec<Call>,
        /// The cloud's routes afterwards: (destination, instance).
        routes: Vec<(&'static str, &'static str)>,
        /// `"METHOD path"` and what the body must contain.
        requests: Vec<(String, Value)>,
        events: Vec<&'static str>,
        ok: bool,
    }

    async fn check(c: Case) {
        let name = c.name;
        let mut api = FakeApi::default();
        let (store, mut writer) = kube::runtime::reflector::store::<Node>();
        for n in c.nodes {
            writer.apply_watcher_event(&watcher::Event::Apply(serde_json::from_value(n.clone()).unwrap()));
            api = api.with(n);
        }
        let client = api.client();
        let recorder = Recorder::new(client.clone(), COMPONENT);
        let settings = Settings {
            cluster_name: CLUSTER.into(),
            cluster_cidrs: vec!["10.244.0.0/16".parse().unwrap(), "fd00:10:244::/56".parse().unwrap()],
            period: Duration::from_secs(10),
        };
        let result =
            reconcile(&Api::all(client), &c.cloud, &recorder, &store, &settings, &mut Written::default()).await;
        drop(recorder);
        settle().await;
        assert_eq!(result.is_ok(), c.ok, "{name}: {result:?}");
        let mut calls = c.cloud.calls();
        assert_eq!(calls.first(), Some(&Call::ListRoutes), "{name}: one listing, first");
        calls.sort();
        let mut want = c.calls;
        want.sort();
        assert_eq!(calls, want, "{name}: cloud calls");
        let mut want_routes: Vec<(String, String)> =
            c.routes.iter().map(|(d, i)| (d.to_string(), i.to_string())).collect();
        want_routes.sort();
        assert_eq!(c.cloud.routes(), want_routes, "{name}: routes afterwards");
        let mut sent = api.requests();
        sent.sort_by(|a, b| a.call.cmp(&b.call));
        let mut requests = c.requests;
        requests.sort_by(|a, b| a.0.cmp(&b.0));
        let got: Vec<&str> = sent.iter().map(|s| s.call.as_str()).collect();
        assert_eq!(got, requests.iter().map(|(c, _)| c.as_str()).collect::<Vec<_>>(), "{name}: API requests");
        for (s, (_, body)) in sent.iter().zip(&requests) {
            assert_contains(&s.body, body, &format!("{name}: {}", s.call));
            assert_eq!(s.patch, "strategic", "{name}: {}", s.call);
        }
        assert_eq!(api.events(), c.events, "{name}: events");
    }

    #[tokio::test(start_paused = true)]
    async fn reconcile_routes() {
        let v6 = "fd00:10:244:1::/64";
        let cases = [
            Case {
                name: "a route per pod CIDR, both families; NetworkUnavailable False/RouteCreated",
                nodes: vec![
                    api_node("a", Some("i-a"), &["10.244.1.0/24", v6], json!({})),
                    api_node("b", Some("i-b"), &["10.244.2.0/24"], json!({})),
                ],
                cloud: InMemoryCloud::default(),
                calls: vec![
                    Call::ListRoutes,
                    create("a", "10.244.1.0/24"),
                    create("a", v6),
                    create("b", "10.244.2.0/24"),
                ],
                routes: vec![("10.244.1.0/24", "i-a"), (v6, "i-a"), ("10.244.2.0/24", "i-b")],
                requests: vec![route_created("a"), route_created("b")],
                events: vec![],
                ok: true,
            },
            Case {
                name: "the route is there and the condition is ours: no cloud write, no API write",
                nodes: vec![api_node("a", Some("i-a"), &["10.244.1.0/24"], network("False", "RouteCreated"))],
                cloud: InMemoryCloud::default().with_route(CLUSTER, "r1", "i-a", "10.244.1.0/24"),
                calls: vec![Call::ListRoutes],
                routes: vec![("10.244.1.0/24", "i-a")],
                requests: vec![],
                events: vec![],
                ok: true,
            },
            Case {
                name: "the condition has the right status but a CNI's reason: overwritten (trap 18)",
                nodes: vec![api_node("a", Some("i-a"), &["10.244.1.0/24"], network("False", "CalicoIsUp"))],
                cloud: InMemoryCloud::default().with_route(CLUSTER, "r1", "i-a", "10.244.1.0/24"),
                calls: vec![Call::ListRoutes],
                routes: vec![("10.244.1.0/24", "i-a")],
                requests: vec![route_created("a")],
                events: vec![],
                ok: true,
            },
            Case {
                name: "stale routes are deleted, only this cluster's and inside the cluster CIDR (trap 16)",
                nodes: vec![api_node("a", Some("i-a"), &["10.244.1.0/24"], network("False", "RouteCreated"))],
                cloud: InMemoryCloud::default()
                    .with_route(CLUSTER, "keep", "i-a", "10.244.1.0/24")
                    .with_route(CLUSTER, "gone-node", "i-gone", "10.244.9.0/24")
                    .with_route(CLUSTER, "outside", "i-gone", "192.168.0.0/24")
                    .with_route("other", "other-cluster", "i-gone", "10.244.8.0/24"),
                calls: vec![Call::ListRoutes, Call::DeleteRoute("10.244.9.0/24".into())],
                routes: vec![("10.244.1.0/24", "i-a"), ("192.168.0.0/24", "i-gone"), ("10.244.8.0/24", "i-gone")],
                requests: vec![],
                events: vec![],
                ok: true,
            },
            Case {
                name: "a failed create: FailedToCreateRoute, NetworkUnavailable True/NoRouteCreated (trap 17)",
                nodes: vec![
                    api_node("a", Some("i-a"), &["10.244.1.0/24"], network("False", "RouteCreated")),
                    api_node("b", Some("i-b"), &["10.244.2.0/24"], network("False", "RouteCreated")),
                ],
                cloud: InMemoryCloud::default()
                    .with_route(CLUSTER, "r1", "i-b", "10.244.2.0/24")
                    .failing(Op::CreateRoute, CloudError::Transient("boom".into())),
                calls: vec![Call::ListRoutes, create("a", "10.244.1.0/24")],
                routes: vec![("10.244.2.0/24", "i-b")],
                requests: vec![no_route_created("a")],
                events: vec!["Warning FailedToCreateRoute"],
                ok: true,
            },
            Case {
                name: "a failed create, NoRouteCreated already: the event, no write",
                nodes: vec![api_node("a", Some("i-a"), &["10.244.1.0/24"], network("True", "NoRouteCreated"))],
                cloud: InMemoryCloud::default().failing(
                    Op::CreateRoute,
                    CloudError::RetryAfter { after: Duration::from_secs(3), message: "throttled".into() },
                ),
                calls: vec![Call::ListRoutes, create("a", "10.244.1.0/24")],
                routes: vec![],
                requests: vec![],
                events: vec!["Warning FailedToCreateRoute"],
                ok: true,
            },
            Case {
                name: "a failed delete is only logged",
                nodes: vec![api_node("a", Some("i-a"), &["10.244.1.0/24"], network("False", "RouteCreated"))],
                cloud: InMemoryCloud::default()
                    .with_route(CLUSTER, "r1", "i-a", "10.244.1.0/24")
                    .with_route(CLUSTER, "r2", "i-gone", "10.244.9.0/24")
                    .failing(Op::DeleteRoute, CloudError::Transient("boom".into())),
                calls: vec![Call::ListRoutes, Call::DeleteRoute("10.244.9.0/24".into())],
                routes: vec![("10.244.1.0/24", "i-a"), ("10.244.9.0/24", "i-gone")],
                requests: vec![],
                events: vec![],
                ok: true,
            },
            Case {
                name: "the listing fails: nothing else this period",
                nodes: vec![api_node("a", Some("i-a"), &["10.244.1.0/24"], json!({}))],
                cloud: InMemoryCloud::default().failing(Op::ListRoutes, CloudError::Transient("boom".into())),
                calls: vec![Call::ListRoutes],
                routes: vec![],
                requests: vec![],
                events: vec![],
                ok: false,
            },
            Case {
                name: "no providerID yet: the create is attempted and refused, FailedToCreateRoute, NoRouteCreated",
                nodes: vec![api_node("c", None, &["10.244.3.0/24"], json!({}))],
                cloud: InMemoryCloud::default(),
                calls: vec![Call::ListRoutes, create("c", "10.244.3.0/24")],
                routes: vec![],
                requests: vec![no_route_created("c")],
                events: vec!["Warning FailedToCreateRoute"],
                ok: true,
            },
            Case {
                name: "no pod CIDR and no route: no condition",
                nodes: vec![api_node("d", Some("i-d"), &[], json!({}))],
                cloud: InMemoryCloud::default(),
                calls: vec![Call::ListRoutes],
                routes: vec![],
                requests: vec![],
                events: vec![],
                ok: true,
            },
            Case {
                name: "no pod CIDR but a route to it: the route deleted, NoRouteCreated, whatever the condition said",
                nodes: vec![api_node("d", Some("i-d"), &[], network("False", "RouteCreated"))],
                cloud: InMemoryCloud::default().with_route(CLUSTER, "r1", "i-d", "10.244.4.0/24"),
                calls: vec![Call::ListRoutes, Call::DeleteRoute("10.244.4.0/24".into())],
                routes: vec![],
                requests: vec![no_route_created("d")],
                events: vec![],
                ok: true,
            },
        ];
        for c in cases {
            check(c).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_condition_is_not_written_again_before_the_cache_shows_it() {
        let node = |rv: &str| {
            let n = api_node("a", Some("i-a"), &["10.244.1.0/24"], json!({"metadata": {"resourceVersion": rv}}));
            serde_json::from_value::<Node>(n).unwrap()
        };
        // The API has the Node at version 4, so the write makes 5; the cache is behind, at 1.
        let api = FakeApi::default().with(serde_json::to_value(node("4")).unwrap());
        let (store, mut writer) = kube::runtime::reflector::store::<Node>();
        let cloud = InMemoryCloud::default().with_route(CLUSTER, "r1", "i-a", "10.244.1.0/24");
        let client = api.client();
        let recorder = Recorder::new(client.clone(), COMPONENT);
        let settings = Settings { cluster_name: CLUSTER.into(), cluster_cidrs: Vec::new(), period: Duration::ZERO };
        let mut written = Written::default();
        let patches = || api.requests().iter().filter(|r| r.call.ends_with("/status")).count();
        let passes = [
            ("1", 1, "first"),
            ("1", 1, "the cache still where it was"),
            ("3", 1, "the cache at a version older than the write (another writer's, delivered late)"),
            // Newer than the write and without the condition: someone removed it, and the cache is the truth.
            ("6", 2, "a newer version without it"),
        ];
        for (rv, want, pass) in passes {
            writer.apply_watcher_event(&watcher::Event::Apply(node(rv)));
            reconcile(&Api::all(client.clone()), &cloud, &recorder, &store, &settings, &mut written).await.unwrap();
            assert_eq!(patches(), want, "{pass}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_create_is_reported_on_the_node() {
        let node = api_node("a", Some("i-a"), &["10.244.1.0/24"], json!({}));
        let api = FakeApi::default().with(node.clone());
        let (store, mut writer) = kube::runtime::reflector::store::<Node>();
        writer.apply_watcher_event(&watcher::Event::Apply(serde_json::from_value(node).unwrap()));
        let cloud = InMemoryCloud::default().failing(Op::CreateRoute, CloudError::Transient("boom".into()));
        let client = api.client();
        let recorder = Recorder::new(client.clone(), COMPONENT);
        let settings = Settings { cluster_name: CLUSTER.into(), cluster_cidrs: Vec::new(), period: Duration::ZERO };
        reconcile(&Api::all(client), &cloud, &recorder, &store, &settings, &mut Written::default()).await.unwrap();
        drop(recorder);
        settle().await;
        let ev = &api.event_bodies()[0];
        assert_contains(
            ev,
            &json!({"type": "Warning", "reason": "FailedToCreateRoute",
                "involvedObject": {"kind": "Node", "name": "a", "uid": "u-a"},
                "source": {"component": "route_controller"}}),
            "event",
        );
        let message = ev["message"].as_str().unwrap();
        assert!(message.starts_with("Could not create route u-a 10.244.1.0/24 for node a after "), "{message}");
        assert!(message.ends_with(": boom"), "{message}");
    }
}

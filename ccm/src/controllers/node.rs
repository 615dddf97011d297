//! The cloud-node controller (upstream `controllers/node/node_controller.go`): initializes nodes that carry the
//! uninitialized taint — providerID, instance-type/zone/region labels (GA and beta), addresses — then removes the
//! taint and records `Synced`. Initialized nodes get only the label reconcile; their addresses are refreshed
//! every `--node-status-update-frequency`.
//!
//! The queue is kube's scheduler driven as upstream's `Nodes` queue: every node add and update (heartbeats
//! included) asks for a sync, a failed sync is retried after `DefaultTypedControllerRateLimiter`'s delay.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::convert::Infallible;

use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, NodeAddress};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::{self, Action, applier};
use kube::runtime::reflector::{ObjectRef, Store};

use crate::client_go::events::{EventType, Recorder, node_ref};
use crate::client_go::informer::Synced;
use crate::client_go::metrics::{Metrics, Queue};
use crate::client_go::ratelimit::ControllerRateLimiter;
use crate::cloud::{Cloud, CloudError, InstanceMetadata};
use crate::nodes::{
    UNINITIALIZED_TAINT, addresses_changed, has_taint, init_labels, labels_to_reconcile, merge_addresses,
    provided_ips_first, version,
};

pub const COMPONENT: &str = "cloud-node-controller";
/// Upstream's queue name, the `name` label of the `workqueue_*` metrics.
pub const QUEUE: &str = "Nodes";
/// Upstream's `UpdateNodeSpecBackoff`: 20 tries, 50 ms apart with a jitter of 1.0 (50–100 ms).
const UPDATE_TRIES: u32 = 20;
const UPDATE_BACKOFF: Duration = Duration::from_millis(50);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to get instance metadata for node {node}: {source}")]
    Metadata { node: String, source: CloudError },
    #[error("cloud provider does not set node provider ID for node {0}")]
    NoProviderId(String),
    #[error("provided node ip for node {node:?} is not valid: {reason}")]
    NodeIp { node: String, reason: String },
    /// Upstream's lister error when the Node left the cache during init.
    #[error("node {0:?} not found")]
    Gone(String),
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

#[derive(Debug, Clone)]
pub struct Settings {
    /// `--concurrent-node-syncs`.
    pub workers: u16,
    /// `--node-status-update-frequency`.
    pub status_update_every: Duration,
    /// `--concurrent-node-status-updates` (resolved: never 0).
    pub status_update_workers: usize,
}

struct Context<C> {
    api: Api<Node>,
    /// The shared informer's cache: init builds each write from it.
    nodes: Store<Node>,
    cloud: Arc<C>,
    recorder: Recorder,
    metrics: Arc<Metrics>,
    queue: Queue,
    limiter: ControllerRateLimiter,
    /// The resourceVersion each node had once we initialized it. A cached copy older than that is stale (the
    /// watch has not delivered our update yet) and must not cost a second cloud call.
    written: Mutex<HashMap<String, u64>>,
}

/// Run until the process ends: `nodes` is the shared cache, `changes` the names of Nodes added or changed
/// (see [`crate::client_go::informer::NodeInformer`]).
pub async fn run<C: Cloud>(
    client: kube::Client,
    cloud: Arc<C>,
    metrics: Arc<Metrics>,
    settings: Settings,
    nodes: Store<Node>,
    synced: Synced,
    changes: impl Stream<Item = String> + Send + 'static,
) {
    let api = Api::<Node>::all(client.clone());
    let ctx = Arc::new(Context {
        api,
        nodes: nodes.clone(),
        cloud,
        recorder: Recorder::new(client, COMPONENT),
        queue: metrics.queue(QUEUE),
        metrics,
        limiter: ControllerRateLimiter::default(),
        written: Mutex::default(),
    });
    tokio::join!(
        syncs(ctx.clone(), nodes.clone(), changes, settings.workers),
        refresh_addresses(nodes, synced, ctx, settings)
    );
}

/// The syncs: each name in `changes` is synced at once, whatever retry it waits for, as upstream's queue `Add`s
/// a Node on every add and update (`controllers/node/node_controller.go:L148-151`); a failed sync comes back
/// after the rate limiter's delay unless a change brings it sooner.
async fn syncs<C: Cloud>(
    ctx: Arc<Context<C>>,
    nodes: Store<Node>,
    changes: impl Stream<Item = String> + Send + 'static,
    workers: u16,
) {
    let queue = ctx.queue.clone();
    let requests = changes.map(move |name| {
        queue.add(&name);
        Ok::<_, Infallible>(ObjectRef::<Node>::new(&name))
    });
    let config = controller::Config::default().concurrency(workers);
    applier(
        |node: Arc<Node>, ctx: Arc<Context<C>>| {
            let work = ctx.queue.start(&node.name_any());
            async move {
                let result = reconcile(node, ctx).await;
                drop(work);
                result
            }
            .boxed()
        },
        error_policy,
        ctx,
        nodes,
        requests,
        config,
    )
    .for_each(|res| async move {
        if let Err(e) = res {
            tracing::debug!(error = %e, "node sync");
        }
    })
    .await;
}

async fn reconcile<C: Cloud>(node: Arc<Node>, ctx: Arc<Context<C>>) -> Result<Action, Error> {
    let name = node.name_any();
    if !has_taint(&node, UNINITIALIZED_TAINT) {
        // Initialized: only the label reconcile, no cloud call.
        ctx.written.lock().unwrap_or_else(|p| p.into_inner()).remove(&name);
        let fix = labels_to_reconcile(&node);
        if !fix.is_empty() {
            let patch = Patch::Strategic(serde_json::json!({"metadata": {"labels": fix}}));
            ctx.api.patch(&name, &PatchParams::default(), &patch).await?;
        }
        ctx.limiter.forget(&name);
        return Ok(Action::await_change());
    }
    if ctx.written.lock().unwrap_or_else(|p| p.into_inner()).get(&name).is_some_and(|w| version(&node) < *w) {
        return Ok(Action::await_change());
    }
    let md =
        ctx.cloud.instance_metadata(&node).await.map_err(|source| Error::Metadata { node: name.clone(), source })?;
    let has_provider_id = node.spec.as_ref().and_then(|s| s.provider_id.as_deref()).is_some_and(|p| !p.is_empty());
    if md.provider_id.is_empty() && !has_provider_id {
        return Err(Error::NoProviderId(name));
    }
    // The kubelet's provided-node-ip must be one of the cloud's addresses, or the node stays tainted — also when
    // the cloud lists none (docs/upstream-ccm.md, trap 1).
    let node_ip = |reason| Error::NodeIp { node: name.clone(), reason };
    provided_ips_first(&node, md.addresses.clone()).map_err(node_ip)?;
    let addresses = merge_addresses(&node, &md.addresses).map_err(node_ip)?;
    let updated = initialize(&ctx.api, &ctx.nodes, &name, &md).await?;
    ctx.written.lock().unwrap_or_else(|p| p.into_inner()).insert(name.clone(), version(&updated));
    ctx.metrics.taint_removal_delay.observe(&[], since_creation(&updated));
    update_addresses(&ctx.api, &updated, &addresses).await?;
    ctx.recorder.publish(node_ref(&updated), EventType::Normal, "Synced", "Node synced successfully".into());
    ctx.metrics.initial_node_sync_delay.observe(&[], since_creation(&updated));
    tracing::info!(node = %name, provider_id = %md.provider_id, "node initialized");
    ctx.limiter.forget(&name);
    Ok(Action::await_change())
}

fn since_creation(node: &Node) -> f64 {
    node.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| Timestamp::now().duration_since(t.0).as_secs_f64().max(0.0))
        .unwrap_or(0.0)
}

/// providerID (set once), the label set, the taint removed: one full update of the Node as the cache has it,
/// with its resourceVersion, retried on conflict (upstream: `RetryOnConflict(UpdateNodeSpecBackoff)`). Every
/// attempt re-reads the cache, not the API, as upstream's does (docs/upstream-ccm.md, trap 19): a retry waits
/// for the watch to deliver the newer Node. Where the cache still holds the version that just lost, the attempt
/// is spent without the write: it carries the same precondition and would lose again (upstream makes it).
async fn initialize(api: &Api<Node>, cache: &Store<Node>, name: &str, md: &InstanceMetadata) -> Result<Node, Error> {
    // The resourceVersion whose write lost, and how.
    let mut lost: Option<(Option<String>, kube::Error)> = None;
    let mut attempt = 1;
    loop {
        let Some(current) = cache.get(&ObjectRef::new(name)) else {
            return Err(Error::Gone(name.to_string()));
        };
        let last = attempt == UPDATE_TRIES;
        match lost.take() {
            Some((version, conflict)) if version == current.metadata.resource_version => {
                if last {
                    return Err(conflict.into());
                }
                lost = Some((version, conflict));
            }
            _ => match api.replace(name, &PostParams::default(), &initialized(&current, md)).await {
                Ok(updated) => return Ok(updated),
                Err(kube::Error::Api(s)) if s.is_conflict() && !last => {
                    lost = Some((current.metadata.resource_version.clone(), kube::Error::Api(s)));
                }
                Err(e) => return Err(e.into()),
            },
        }
        attempt += 1;
        tokio::time::sleep(UPDATE_BACKOFF.mul_f64(1.0 + rand::random::<f64>())).await;
    }
}

/// `current` as init leaves it: providerID (unless one is set), the init labels, the uninitialized taint gone.
fn initialized(current: &Node, md: &InstanceMetadata) -> Node {
    let mut n = current.clone();
    let spec = n.spec.get_or_insert_with(Default::default);
    if spec.provider_id.as_deref().unwrap_or_default().is_empty() && !md.provider_id.is_empty() {
        spec.provider_id = Some(md.provider_id.clone());
    }
    if let Some(taints) = spec.taints.as_mut() {
        taints.retain(|t| t.key != UNINITIALIZED_TAINT);
    }
    n.metadata.labels.get_or_insert_with(Default::default).extend(init_labels(md));
    n
}

/// Write the addresses if they changed, replacing the list (`$patch: replace`) as upstream does.
async fn update_addresses(api: &Api<Node>, node: &Node, new: &[NodeAddress]) -> Result<(), kube::Error> {
    let old = node.status.as_ref().and_then(|s| s.addresses.as_deref()).unwrap_or_default();
    if new.is_empty() || !addresses_changed(old, new) {
        return Ok(());
    }
    let mut list: Vec<serde_json::Value> = Vec::new();
    if !old.is_empty() {
        list.push(serde_json::json!({"$patch": "replace"}));
    }
    list.extend(new.iter().map(|a| serde_json::json!({"type": a.type_, "address": a.address})));
    let patch = serde_json::json!({"status": {"addresses": list}});
    api.patch_status(&node.name_any(), &PatchParams::default(), &Patch::Strategic(patch)).await?;
    Ok(())
}

fn error_policy<C: Cloud>(node: Arc<Node>, err: &Error, ctx: Arc<Context<C>>) -> Action {
    let name = node.name_any();
    let delay = ctx.limiter.when(&name);
    ctx.queue.retry();
    tracing::warn!(node = %name, error = %err, retry_in = ?delay, "node sync failed");
    Action::requeue(delay)
}

/// Upstream `UpdateNodeStatus`: at start and then a period after each pass, refresh initialized nodes'
/// addresses from the cloud. Errors are logged per node and retried only at the next pass.
async fn refresh_addresses<C: Cloud>(store: Store<Node>, synced: Synced, ctx: Arc<Context<C>>, settings: Settings) {
    if !synced.wait().await {
        return;
    }
    loop {
        let nodes = store.state().into_iter().filter(|n| !has_taint(n, UNINITIALIZED_TAINT));
        futures::stream::iter(nodes)
            .for_each_concurrent(settings.status_update_workers, |node| {
                let ctx = ctx.clone();
                async move {
                    let result = match ctx.cloud.instance_metadata(&node).await {
                        Ok(md) => match merge_addresses(&node, &md.addresses) {
                            Ok(addrs) => update_addresses(&ctx.api, &node, &addrs).await.map_err(|e| e.to_string()),
                            Err(e) => Err(e),
                        },
                        Err(e) => Err(e.to_string()),
                    };
                    if let Err(e) = result {
                        tracing::warn!(node = %node.name_any(), error = %e, "address refresh failed; next try at the next period");
                    }
                }
            })
            .await;
        tokio::time::sleep(settings.status_update_every).await;
    }
}

#[cfg(test)]
mod tests {
    //! `syncNode`, table-driven as upstream's `Test_syncNode`: a Node in, the cloud's instances in → the cloud
    //! calls, the API requests (with the fields that matter of their bodies), the events and the retry.

    use super::*;
    use crate::client_go::fake_api::{FakeApi, assert_contains, merged, settle};
    use crate::cloud::in_memory::{Call, InMemoryCloud, Instance, Op};
    use crate::nodes::PROVIDED_NODE_IP;
    use serde_json::{Value, json};

    const PID: &str = "fakecloud://local-1a/i-1";

    /// `n1`, as the kubelet registers it: tainted, with its Hostname address.
    fn registered(extra: Value) -> Value {
        merged(
            json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": "n1", "uid": "u1", "resourceVersion": "7"},
                "spec": {"taints": [{"key": UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}]},
                "status": {"addresses": [{"type": "Hostname", "address": "n1"}]}}),
            extra,
        )
    }

    fn cloud() -> InMemoryCloud {
        InMemoryCloud::default().with_instance(Instance::running("i-1", "n1", "10.0.0.5"))
    }

    fn labels(zone: &str) -> Value {
        json!({
            "node.kubernetes.io/instance-type": "fc.small", "beta.kubernetes.io/instance-type": "fc.small",
            "topology.kubernetes.io/zone": zone, "failure-domain.beta.kubernetes.io/zone": zone,
            "topology.kubernetes.io/region": "local-1", "failure-domain.beta.kubernetes.io/region": "local-1",
        })
    }

    /// How long the watch takes to deliver the next copy of a Node: longer than one retry's backoff.
    const WATCH_LAG: Duration = Duration::from_millis(300);

    enum Outcome {
        Done,
        /// The sync failed with an error that says this, and is retried after the queue's delay.
        Retry(&'static str, Duration),
    }

    struct Case {
        name: &'static str,
        node: Value,
        /// The informer's copies of the Node: the first when init writes (none: the Node as synced), each next one
        /// delivered by the watch [`WATCH_LAG`] after the one before.
        cache: Vec<Value>,
        cloud: InMemoryCloud,
        api: FakeApi,
        calls: Vec<Call>,
        /// Every API request but events: `"METHOD path"` and what its body must contain.
        requests: Vec<(&'static str, Value)>,
        events: Vec<&'static str>,
        outcome: Outcome,
    }

    async fn check(c: Case) {
        let node: Node = serde_json::from_value(c.node.clone()).unwrap();
        let (nodes, mut writer) = kube::runtime::reflector::store::<Node>();
        let mut copies = c.cache.into_iter();
        let mut deliver = move |copy: Value| {
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(serde_json::from_value(copy).unwrap()));
        };
        deliver(copies.next().unwrap_or_else(|| c.node.clone()));
        tokio::spawn(async move {
            for copy in copies {
                tokio::time::sleep(WATCH_LAG).await;
                deliver(copy);
            }
        });
        let api = c.api.with(c.node);
        let client = api.client();
        let metrics = Arc::new(Metrics::default());
        let ctx = Arc::new(Context {
            api: Api::all(client.clone()),
            nodes,
            cloud: Arc::new(c.cloud.clone()),
            recorder: Recorder::new(client, COMPONENT),
            queue: metrics.queue(QUEUE),
            metrics,
            limiter: ControllerRateLimiter::default(),
            written: Mutex::default(),
        });
        let node = Arc::new(node);
        let result = reconcile(node.clone(), ctx.clone()).await;
        settle().await;
        let name = c.name;
        match (&result, c.outcome) {
            (Ok(action), Outcome::Done) => assert_eq!(*action, Action::await_change(), "{name}"),
            (Err(e), Outcome::Retry(says, after)) => {
                assert!(e.to_string().contains(says), "{name}: {e}");
                assert_eq!(error_policy(node, e, ctx), Action::requeue(after), "{name}");
            }
            (r, _) => panic!("{name}: unexpected {r:?}"),
        }
        assert_eq!(c.cloud.calls(), c.calls, "{name}: cloud calls");
        let sent = api.requests();
        let calls: Vec<&str> = sent.iter().map(|s| s.call.as_str()).collect();
        let want: Vec<&str> = c.requests.iter().map(|(call, _)| *call).collect();
        assert_eq!(calls, want, "{name}: API requests");
        for (s, (_, body)) in sent.iter().zip(&c.requests) {
            assert_contains(&s.body, body, &format!("{name}: {}", s.call));
            if s.call.starts_with("PATCH") {
                assert_eq!(s.patch, "strategic", "{name}: {}", s.call);
            }
        }
        assert_eq!(api.events(), c.events, "{name}: events");
    }

    #[tokio::test(start_paused = true)]
    async fn sync_node() {
        let first_try = Duration::from_millis(5);
        let cases = [
            Case {
                name: "initialized: providerID, labels GA and beta (trap 3), taint removed, addresses, Synced",
                node: registered(json!({"spec": {"taints": [
                    {"key": UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"},
                    {"key": "team", "value": "a", "effect": "NoSchedule"}]}})),
                cache: vec![],
                cloud: cloud(),
                api: FakeApi::default(),
                calls: vec![Call::InstanceMetadata("n1".into())],
                requests: vec![
                    // One PUT carrying the resourceVersion read (trap 19); only the uninitialized taint goes.
                    (
                        "PUT /api/v1/nodes/n1",
                        json!({"metadata": {"resourceVersion": "7", "labels": labels("local-1a")},
                            "spec": {"providerID": PID, "taints": [{"key": "team"}]}}),
                    ),
                    // The whole list replaced; the kubelet's Hostname kept after the cloud's addresses (trap 7).
                    (
                        "PATCH /api/v1/nodes/n1/status",
                        json!({"status": {"addresses": [{"$patch": "replace"},
                            {"type": "InternalIP", "address": "10.0.0.5"}, {"type": "Hostname", "address": "n1"}]}}),
                    ),
                ],
                events: vec!["Normal Synced"],
                outcome: Outcome::Done,
            },
            Case {
                name: "the uninitialized taint is matched by key only (trap 2)",
                node: registered(
                    json!({"spec": {"taints": [{"key": UNINITIALIZED_TAINT, "value": "x", "effect": "NoExecute"}]}}),
                ),
                cache: vec![],
                cloud: cloud(),
                api: FakeApi::default(),
                calls: vec![Call::InstanceMetadata("n1".into())],
                requests: vec![
                    ("PUT /api/v1/nodes/n1", json!({"spec": {"taints": []}})),
                    ("PATCH /api/v1/nodes/n1/status", json!({})),
                ],
                events: vec!["Normal Synced"],
                outcome: Outcome::Done,
            },
            Case {
                name: "a providerID already set is kept (trap 6)",
                node: registered(json!({"spec": {"providerID": "fakecloud://elsewhere/i-1"}})),
                cache: vec![],
                cloud: cloud(),
                api: FakeApi::default(),
                calls: vec![Call::InstanceMetadata("n1".into())],
                requests: vec![
                    ("PUT /api/v1/nodes/n1", json!({"spec": {"providerID": "fakecloud://elsewhere/i-1"}})),
                    ("PATCH /api/v1/nodes/n1/status", json!({})),
                ],
                events: vec!["Normal Synced"],
                outcome: Outcome::Done,
            },
            Case {
                name: "the cloud lists no address: initialized, no address write",
                node: registered(json!({})),
                cache: vec![],
                cloud: InMemoryCloud::default()
                    .with_instance(Instance { addresses: Vec::new(), ..Instance::running("i-1", "n1", "") }),
                api: FakeApi::default(),
                calls: vec![Call::InstanceMetadata("n1".into())],
                requests: vec![("PUT /api/v1/nodes/n1", json!({"spec": {"providerID": PID, "taints": []}}))],
                events: vec!["Normal Synced"],
                outcome: Outcome::Done,
            },
            Case {
                name: "instance not found yet: stays tainted, retried with the queue's backoff (trap 4)",
                node: registered(json!({})),
                cache: vec![],
                cloud: InMemoryCloud::default(),
                api: FakeApi::default(),
                calls: vec![Call::InstanceMetadata("n1".into())],
                requests: vec![],
                events: vec![],
                outcome: Outcome::Retry("not found: instance not found for node n1", first_try),
            },
            Case {
                name: "cloud throttled: retried with the queue's backoff, not the cloud's delay",
                node: registered(json!({})),
                cache: vec![],
                cloud: cloud().failing(
                    Op::InstanceMetadata,
                    CloudError::RetryAfter { after: Duration::from_secs(30), message: "slow down".into() },
                ),
                api: FakeApi::default(),
                calls: vec![Call::InstanceMetadata("n1".into())],
                requests: vec![],
                events: vec![],
                outcome: Outcome::Retry("failed to get instance metadata for node n1", first_try),
            },
            Case {
                name: "a provided node IP the cloud does not list: stays tainted (trap 1)",
                node: registered(json!({"metadata": {"annotations": {PROVIDED_NODE_IP: "10.9.9.9"}}})),
                cache: vec![],
                cloud: cloud(),
                api: FakeApi::default(),
                calls: vec![Call::InstanceMetadata("n1".into())],
                requests: vec![],
                events: vec![],
                outcome: Outcome::Retry("provided node ip for node \"n1\" is not valid", first_try),
            },
            Case {
                name: "each write is built from the cache, which moved on since the sync began; a conflict re-reads \
                       the cache, not the API (trap 19), and writes again once the watch has delivered a newer Node",
                node: registered(json!({})),
                cache: vec![
                    registered(json!({"metadata": {"resourceVersion": "8", "labels": {"team": "a"}}})),
                    registered(json!({"metadata": {"resourceVersion": "9", "labels": {"team": "b"}}})),
                ],
                cloud: cloud(),
                api: FakeApi::default().failing("PUT /api/v1/nodes/n1", 409, 1),
                calls: vec![Call::InstanceMetadata("n1".into())],
                requests: vec![
                    (
                        "PUT /api/v1/nodes/n1",
                        json!({"metadata": {"resourceVersion": "8", "labels": {"team": "a"}},
                            "spec": {"providerID": PID, "taints": []}}),
                    ),
                    (
                        "PUT /api/v1/nodes/n1",
                        json!({"metadata": {"resourceVersion": "9", "labels": {"team": "b"}},
                            "spec": {"providerID": PID, "taints": []}}),
                    ),
                    ("PATCH /api/v1/nodes/n1/status", json!({})),
                ],
                events: vec!["Normal Synced"],
                outcome: Outcome::Done,
            },
            Case {
                name: "a conflict and a cache that never catches up: the write that would carry the same \
                       resourceVersion again is not made; after upstream's 20 tries the conflict is the error",
                node: registered(json!({})),
                cache: vec![registered(json!({"metadata": {"resourceVersion": "8"}}))],
                cloud: cloud(),
                api: FakeApi::default().failing("PUT /api/v1/nodes/n1", 409, 1),
                calls: vec![Call::InstanceMetadata("n1".into())],
                requests: vec![("PUT /api/v1/nodes/n1", json!({"metadata": {"resourceVersion": "8"}}))],
                events: vec![],
                outcome: Outcome::Retry("fake: Conflict", first_try),
            },
            Case {
                name: "initialized: only the GA labels follow the beta ones, no cloud call (trap 3)",
                node: registered(json!({"spec": {"taints": null}, "metadata": {"labels": {
                    "failure-domain.beta.kubernetes.io/zone": "z1", "topology.kubernetes.io/zone": "z2",
                    "topology.kubernetes.io/region": "r1"}}})),
                cache: vec![],
                cloud: cloud(),
                api: FakeApi::default(),
                calls: vec![],
                requests: vec![(
                    "PATCH /api/v1/nodes/n1",
                    json!({"metadata": {"labels": {"topology.kubernetes.io/zone": "z1",
                        "topology.kubernetes.io/region": null}}}),
                )],
                events: vec![],
                outcome: Outcome::Done,
            },
            Case {
                name: "initialized and consistent: no cloud call, no write",
                node: registered(json!({"spec": {"taints": null}, "metadata": {"labels": labels("local-1a")}})),
                cache: vec![],
                cloud: cloud(),
                api: FakeApi::default(),
                calls: vec![],
                requests: vec![],
                events: vec![],
                outcome: Outcome::Done,
            },
        ];
        for c in cases {
            check(c).await;
        }
    }

    /// Eventual consistency on create (issue #47): a Node registered before the cloud shows its instance fails
    /// its init again and again, and its retry backs off far (here to the limiter's 1,000 s). Once the cloud
    /// shows the instance, the Node's next change (a status update, the kubelet registering it again) syncs it
    /// at once, as upstream's queue `Add`s a Node on every add and update (`node_controller.go:L148-151`), not
    /// when the backoff ends.
    #[tokio::test(start_paused = true)]
    async fn a_node_change_retries_an_init_that_backed_off_at_once() {
        use kube::runtime::watcher::Event;
        let cloud = InMemoryCloud::default();
        let api = FakeApi::default().with(registered(json!({})));
        let client = api.client();
        let (nodes, mut writer) = kube::runtime::reflector::store::<Node>();
        let copy = |rv: &str| -> Node {
            serde_json::from_value(registered(json!({"metadata": {"resourceVersion": rv}}))).unwrap()
        };
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitApply(copy("7")));
        writer.apply_watcher_event(&Event::InitDone);
        let metrics = Arc::new(Metrics::default());
        let ctx = Arc::new(Context {
            api: Api::all(client.clone()),
            nodes: nodes.clone(),
            cloud: Arc::new(cloud.clone()),
            recorder: Recorder::new(client, COMPONENT),
            queue: metrics.queue(QUEUE),
            metrics,
            limiter: ControllerRateLimiter::default(),
            written: Mutex::default(),
        });
        // The failures of the lag so far: the next retry is 1,000 s away.
        for _ in 0..20 {
            ctx.limiter.when("n1");
        }
        let (changes, rx) = futures::channel::mpsc::unbounded();
        tokio::spawn(syncs(ctx, nodes, rx, 1));
        changes.unbounded_send("n1".to_string()).unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(cloud.calls(), [Call::InstanceMetadata("n1".into())], "tried: not found yet");

        let _ = cloud.clone().with_instance(Instance::running("i-1", "n1", "10.0.0.5"));
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(cloud.calls().len(), 1, "the instance showing wakes nothing (nor does it upstream)");
        writer.apply_watcher_event(&Event::Apply(copy("8")));
        changes.unbounded_send("n1".to_string()).unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        settle().await;
        assert_eq!(cloud.calls().len(), 2, "the change synced it at once");
        let calls: Vec<String> = api.requests().into_iter().map(|r| r.call).collect();
        assert!(calls.iter().any(|c| c == "PUT /api/v1/nodes/n1"), "initialized: {calls:?}");
    }
}

//! The service controller (upstream `controllers/service/controller.go`): a cloud load balancer for every
//! `type: LoadBalancer` Service without a `loadBalancerClass`, and its EXTERNAL-IP.
//!
//! - Ensure: `EnsuringLoadBalancer`, the cleanup finalizer added *before* the cloud call, the node set, the
//!   cloud's `EnsureLoadBalancer`, `EnsuredLoadBalancer`, then the ingress exactly as the cloud returned it.
//! - Delete (the Service is deleted or no longer a LoadBalancer): the load balancer deleted if it exists, the
//!   finalizer removed, `DeletedLoadBalancer` (even when none existed), the ingress cleared.
//! - Errors: `SyncLoadBalancerFailed`; a cloud `Retry-After` requeues after exactly that delay, anything else
//!   backs off 5 s → 300 s per Service.
//! - Nodes: a node added, deleted, or whose exclusion or providerID changed re-computes the stable node set;
//!   each load balancer whose set changed (by name → providerID) gets one `UpdateLoadBalancer`.
//!
//! Healthy load balancers are not re-ensured periodically (upstream's resync compares equal objects); a
//! restart re-ensures each once.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::core::v1::{LoadBalancerStatus, Node, ObjectReference, Service};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{self, Action, applier};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc;

use crate::client_go::events::{EventType, Recorder};
use crate::client_go::informer::Synced;
use crate::client_go::metrics::{Metrics, Queue};
use crate::client_go::ratelimit::ItemBackoff;
use crate::cloud::load_balancer::parse_bool;
use crate::cloud::{Cloud, CloudError};
use crate::nodes::has_taint;

pub const COMPONENT: &str = "service-controller";
/// Upstream's queue name, the `name` label of the `workqueue_*` metrics.
pub const QUEUE: &str = "service";
pub const FINALIZER: &str = "service.kubernetes.io/load-balancer-cleanup";
pub const EXCLUDE_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
pub const CLUSTER_AUTOSCALER_TAINT: &str = "ToBeDeletedByClusterAutoscaler";
/// Upstream's `minRetryDelay` and `maxRetryDelay`.
const MIN_RETRY: Duration = Duration::from_secs(5);
const MAX_RETRY: Duration = Duration::from_secs(300);
/// Node names named in an `UpdateLoadBalancerFailed` event, at most.
const NODE_NAMES_IN_EVENT: usize = 20;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to check if load balancer exists before cleanup: {0}")]
    CheckBeforeCleanup(CloudError),
    #[error("failed to delete load balancer: {0}")]
    Delete(CloudError),
    #[error("failed to add load balancer cleanup finalizer: {0}")]
    AddFinalizer(kube::Error),
    #[error("failed to remove load balancer cleanup finalizer: {0}")]
    RemoveFinalizer(kube::Error),
    #[error("failed to ensure load balancer: {0}")]
    Ensure(CloudError),
    #[error("failed to update load balancer status: {0}")]
    Status(kube::Error),
}

impl Error {
    /// The delay the cloud asked for (upstream's `api.RetryError`), if any.
    fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::CheckBeforeCleanup(CloudError::RetryAfter { after, .. })
            | Self::Delete(CloudError::RetryAfter { after, .. })
            | Self::Ensure(CloudError::RetryAfter { after, .. }) => Some(*after),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Settings {
    /// `--cluster-name`, passed to the cloud.
    pub cluster_name: String,
    /// `--concurrent-service-syncs`.
    pub workers: u16,
}

/// A node set as the load balancer sees it: name → providerID.
type NodeSet = BTreeMap<String, String>;

struct Context<C> {
    client: kube::Client,
    cloud: Arc<C>,
    recorder: Recorder,
    queue: Queue,
    backoff: ItemBackoff,
    settings: Settings,
    nodes: Store<Node>,
    /// Services synced at least once (upstream's service cache), with the node set their load balancer was
    /// last given (`lastSyncedNodes`), stored before each cloud call.
    synced: Mutex<LastSynced>,
}

/// The node set each Service's load balancer was last given. Services given the same set share one copy, as
/// upstream's share the Node objects: a set of 5,000 Nodes takes some 0.8 MB, and a copy per Service was most
/// of fakecloud-ccm's memory with 1,000 Services on 5,000 Nodes (BENCHMARKS.md).
#[derive(Default)]
struct LastSynced {
    by_service: HashMap<ObjectRef<Service>, Arc<NodeSet>>,
    /// The set stored last: the one the next Service is most likely given too.
    latest: Arc<NodeSet>,
}

impl<C> Context<C> {
    fn event(&self, svc: &Service, type_: EventType, reason: &'static str, message: impl Into<String>) {
        self.recorder.publish(service_ref(svc), type_, reason, message.into());
    }

    fn remember(&self, key: ObjectRef<Service>, set: Arc<NodeSet>) {
        let mut synced = self.synced.lock().unwrap_or_else(|p| p.into_inner());
        let shared = if Arc::ptr_eq(&synced.latest, &set) || *synced.latest == *set {
            synced.latest.clone()
        } else {
            synced.latest = set.clone();
            set
        };
        synced.by_service.insert(key, shared);
    }

    fn forget(&self, key: &ObjectRef<Service>) {
        self.synced.lock().unwrap_or_else(|p| p.into_inner()).by_service.remove(key);
    }
}

/// `spec.type == LoadBalancer` and no `loadBalancerClass` (any class opts out).
pub fn wants_load_balancer(svc: &Service) -> bool {
    svc.spec.as_ref().is_some_and(|s| s.type_.as_deref() == Some("LoadBalancer") && s.load_balancer_class.is_none())
}

fn has_finalizer(svc: &Service) -> bool {
    svc.metadata.finalizers.as_deref().unwrap_or_default().iter().any(|f| f == FINALIZER)
}

/// The finalizer is there and the Service is being deleted or no longer a LoadBalancer. The class is not
/// looked at (docs/upstream-ccm.md, trap 11).
pub fn needs_cleanup(svc: &Service) -> bool {
    let is_lb = svc.spec.as_ref().is_some_and(|s| s.type_.as_deref() == Some("LoadBalancer"));
    has_finalizer(svc) && (svc.metadata.deletion_timestamp.is_some() || !is_lb)
}

/// Upstream's `needsUpdate`: the changes that matter to the load balancer. Labels, the selector and the
/// status do not.
pub fn needs_update(old: &Service, new: &Service) -> bool {
    if !wants_load_balancer(old) && !wants_load_balancer(new) {
        return false;
    }
    if wants_load_balancer(old) != wants_load_balancer(new) {
        return true;
    }
    let (o, n) = (old.spec.clone().unwrap_or_default(), new.spec.clone().unwrap_or_default());
    let families = |s: &k8s_openapi::api::core::v1::ServiceSpec| s.ip_families.as_ref().map_or(0, Vec::len);
    o.load_balancer_source_ranges != n.load_balancer_source_ranges
        || o.ports != n.ports
        || o.session_affinity != n.session_affinity
        || o.session_affinity_config != n.session_affinity_config
        || o.load_balancer_ip != n.load_balancer_ip
        || o.external_ips.as_deref().unwrap_or_default() != n.external_ips.as_deref().unwrap_or_default()
        || old.metadata.annotations != new.metadata.annotations
        || old.metadata.uid != new.metadata.uid
        || o.external_traffic_policy != n.external_traffic_policy
        || o.health_check_node_port != n.health_check_node_port
        || families(&o) != families(&n)
}

/// Upstream's `nodeIncludedPredicate`: the exclusion label absent, or a value Go parses as false. Anything
/// else, `""` and `"yes"` included, excludes the node (docs/upstream-ccm.md, trap 8).
fn included(node: &Node) -> bool {
    match node.metadata.labels.as_ref().and_then(|l| l.get(EXCLUDE_LABEL)) {
        None => true,
        Some(v) => parse_bool(v) == Some(false),
    }
}

/// `stableNodeSetPredicates`: not being deleted, included, not being removed by the cluster autoscaler.
/// Readiness does not count (docs/upstream-ccm.md, trap 8).
pub fn in_node_set(node: &Node) -> bool {
    node.metadata.deletion_timestamp.is_none() && included(node) && !has_taint(node, CLUSTER_AUTOSCALER_TAINT)
}

fn provider_id(node: &Node) -> String {
    node.spec.as_ref().and_then(|s| s.provider_id.clone()).unwrap_or_default()
}

fn node_set(nodes: &[Arc<Node>]) -> NodeSet {
    nodes.iter().map(|n| (n.name_any(), provider_id(n))).collect()
}

fn stable_nodes(store: &Store<Node>) -> Vec<Arc<Node>> {
    let mut nodes: Vec<Arc<Node>> = store.state().into_iter().filter(|n| in_node_set(n)).collect();
    nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    nodes
}

/// The node set as the node sync last saw it, kept up to date Node by Node: upstream's node handler queues a
/// node sync only when a Node joins or leaves the set or its providerID changes (`controller.go` L693-711), so
/// the heartbeats of a thousand kubelets (some 50 Node updates a second) never rebuild the set. It is also what
/// tells whether any load balancer was given another set, without walking the cache: a fleet joining one Node
/// at a time with no Service to update walked every Node per join (a quarter of the CCM's CPU at 1,000).
#[derive(Default)]
struct Members(NodeSet);

impl Members {
    /// Record the Node `name` as the cache has it now (`None`: gone); whether the set changed.
    fn update(&mut self, name: String, now: Option<&Node>) -> bool {
        match now.filter(|n| in_node_set(n)) {
            Some(n) => {
                let pid = provider_id(n);
                if self.0.get(&name) == Some(&pid) {
                    return false;
                }
                self.0.insert(name, pid);
                true
            }
            None => self.0.remove(&name).is_some(),
        }
    }
}

fn service_ref(svc: &Service) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Service".into()),
        namespace: svc.metadata.namespace.clone(),
        name: svc.metadata.name.clone(),
        uid: svc.metadata.uid.clone(),
        resource_version: svc.metadata.resource_version.clone(),
        ..Default::default()
    }
}

fn key_of(svc: &Service) -> String {
    format!("{}/{}", svc.namespace().unwrap_or_default(), svc.name_any())
}

/// Run until the process ends. `node_changes` names Nodes added, changed or deleted (the shared informer's
/// subscription with deletes); `nodes` is its cache, complete once `synced`.
pub async fn run<C: Cloud>(
    client: kube::Client,
    cloud: Arc<C>,
    metrics: Arc<Metrics>,
    settings: Settings,
    nodes: Store<Node>,
    synced: Synced,
    node_changes: impl Stream<Item = String> + Send + 'static,
) {
    // As upstream waits for its informers to sync: a load balancer is never given the empty node set of a
    // cache that has not listed yet.
    if !synced.wait().await {
        return;
    }
    let queue = metrics.queue(QUEUE);
    let workers = settings.workers;
    let ctx = Arc::new(Context {
        client: client.clone(),
        cloud,
        recorder: Recorder::new(client.clone(), COMPONENT),
        queue: queue.clone(),
        backoff: ItemBackoff::new(MIN_RETRY, MAX_RETRY),
        settings,
        nodes,
        synced: Mutex::default(),
    });
    let (store, writer) = reflector::store::<Service>();
    // Services a node sync could not update go back to the service queue for a full sync.
    let (requeue_tx, requeue_rx) = mpsc::unbounded_channel::<ObjectRef<Service>>();
    let watch = watch_services(Api::all(client), writer, queue.clone());
    let requeued = futures::stream::unfold(requeue_rx, |mut rx| async move { rx.recv().await.map(|r| (r, rx)) }).map({
        let queue = queue.clone();
        move |r| {
            queue.add(&format!("{}/{}", r.namespace.clone().unwrap_or_default(), r.name));
            Ok::<_, Infallible>(r)
        }
    });
    let requests = futures::stream::select(watch, requeued);
    let syncs = applier(
        |svc: Arc<Service>, ctx: Arc<Context<C>>| {
            let work = ctx.queue.start(&key_of(&svc));
            async move {
                let result = reconcile(svc, ctx).await;
                drop(work);
                result
            }
            .boxed()
        },
        error_policy,
        ctx.clone(),
        store.clone(),
        requests,
        controller::Config::default().concurrency(workers),
    )
    .for_each(|res| async move {
        if let Err(e) = res {
            tracing::debug!(error = %e, "service sync");
        }
    });
    tokio::join!(syncs, sync_nodes(ctx, store, node_changes, requeue_tx));
}

/// The Service watch, as upstream's informer handlers: an added Service is queued if it wants a load balancer
/// or needs cleanup; a changed one if [`needs_update`] or it needs cleanup. Deletions are driven by the
/// finalizer, so a deleted object is not queued.
fn watch_services(
    api: Api<Service>,
    writer: reflector::store::Writer<Service>,
    queue: Queue,
) -> impl Stream<Item = Result<ObjectRef<Service>, Infallible>> + Send + 'static {
    let mut seen: HashMap<ObjectRef<Service>, Service> = HashMap::new();
    reflector::reflector(writer, watcher(api, watcher::Config::default()).default_backoff()).filter_map(move |event| {
        let wanted = match event {
            Ok(watcher::Event::Apply(svc) | watcher::Event::InitApply(svc)) => {
                let r = ObjectRef::from_obj(&svc);
                let queue_it = match seen.get(&r) {
                    None => wants_load_balancer(&svc) || needs_cleanup(&svc),
                    Some(old) => needs_update(old, &svc) || needs_cleanup(&svc),
                };
                seen.insert(r.clone(), svc);
                queue_it.then_some(r)
            }
            Ok(watcher::Event::Delete(svc)) => {
                seen.remove(&ObjectRef::from_obj(&svc));
                None
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => None,
            Err(e) => {
                tracing::warn!(error = %e, "service watch failed; retrying");
                None
            }
        };
        if let Some(r) = &wanted {
            queue.add(&format!("{}/{}", r.namespace.clone().unwrap_or_default(), r.name));
        }
        futures::future::ready(wanted.map(Ok))
    })
}

async fn reconcile<C: Cloud>(svc: Arc<Service>, ctx: Arc<Context<C>>) -> Result<Action, Error> {
    let key = ObjectRef::from_obj(&*svc);
    if !wants_load_balancer(&svc) || needs_cleanup(&svc) {
        delete(&svc, &ctx).await?;
        ctx.forget(&key);
    } else {
        ensure(&svc, &ctx, key).await?;
    }
    ctx.backoff.forget(&key_of(&svc));
    Ok(Action::await_change())
}

async fn ensure<C: Cloud>(svc: &Service, ctx: &Context<C>, key: ObjectRef<Service>) -> Result<(), Error> {
    ctx.event(svc, EventType::Normal, "EnsuringLoadBalancer", "Ensuring load balancer");
    // Before the cloud call (docs/upstream-ccm.md, trap 10): a load balancer never exists without the finalizer
    // that deletes it.
    if !has_finalizer(svc) {
        let mut finalizers = svc.metadata.finalizers.clone().unwrap_or_default();
        finalizers.push(FINALIZER.to_string());
        patch_finalizers(ctx, svc, finalizers).await.map_err(Error::AddFinalizer)?;
    }
    let nodes = stable_nodes(&ctx.nodes);
    if nodes.is_empty() {
        ctx.event(svc, EventType::Warning, "UnAvailableLoadBalancer", "There are no available nodes for LoadBalancer");
    }
    ctx.remember(key, Arc::new(node_set(&nodes)));
    let status =
        ctx.cloud.ensure_load_balancer(&ctx.settings.cluster_name, svc, &nodes).await.map_err(Error::Ensure)?;
    ctx.event(svc, EventType::Normal, "EnsuredLoadBalancer", "Ensured load balancer");
    patch_ingress(ctx, svc, &status).await.map_err(Error::Status)
}

async fn delete<C: Cloud>(svc: &Service, ctx: &Context<C>) -> Result<(), Error> {
    let cluster = &ctx.settings.cluster_name;
    let exists = ctx.cloud.get_load_balancer(cluster, svc).await.map_err(Error::CheckBeforeCleanup)?.is_some();
    if exists {
        ctx.event(svc, EventType::Normal, "DeletingLoadBalancer", "Deleting load balancer");
        ctx.cloud.ensure_load_balancer_deleted(cluster, svc).await.map_err(Error::Delete)?;
    }
    // After the load balancer is gone and before the status (docs/upstream-ccm.md, trap 10).
    if has_finalizer(svc) {
        let rest: Vec<String> = svc.metadata.finalizers.iter().flatten().filter(|f| *f != FINALIZER).cloned().collect();
        match patch_finalizers(ctx, svc, rest).await {
            Ok(()) => {}
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(e) => return Err(Error::RemoveFinalizer(e)),
        }
    }
    ctx.event(svc, EventType::Normal, "DeletedLoadBalancer", "Deleted load balancer");
    match patch_ingress(ctx, svc, &LoadBalancerStatus::default()).await {
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
        r => r.map_err(Error::Status),
    }
}

/// Finalizers go through the status subresource as upstream's `PatchService` sends them: a strategic-merge
/// patch from the cached list to the wanted one, with no resourceVersion, so another controller's finalizer
/// added since our read survives (docs/upstream-ccm.md, trap 22).
async fn patch_finalizers<C>(ctx: &Context<C>, svc: &Service, finalizers: Vec<String>) -> Result<(), kube::Error> {
    let cached = svc.metadata.finalizers.as_deref().unwrap_or_default();
    let patch = serde_json::json!({"metadata": finalizers_patch(cached, &finalizers)});
    services(ctx, svc).patch_status(&svc.name_any(), &PatchParams::default(), &Patch::Strategic(patch)).await?;
    Ok(())
}

/// What apimachinery's `strategicpatch.CreateTwoWayMergePatch` makes of a change from `old` to `new` in
/// `metadata.finalizers`, a list of strings with patch strategy `merge` (`diffLists`, `diffListsOfScalars`):
/// the additions, the deletions as `$deleteFromPrimitiveList/finalizers`, the whole new list as
/// `$setElementOrder/finalizers`. An empty side is absent from the JSON (`omitempty`): from none, the list
/// itself; to none, `null`, which drops every finalizer, a concurrent one included.
fn finalizers_patch(old: &[String], new: &[String]) -> serde_json::Map<String, serde_json::Value> {
    use serde_json::Value;
    let mut patch = serde_json::Map::new();
    if old.is_empty() || new.is_empty() {
        if old != new {
            let whole = if new.is_empty() { Value::Null } else { new.into() };
            patch.insert("finalizers".into(), whole);
        }
        return patch;
    }
    // Both sorted, then walked side by side: what only `new` has is added, what only `old` has is deleted.
    let (mut o, mut n) = (old.to_vec(), new.to_vec());
    o.sort();
    n.sort();
    let (mut added, mut deleted): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    let (mut i, mut j) = (0, 0);
    loop {
        match (o.get(i), n.get(j)) {
            (None, None) => break,
            (Some(a), Some(b)) if a == b => {
                i += 1;
                j += 1;
            }
            (Some(a), Some(b)) if a < b => {
                deleted.push(a.clone());
                i += 1;
            }
            (Some(a), None) => {
                deleted.push(a.clone());
                i += 1;
            }
            (_, Some(b)) => {
                added.push(b.clone());
                j += 1;
            }
        }
    }
    added.sort_by_key(|v| new.iter().position(|x| x == v));
    deleted.dedup();
    if !deleted.is_empty() {
        patch.insert("$deleteFromPrimitiveList/finalizers".into(), deleted.clone().into());
    }
    // Go compares the old list, sorted in place by then, with the new one.
    if !deleted.is_empty() || o != new {
        patch.insert("$setElementOrder/finalizers".into(), new.into());
    }
    if !added.is_empty() {
        patch.insert("finalizers".into(), added.into());
    }
    patch
}

/// The ingress exactly as the cloud returned it (no invented `ipMode`), written only when it differs, order
/// included (docs/upstream-ccm.md, trap 13).
async fn patch_ingress<C>(ctx: &Context<C>, svc: &Service, status: &LoadBalancerStatus) -> Result<(), kube::Error> {
    let current = svc.status.as_ref().and_then(|s| s.load_balancer.as_ref()).and_then(|l| l.ingress.clone());
    if current.unwrap_or_default() == status.ingress.clone().unwrap_or_default() {
        return Ok(());
    }
    let ingress = status.ingress.clone().filter(|i| !i.is_empty());
    let patch = serde_json::json!({"status": {"loadBalancer": {"ingress": ingress}}});
    services(ctx, svc).patch_status(&svc.name_any(), &PatchParams::default(), &Patch::Merge(patch)).await?;
    Ok(())
}

fn services<C>(ctx: &Context<C>, svc: &Service) -> Api<Service> {
    Api::namespaced(ctx.client.clone(), &svc.namespace().unwrap_or_default())
}

fn error_policy<C: Cloud>(svc: Arc<Service>, err: &Error, ctx: Arc<Context<C>>) -> Action {
    let key = key_of(&svc);
    ctx.event(&svc, EventType::Warning, "SyncLoadBalancerFailed", format!("Error syncing load balancer: {err}"));
    let delay = err.retry_after().unwrap_or_else(|| ctx.backoff.failed(&key));
    ctx.queue.retry();
    tracing::warn!(service = %key, error = %err, retry_in = ?delay, "service sync failed");
    Action::requeue(delay)
}

/// Upstream's node sync: whenever Nodes changed, the stable node set is computed once, and every Service
/// synced before whose load balancer was given another set gets `UpdateLoadBalancer`. Heartbeats change
/// nothing in the set, so they cost no cloud call (docs/upstream-ccm.md, trap 9).
async fn sync_nodes<C: Cloud>(
    ctx: Arc<Context<C>>,
    services: Store<Service>,
    node_changes: impl Stream<Item = String> + Send + 'static,
    requeue: mpsc::UnboundedSender<ObjectRef<Service>>,
) {
    let mut changes = std::pin::pin!(node_changes.ready_chunks(10_000));
    let mut members = Members::default();
    while let Some(names) = changes.next().await {
        let mut changed = false;
        for name in names {
            let now = ctx.nodes.get(&ObjectRef::new(&name));
            changed |= members.update(name, now.as_deref());
        }
        if !changed {
            continue;
        }
        if !ctx.synced.lock().unwrap_or_else(|p| p.into_inner()).by_service.values().any(|last| **last != members.0) {
            continue;
        }
        // The cache, which may be ahead of the names consumed so far, is what the load balancers get; one that
        // has its set already is left alone.
        let nodes = stable_nodes(&ctx.nodes);
        let set = Arc::new(node_set(&nodes));
        let stale: Vec<ObjectRef<Service>> = {
            let synced = ctx.synced.lock().unwrap_or_else(|p| p.into_inner());
            synced.by_service.iter().filter(|(_, last)| ***last != *set).map(|(k, _)| k.clone()).collect()
        };
        let jobs = stale.into_iter().filter_map(|key| {
            let svc = services.get(&key)?;
            wants_load_balancer(&svc).then_some((key, svc))
        });
        futures::stream::iter(jobs)
            .for_each_concurrent(usize::from(ctx.settings.workers), |(key, svc)| {
                let (ctx, nodes, set, requeue) = (&ctx, &nodes, &set, &requeue);
                async move {
                    ctx.remember(key.clone(), set.clone());
                    update_hosts(ctx, &svc, nodes, key, requeue).await;
                }
            })
            .await;
    }
}

async fn update_hosts<C: Cloud>(
    ctx: &Context<C>,
    svc: &Service,
    nodes: &[Arc<Node>],
    key: ObjectRef<Service>,
    requeue: &mpsc::UnboundedSender<ObjectRef<Service>>,
) {
    let cluster = &ctx.settings.cluster_name;
    let err = match ctx.cloud.update_load_balancer(cluster, svc, nodes).await {
        Ok(()) if nodes.is_empty() => {
            ctx.event(
                svc,
                EventType::Warning,
                "UnAvailableLoadBalancer",
                "There are no available nodes for LoadBalancer",
            );
            return;
        }
        Ok(()) => {
            ctx.event(svc, EventType::Normal, "UpdatedLoadBalancer", "Updated load balancer with new hosts");
            return;
        }
        Err(e) => e,
    };
    // A load balancer that does not exist (yet) is the service sync's business, not an update failure.
    if let Ok(None) = ctx.cloud.get_load_balancer(cluster, svc).await {
        return;
    }
    let names: Vec<String> = nodes.iter().take(NODE_NAMES_IN_EVENT).map(|n| n.name_any()).collect();
    let message = format!(
        "Error updating load balancer with new hosts {names:?} [node names limited, total number of nodes: {}], error: {err}",
        nodes.len()
    );
    ctx.event(svc, EventType::Warning, "UpdateLoadBalancerFailed", message);
    tracing::warn!(service = %key_of(svc), error = %err, "load balancer backends not updated; the service will be re-synced");
    let _ = requeue.send(key);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(v: serde_json::Value) -> Service {
        serde_json::from_value(v).unwrap()
    }

    fn node(v: serde_json::Value) -> Node {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn only_joining_leaving_or_a_new_provider_id_changes_the_node_set() {
        let mut members = Members::default();
        let mut a = node(serde_json::json!({"metadata": {"name": "a"}, "spec": {}}));
        assert!(members.update("a".into(), Some(&a)), "a new Node joins");
        assert!(!members.update("a".into(), Some(&a)), "a heartbeat changes nothing");
        a.spec.get_or_insert_default().provider_id = Some("fakecloud://local-1a/i-1".into());
        assert!(members.update("a".into(), Some(&a)), "initialized: its providerID");
        a.metadata.labels = Some([(EXCLUDE_LABEL.to_string(), "true".to_string())].into());
        assert!(members.update("a".into(), Some(&a)), "excluded: it leaves");
        assert!(!members.update("a".into(), Some(&a)), "still out");
        assert!(!members.update("a".into(), None), "deleted while out");
        let b = node(serde_json::json!({"metadata": {"name": "b"}}));
        assert!(members.update("b".into(), Some(&b)));
        assert!(members.update("b".into(), None), "deleted: it leaves");
    }

    #[test]
    fn a_class_opts_out_and_cleanup_ignores_it() {
        let lb = svc(serde_json::json!({"spec": {"type": "LoadBalancer"}}));
        let classed = svc(serde_json::json!({"spec": {"type": "LoadBalancer", "loadBalancerClass": "x/y"}}));
        assert!(wants_load_balancer(&lb));
        assert!(!wants_load_balancer(&classed));
        let deleting = svc(serde_json::json!({"metadata": {"finalizers": [FINALIZER],
            "deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"type": "LoadBalancer", "loadBalancerClass": "x/y"}}));
        assert!(needs_cleanup(&deleting), "docs/upstream-ccm.md, trap 11: the class is not looked at");
        let now_cluster_ip =
            svc(serde_json::json!({"metadata": {"finalizers": [FINALIZER]}, "spec": {"type": "ClusterIP"}}));
        assert!(needs_cleanup(&now_cluster_ip));
        assert!(!needs_cleanup(&lb));
    }

    #[test]
    fn only_what_matters_to_the_load_balancer_is_an_update() {
        let base = serde_json::json!({"metadata": {"uid": "u1", "labels": {"a": "1"}},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "nodePort": 30080}], "selector": {"app": "x"}}});
        let old = svc(base.clone());
        let with = |path: &str, v: serde_json::Value| {
            let mut j = base.clone();
            *j.pointer_mut(path).unwrap() = v;
            svc(j)
        };
        assert!(!needs_update(&old, &with("/metadata/labels", serde_json::json!({"a": "2"}))));
        assert!(!needs_update(&old, &with("/spec/selector", serde_json::json!({"app": "y"}))));
        assert!(needs_update(&old, &with("/spec/ports", serde_json::json!([{"port": 81, "nodePort": 30080}]))));
        assert!(needs_update(&old, &with("/metadata/uid", serde_json::json!("u2"))));
        assert!(needs_update(&old, &with("/spec/type", serde_json::json!("ClusterIP"))));
        let mut annotated = base.clone();
        annotated["metadata"]["annotations"] = serde_json::json!({"k": "v"});
        assert!(needs_update(&old, &svc(annotated)), "any annotation change");
        let cip = svc(serde_json::json!({"spec": {"type": "ClusterIP"}}));
        let cip2 = svc(serde_json::json!({"spec": {"type": "ClusterIP", "ports": [{"port": 1}]}}));
        assert!(!needs_update(&cip, &cip2), "neither wants a load balancer");
    }

    #[test]
    fn the_node_set_ignores_readiness_and_excludes_on_unparseable_labels() {
        let plain = node(serde_json::json!({"metadata": {"name": "a"},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]}}));
        assert!(in_node_set(&plain), "NotReady nodes stay backends");
        for (value, included) in [("false", true), ("0", true), ("true", false), ("", false), ("yes", false)] {
            let n = node(serde_json::json!({"metadata": {"name": "b", "labels": {EXCLUDE_LABEL: value}}}));
            assert_eq!(in_node_set(&n), included, "exclusion label {value:?}");
        }
        let ca = node(serde_json::json!({"metadata": {"name": "c"},
            "spec": {"taints": [{"key": CLUSTER_AUTOSCALER_TAINT, "effect": "NoSchedule"}]}}));
        assert!(!in_node_set(&ca));
        let deleting =
            node(serde_json::json!({"metadata": {"name": "d", "deletionTimestamp": "2026-01-01T00:00:00Z"}}));
        assert!(!in_node_set(&deleting));
    }

    /// Each row's patch is what apimachinery v0.37.2's `CreateTwoWayMergePatch` gives for two `v1.Service`s that
    /// differ in these finalizers only (run once with Go; docs/upstream-ccm.md, trap 22).
    #[test]
    fn finalizer_patches_are_upstreams_two_way_patch() {
        let cases = [
            (vec![], vec![FINALIZER], serde_json::json!({"finalizers": [FINALIZER]})),
            (
                vec!["other"],
                vec!["other", FINALIZER],
                serde_json::json!({"$setElementOrder/finalizers": ["other", FINALIZER], "finalizers": [FINALIZER]}),
            ),
            (
                vec!["a", "b"],
                vec!["a", "b", FINALIZER],
                serde_json::json!({"$setElementOrder/finalizers": ["a", "b", FINALIZER], "finalizers": [FINALIZER]}),
            ),
            (
                vec!["other", FINALIZER],
                vec!["other"],
                serde_json::json!({"$deleteFromPrimitiveList/finalizers": [FINALIZER],
                    "$setElementOrder/finalizers": ["other"]}),
            ),
            (
                vec![FINALIZER, "other"],
                vec!["other"],
                serde_json::json!({"$deleteFromPrimitiveList/finalizers": [FINALIZER],
                    "$setElementOrder/finalizers": ["other"]}),
            ),
            (vec![FINALIZER], vec![], serde_json::json!({"finalizers": null})),
        ];
        for (old, new, want) in cases {
            let (old, new): (Vec<String>, Vec<String>) =
                (old.iter().map(|s| s.to_string()).collect(), new.iter().map(|s| s.to_string()).collect());
            let got = serde_json::Value::Object(finalizers_patch(&old, &new));
            assert_eq!(got, want, "{old:?} -> {new:?}");
        }
    }

    #[test]
    fn retry_after_errors_keep_their_delay() {
        let e = Error::Ensure(CloudError::RetryAfter { after: Duration::from_secs(7), message: "x".into() });
        assert_eq!(e.retry_after(), Some(Duration::from_secs(7)));
        assert_eq!(Error::Ensure(CloudError::Transient("x".into())).retry_after(), None);
        let q =
            Error::Ensure(CloudError::QuotaExceeded { code: "LoadBalancerLimitExceeded".into(), message: "m".into() });
        assert!(q.to_string().contains("LoadBalancerLimitExceeded"), "{q}");
    }

    // `reconcile` and the node sync, table-driven as upstream's `TestSyncLoadBalancerIfNeeded` and
    // `TestNodesNotEqual`: a Service and Nodes in, the cloud's load balancers in → the cloud calls, the API
    // requests (finalizers and status, in order), the events, the retry.

    use crate::client_go::fake_api::{FakeApi, assert_contains, merged, settle};
    use crate::client_go::metrics::Metrics;
    use crate::cloud::in_memory::{Call, InMemoryCloud, Op};
    use kube::runtime::watcher;
    use serde_json::{Value, json};

    const KEY: &str = "default/s1";
    const STATUS: &str = "PATCH /api/v1/namespaces/default/services/s1/status";
    const OTHER: &str = "example.com/other";
    /// Another controller's finalizer, added after our cache read.
    const LATE: &str = "example.com/late";

    fn service(extra: Value) -> Value {
        merged(
            json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "s1", "namespace": "default", "uid": "u1", "resourceVersion": "5"},
                "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "nodePort": 30080}]}}),
            extra,
        )
    }

    /// Being deleted, with our finalizer after another one's, and an ingress.
    fn deleting(extra: Value) -> Value {
        let svc = service(
            json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": [OTHER, FINALIZER]},
            "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}}),
        );
        merged(svc, extra)
    }

    fn backend(name: &str, extra: Value) -> Value {
        let base = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name}, "spec": {"providerID": format!("fakecloud://local-1a/i-{name}")}});
        merged(base, extra)
    }

    fn nodes_store(nodes: &[Value]) -> Store<Node> {
        let (store, mut writer) = reflector::store::<Node>();
        for n in nodes {
            writer.apply_watcher_event(&watcher::Event::Apply(serde_json::from_value(n.clone()).unwrap()));
        }
        store
    }

    fn context(api: &FakeApi, cloud: &InMemoryCloud, nodes: &[Value]) -> Arc<Context<InMemoryCloud>> {
        let client = api.client();
        Arc::new(Context {
            client: client.clone(),
            cloud: Arc::new(cloud.clone()),
            recorder: Recorder::new(client, COMPONENT),
            queue: Arc::new(Metrics::default()).queue(QUEUE),
            backoff: ItemBackoff::new(MIN_RETRY, MAX_RETRY),
            settings: Settings { cluster_name: "kubernetes".into(), workers: 1 },
            nodes: nodes_store(nodes),
            synced: Mutex::default(),
        })
    }

    #[tokio::test]
    async fn services_given_the_same_node_set_share_one_copy() {
        let ctx = context(&FakeApi::default(), &InMemoryCloud::default(), &[]);
        let set = |names: &[&str]| -> NodeSet {
            names.iter().map(|n| (n.to_string(), format!("fakecloud://local-1a/i-{n}"))).collect()
        };
        let key = |name: &str| ObjectRef::<Service>::new(name).within("default");
        // Equal sets built apart, as two syncs build them; then another set.
        ctx.remember(key("a"), Arc::new(set(&["n1", "n2"])));
        ctx.remember(key("b"), Arc::new(set(&["n1", "n2"])));
        ctx.remember(key("c"), Arc::new(set(&["n1"])));
        let synced = ctx.synced.lock().unwrap();
        let got = |k: &str| synced.by_service[&key(k)].clone();
        assert!(Arc::ptr_eq(&got("a"), &got("b")), "equal sets are one copy");
        assert!(!Arc::ptr_eq(&got("a"), &got("c")));
        assert_eq!((&*got("a"), &*got("c")), (&set(&["n1", "n2"]), &set(&["n1"])));
    }

    fn ensure_call(nodes: &[&str]) -> Call {
        Call::EnsureLoadBalancer(KEY.into(), nodes.iter().map(|n| n.to_string()).collect())
    }

    /// Our finalizer added to the `cached` ones: upstream's two-way patch, exactly (docs/upstream-ccm.md, trap 22).
    fn add_finalizer(cached: &[&str]) -> (&'static str, Value) {
        let metadata = match cached {
            [] => json!({"finalizers": [FINALIZER]}),
            _ => json!({"$setElementOrder/finalizers": ([cached, &[FINALIZER]].concat()), "finalizers": [FINALIZER]}),
        };
        (STATUS, json!({"metadata": metadata}))
    }

    /// Our finalizer removed, `rest` left: upstream's two-way patch, exactly. Without a rest it is `null`.
    fn remove_finalizer(rest: &[&str]) -> (&'static str, Value) {
        let metadata = match rest {
            [] => json!({"finalizers": null}),
            _ => json!({"$deleteFromPrimitiveList/finalizers": [FINALIZER], "$setElementOrder/finalizers": rest}),
        };
        (STATUS, json!({"metadata": metadata}))
    }

    fn ingress(ip: Option<&str>) -> (&'static str, Value) {
        // Exactly as the cloud returned it: no ipMode invented (trap 13).
        let ingress = ip.map(|ip| json!([{"ip": ip, "ipMode": null}]));
        (STATUS, json!({"status": {"loadBalancer": {"ingress": ingress}}}))
    }

    enum Outcome {
        Done,
        /// Failed with an error that says this; requeued after exactly this delay.
        Retry(&'static str, Duration),
    }

    struct Case {
        name: &'static str,
        svc: Value,
        nodes: Vec<Value>,
        cloud: InMemoryCloud,
        api: FakeApi,
        calls: Vec<Call>,
        /// In order: `"METHOD path"` and what the body must contain.
        requests: Vec<(&'static str, Value)>,
        events: Vec<&'static str>,
        outcome: Outcome,
        /// Service key → backend names, afterwards.
        load_balancers: Vec<(&'static str, Vec<&'static str>)>,
        /// The API's finalizers afterwards, if the case is about them.
        finalizers_after: Option<Vec<&'static str>>,
    }

    async fn check(c: Case) {
        let name = c.name;
        let svc: Arc<Service> = Arc::new(serde_json::from_value(c.svc.clone()).unwrap());
        // The API's copy is the cache's unless the case stored another (a writer got there since our read).
        let api = c.api.or_with(c.svc);
        let ctx = context(&api, &c.cloud, &c.nodes);
        let result = reconcile(svc.clone(), ctx.clone()).await;
        match (&result, c.outcome) {
            (Ok(action), Outcome::Done) => assert_eq!(*action, Action::await_change(), "{name}"),
            (Err(e), Outcome::Retry(says, after)) => {
                assert!(e.to_string().contains(says), "{name}: {e}");
                assert_eq!(error_policy(svc, e, ctx.clone()), Action::requeue(after), "{name}");
            }
            (r, _) => panic!("{name}: unexpected {r:?}"),
        }
        drop(ctx);
        settle().await;
        assert_eq!(c.cloud.calls(), c.calls, "{name}: cloud calls");
        let sent = api.requests();
        let got: Vec<&str> = sent.iter().map(|s| s.call.as_str()).collect();
        let want: Vec<&str> = c.requests.iter().map(|(call, _)| *call).collect();
        assert_eq!(got, want, "{name}: API requests");
        for (s, (_, body)) in sent.iter().zip(&c.requests) {
            // Finalizers: upstream's strategic-merge patch, byte for byte as JSON; the ingress: a merge patch of
            // the same body (the list is atomic, so both types replace it).
            if body.get("metadata").is_some() {
                assert_eq!(s.body, *body, "{name}: {}", s.call);
                assert_eq!(s.patch, "strategic", "{name}: {}", s.call);
            } else {
                assert_contains(&s.body, body, &format!("{name}: {}", s.call));
                assert_eq!(s.patch, "merge", "{name}: {}", s.call);
            }
        }
        if let Some(want) = c.finalizers_after {
            let stored = api.object("/api/v1/namespaces/default/services/s1").unwrap_or_default();
            let got: Vec<String> = serde_json::from_value(stored["metadata"]["finalizers"].clone()).unwrap_or_default();
            assert_eq!(got, want, "{name}: the API's finalizers afterwards");
        }
        assert_eq!(api.events(), c.events, "{name}: events");
        for ev in api.event_bodies() {
            let about = json!({"involvedObject": {"kind": "Service", "namespace": "default", "name": "s1", "uid": "u1"},
                "source": {"component": "service-controller"}});
            assert_contains(&ev, &about, name);
            if ev["reason"] == "SyncLoadBalancerFailed" {
                let message = ev["message"].as_str().unwrap_or_default();
                assert!(message.starts_with("Error syncing load balancer: "), "{name}: {message}");
            }
        }
        let lbs: BTreeMap<String, Vec<String>> =
            c.load_balancers.iter().map(|(k, b)| (k.to_string(), b.iter().map(|n| n.to_string()).collect())).collect();
        assert_eq!(c.cloud.load_balancers(), lbs, "{name}: load balancers afterwards");
    }

    #[tokio::test(start_paused = true)]
    async fn sync_service() {
        let backoff = Duration::from_secs(5);
        let ensuring = ["Normal EnsuringLoadBalancer", "Normal EnsuredLoadBalancer"];
        let has_lb = || InMemoryCloud::default().with_load_balancer(KEY, "203.0.113.7", &["a"]);
        let cases = [
            Case {
                name: "new: finalizer added (others kept), ensured with the node set, ingress written",
                svc: service(json!({"metadata": {"finalizers": [OTHER]}})),
                nodes: vec![backend("b", json!({})), backend("a", json!({}))],
                cloud: InMemoryCloud::default(),
                api: FakeApi::default(),
                calls: vec![ensure_call(&["a", "b"])],
                requests: vec![add_finalizer(&[OTHER]), ingress(Some("203.0.113.1"))],
                events: ensuring.into(),
                outcome: Outcome::Done,
                load_balancers: vec![(KEY, vec!["a", "b"])],
                finalizers_after: Some(vec![OTHER, FINALIZER]),
            },
            Case {
                name: "a finalizer added since our read survives ours being added (trap 22)",
                svc: service(json!({"metadata": {"finalizers": [OTHER]}})),
                nodes: vec![backend("a", json!({}))],
                cloud: InMemoryCloud::default(),
                api: FakeApi::default().with(service(json!({"metadata": {"finalizers": [OTHER, LATE]}}))),
                calls: vec![ensure_call(&["a"])],
                requests: vec![add_finalizer(&[OTHER]), ingress(Some("203.0.113.1"))],
                events: ensuring.into(),
                outcome: Outcome::Done,
                load_balancers: vec![(KEY, vec!["a"])],
                finalizers_after: Some(vec![OTHER, FINALIZER, LATE]),
            },
            Case {
                name: "none cached: the patch is the list itself, and one added since our read survives (trap 22)",
                svc: service(json!({})),
                nodes: vec![backend("a", json!({}))],
                cloud: InMemoryCloud::default(),
                api: FakeApi::default().with(service(json!({"metadata": {"finalizers": [LATE]}}))),
                calls: vec![ensure_call(&["a"])],
                requests: vec![add_finalizer(&[]), ingress(Some("203.0.113.1"))],
                events: ensuring.into(),
                outcome: Outcome::Done,
                load_balancers: vec![(KEY, vec!["a"])],
                finalizers_after: Some(vec![FINALIZER, LATE]),
            },
            Case {
                name: "the finalizer cannot be added: no cloud call (trap 10)",
                svc: service(json!({})),
                nodes: vec![backend("a", json!({}))],
                cloud: InMemoryCloud::default(),
                api: FakeApi::default().failing(STATUS, 500, 1),
                calls: vec![],
                requests: vec![add_finalizer(&[])],
                events: vec!["Normal EnsuringLoadBalancer", "Warning SyncLoadBalancerFailed"],
                outcome: Outcome::Retry("failed to add load balancer cleanup finalizer", backoff),
                load_balancers: vec![],
                finalizers_after: None,
            },
            Case {
                name: "nothing changed: ensured again, nothing written (trap 13)",
                svc: service(json!({"metadata": {"finalizers": [FINALIZER]},
                    "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}})),
                nodes: vec![backend("a", json!({}))],
                cloud: has_lb(),
                api: FakeApi::default(),
                calls: vec![ensure_call(&["a"])],
                requests: vec![],
                events: ensuring.into(),
                outcome: Outcome::Done,
                load_balancers: vec![(KEY, vec!["a"])],
                finalizers_after: None,
            },
            Case {
                name: "the node set: excluded, autoscaler-tainted and deleting nodes out, NotReady in (trap 8)",
                svc: service(json!({"metadata": {"finalizers": [FINALIZER]}})),
                nodes: vec![
                    backend("a", json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}})),
                    backend("b", json!({"metadata": {"labels": {EXCLUDE_LABEL: "true"}}})),
                    backend(
                        "c",
                        json!({"spec": {"taints": [{"key": CLUSTER_AUTOSCALER_TAINT, "effect": "NoSchedule"}]}}),
                    ),
                    backend("d", json!({"metadata": {"labels": {EXCLUDE_LABEL: "false"}}})),
                    backend("e", json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}})),
                    backend("f", json!({"metadata": {"labels": {EXCLUDE_LABEL: ""}}})),
                ],
                cloud: InMemoryCloud::default(),
                api: FakeApi::default(),
                calls: vec![ensure_call(&["a", "d"])],
                requests: vec![ingress(Some("203.0.113.1"))],
                events: ensuring.into(),
                outcome: Outcome::Done,
                load_balancers: vec![(KEY, vec!["a", "d"])],
                finalizers_after: None,
            },
            Case {
                name: "no nodes: UnAvailableLoadBalancer, and the cloud is asked anyway (trap 14)",
                svc: service(json!({"metadata": {"finalizers": [FINALIZER]}})),
                nodes: vec![],
                cloud: InMemoryCloud::default(),
                api: FakeApi::default(),
                calls: vec![ensure_call(&[])],
                requests: vec![ingress(Some("203.0.113.1"))],
                events: vec![
                    "Normal EnsuringLoadBalancer",
                    "Warning UnAvailableLoadBalancer",
                    "Normal EnsuredLoadBalancer",
                ],
                outcome: Outcome::Done,
                load_balancers: vec![(KEY, vec![])],
                finalizers_after: None,
            },
            Case {
                name: "cloud throttled: SyncLoadBalancerFailed, requeued after exactly its Retry-After (trap 15)",
                svc: service(json!({})),
                nodes: vec![backend("a", json!({}))],
                cloud: InMemoryCloud::default().failing(
                    Op::EnsureLoadBalancer,
                    CloudError::RetryAfter { after: Duration::from_secs(7), message: "slow down".into() },
                ),
                api: FakeApi::default(),
                calls: vec![ensure_call(&["a"])],
                requests: vec![add_finalizer(&[])],
                events: vec!["Normal EnsuringLoadBalancer", "Warning SyncLoadBalancerFailed"],
                outcome: Outcome::Retry(
                    "failed to ensure load balancer: retry after 7s: slow down",
                    Duration::from_secs(7),
                ),
                load_balancers: vec![],
                finalizers_after: None,
            },
            Case {
                name: "quota exceeded: the quota named, backoff from 5 s (trap 15)",
                svc: service(json!({"metadata": {"finalizers": [FINALIZER]}})),
                nodes: vec![backend("a", json!({}))],
                cloud: InMemoryCloud::default().failing(
                    Op::EnsureLoadBalancer,
                    CloudError::QuotaExceeded { code: "LoadBalancerLimitExceeded".into(), message: "5 of 5".into() },
                ),
                api: FakeApi::default(),
                calls: vec![ensure_call(&["a"])],
                requests: vec![],
                events: vec!["Normal EnsuringLoadBalancer", "Warning SyncLoadBalancerFailed"],
                outcome: Outcome::Retry("quota exceeded (LoadBalancerLimitExceeded): 5 of 5", backoff),
                load_balancers: vec![],
                finalizers_after: None,
            },
            Case {
                name: "deleted: load balancer deleted, then our finalizer removed, then the ingress cleared (trap 10)",
                svc: deleting(json!({})),
                nodes: vec![backend("a", json!({}))],
                cloud: has_lb(),
                api: FakeApi::default(),
                calls: vec![Call::GetLoadBalancer(KEY.into()), Call::EnsureLoadBalancerDeleted(KEY.into())],
                requests: vec![remove_finalizer(&[OTHER]), ingress(None)],
                events: vec!["Normal DeletingLoadBalancer", "Normal DeletedLoadBalancer"],
                outcome: Outcome::Done,
                load_balancers: vec![],
                finalizers_after: Some(vec![OTHER]),
            },
            Case {
                name: "deleted: a finalizer added since our read survives ours being removed (trap 22)",
                svc: deleting(json!({})),
                nodes: vec![],
                cloud: has_lb(),
                api: FakeApi::default().with(deleting(json!({"metadata": {"finalizers": [OTHER, FINALIZER, LATE]}}))),
                calls: vec![Call::GetLoadBalancer(KEY.into()), Call::EnsureLoadBalancerDeleted(KEY.into())],
                requests: vec![remove_finalizer(&[OTHER]), ingress(None)],
                events: vec!["Normal DeletingLoadBalancer", "Normal DeletedLoadBalancer"],
                outcome: Outcome::Done,
                load_balancers: vec![],
                finalizers_after: Some(vec![OTHER, LATE]),
            },
            Case {
                name: "ours the only one cached: upstream's null patch drops one added since our read too (trap 22)",
                svc: service(json!({"metadata": {"finalizers": [FINALIZER]}, "spec": {"type": "ClusterIP"}})),
                nodes: vec![],
                cloud: InMemoryCloud::default(),
                api: FakeApi::default().with(service(
                    json!({"metadata": {"finalizers": [FINALIZER, LATE]}, "spec": {"type": "ClusterIP"}}),
                )),
                calls: vec![Call::GetLoadBalancer(KEY.into())],
                requests: vec![remove_finalizer(&[])],
                events: vec!["Normal DeletedLoadBalancer"],
                outcome: Outcome::Done,
                load_balancers: vec![],
                finalizers_after: Some(vec![]),
            },
            Case {
                name: "deleted, the cloud's delete fails: the finalizer stays (trap 10)",
                svc: deleting(json!({})),
                nodes: vec![],
                cloud: has_lb().failing(Op::EnsureLoadBalancerDeleted, CloudError::Transient("boom".into())),
                api: FakeApi::default(),
                calls: vec![Call::GetLoadBalancer(KEY.into()), Call::EnsureLoadBalancerDeleted(KEY.into())],
                requests: vec![],
                events: vec!["Normal DeletingLoadBalancer", "Warning SyncLoadBalancerFailed"],
                outcome: Outcome::Retry("failed to delete load balancer: boom", backoff),
                load_balancers: vec![(KEY, vec!["a"])],
                finalizers_after: None,
            },
            Case {
                name: "deleted, the existence check fails: nothing deleted or removed",
                svc: deleting(json!({})),
                nodes: vec![],
                cloud: has_lb().failing(
                    Op::GetLoadBalancer,
                    CloudError::RetryAfter { after: Duration::from_secs(2), message: "busy".into() },
                ),
                api: FakeApi::default(),
                calls: vec![Call::GetLoadBalancer(KEY.into())],
                requests: vec![],
                events: vec!["Warning SyncLoadBalancerFailed"],
                outcome: Outcome::Retry(
                    "failed to check if load balancer exists before cleanup",
                    Duration::from_secs(2),
                ),
                load_balancers: vec![(KEY, vec!["a"])],
                finalizers_after: None,
            },
            Case {
                name: "type changed to ClusterIP: cleaned up like a deletion",
                svc: service(json!({"metadata": {"finalizers": [FINALIZER]}, "spec": {"type": "ClusterIP"},
                    "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}})),
                nodes: vec![backend("a", json!({}))],
                cloud: has_lb(),
                api: FakeApi::default(),
                calls: vec![Call::GetLoadBalancer(KEY.into()), Call::EnsureLoadBalancerDeleted(KEY.into())],
                requests: vec![remove_finalizer(&[]), ingress(None)],
                events: vec!["Normal DeletingLoadBalancer", "Normal DeletedLoadBalancer"],
                outcome: Outcome::Done,
                load_balancers: vec![],
                finalizers_after: Some(vec![]),
            },
            Case {
                name: "deleted with no load balancer: DeletedLoadBalancer all the same (trap 14)",
                svc: deleting(json!({"status": null})),
                nodes: vec![],
                cloud: InMemoryCloud::default(),
                api: FakeApi::default(),
                calls: vec![Call::GetLoadBalancer(KEY.into())],
                requests: vec![remove_finalizer(&[OTHER])],
                events: vec!["Normal DeletedLoadBalancer"],
                outcome: Outcome::Done,
                load_balancers: vec![],
                finalizers_after: None,
            },
            Case {
                name: "the Service is gone by the last writes: NotFound ignored (trap 10)",
                svc: deleting(json!({})),
                nodes: vec![],
                cloud: has_lb(),
                api: FakeApi::default().failing(STATUS, 404, 2),
                calls: vec![Call::GetLoadBalancer(KEY.into()), Call::EnsureLoadBalancerDeleted(KEY.into())],
                requests: vec![remove_finalizer(&[OTHER]), ingress(None)],
                events: vec!["Normal DeletingLoadBalancer", "Normal DeletedLoadBalancer"],
                outcome: Outcome::Done,
                load_balancers: vec![],
                finalizers_after: None,
            },
            Case {
                name: "another class's Service with our finalizer, deleted: cleaned up (trap 11)",
                svc: deleting(json!({"spec": {"loadBalancerClass": "example.com/lb"}, "status": null})),
                nodes: vec![],
                cloud: InMemoryCloud::default(),
                api: FakeApi::default(),
                calls: vec![Call::GetLoadBalancer(KEY.into())],
                requests: vec![remove_finalizer(&[OTHER])],
                events: vec!["Normal DeletedLoadBalancer"],
                outcome: Outcome::Done,
                load_balancers: vec![],
                finalizers_after: None,
            },
        ];
        for c in cases {
            check(c).await;
        }
    }

    struct NodeSyncCase {
        name: &'static str,
        /// The node set the load balancer was last given (`None`: the Service was never synced).
        last: Option<Vec<&'static str>>,
        nodes: Vec<Value>,
        cloud: InMemoryCloud,
        calls: Vec<Call>,
        events: Vec<&'static str>,
        requeued: bool,
    }

    #[tokio::test(start_paused = true)]
    async fn sync_nodes_updates_only_changed_sets() {
        let update =
            |nodes: &[&str]| Call::UpdateLoadBalancer(KEY.into(), nodes.iter().map(|n| n.to_string()).collect());
        let has_lb = || InMemoryCloud::default().with_load_balancer(KEY, "203.0.113.7", &["a"]);
        let fails = |cloud: InMemoryCloud| cloud.failing(Op::UpdateLoadBalancer, CloudError::Transient("boom".into()));
        let cases = [
            NodeSyncCase {
                name: "a node joins: UpdateLoadBalancer with the new set, UpdatedLoadBalancer",
                last: Some(vec!["a"]),
                nodes: vec![backend("a", json!({})), backend("b", json!({}))],
                cloud: has_lb(),
                calls: vec![update(&["a", "b"])],
                events: vec!["Normal UpdatedLoadBalancer"],
                requeued: false,
            },
            NodeSyncCase {
                name: "the load balancer has this set already: no cloud call (trap 9)",
                last: Some(vec!["a", "b"]),
                nodes: vec![backend("a", json!({})), backend("b", json!({}))],
                cloud: has_lb(),
                calls: vec![],
                events: vec![],
                requeued: false,
            },
            NodeSyncCase {
                name: "a node leaves the set: the load balancer gets the rest (trap 8)",
                last: Some(vec!["a", "b"]),
                nodes: vec![
                    backend("a", json!({})),
                    backend("b", json!({"metadata": {"labels": {EXCLUDE_LABEL: "1"}}})),
                ],
                cloud: has_lb(),
                calls: vec![update(&["a"])],
                events: vec!["Normal UpdatedLoadBalancer"],
                requeued: false,
            },
            NodeSyncCase {
                name: "a node's providerID changes: the set differs (trap 9)",
                last: Some(vec!["a"]),
                nodes: vec![backend("a", json!({"spec": {"providerID": "fakecloud://local-1b/i-new"}}))],
                cloud: has_lb(),
                calls: vec![update(&["a"])],
                events: vec!["Normal UpdatedLoadBalancer"],
                requeued: false,
            },
            NodeSyncCase {
                name: "the update fails, the load balancer exists: UpdateLoadBalancerFailed, a full sync (trap 15)",
                last: Some(vec!["a"]),
                nodes: vec![backend("a", json!({})), backend("b", json!({}))],
                cloud: fails(has_lb()),
                calls: vec![update(&["a", "b"]), Call::GetLoadBalancer(KEY.into())],
                events: vec!["Warning UpdateLoadBalancerFailed"],
                requeued: true,
            },
            NodeSyncCase {
                name: "the update fails, no load balancer: left to the service sync",
                last: Some(vec!["a"]),
                nodes: vec![backend("a", json!({})), backend("b", json!({}))],
                cloud: fails(InMemoryCloud::default()),
                calls: vec![update(&["a", "b"]), Call::GetLoadBalancer(KEY.into())],
                events: vec![],
                requeued: false,
            },
            NodeSyncCase {
                name: "a Service not synced yet is not updated (docs/upstream-ccm.md: differs on purpose)",
                last: None,
                nodes: vec![backend("a", json!({})), backend("b", json!({}))],
                cloud: has_lb(),
                calls: vec![],
                events: vec![],
                requeued: false,
            },
        ];
        for c in cases {
            let name = c.name;
            let svc = service(json!({"metadata": {"finalizers": [FINALIZER]}}));
            let api = FakeApi::default().with(svc.clone());
            let ctx = context(&api, &c.cloud, &c.nodes);
            let svc: Service = serde_json::from_value(svc).unwrap();
            let key = ObjectRef::from_obj(&svc);
            if let Some(last) = &c.last {
                let set = last.iter().map(|n| (n.to_string(), format!("fakecloud://local-1a/i-{n}"))).collect();
                ctx.remember(key.clone(), Arc::new(set));
            }
            let (services, mut writer) = reflector::store::<Service>();
            writer.apply_watcher_event(&watcher::Event::Apply(svc));
            let (tx, mut rx) = mpsc::unbounded_channel();
            let names: Vec<String> = c.nodes.iter().map(|n| n["metadata"]["name"].as_str().unwrap().into()).collect();
            let changes = futures::stream::iter(names);
            sync_nodes(ctx, services, changes, tx).await;
            settle().await;
            assert_eq!(c.cloud.calls(), c.calls, "{name}: cloud calls");
            assert_eq!(api.events(), c.events, "{name}: events");
            assert_eq!(rx.try_recv().ok(), c.requeued.then_some(key), "{name}: requeued");
            assert!(api.writes().is_empty(), "{name}: a node sync writes no Service");
        }
    }
}

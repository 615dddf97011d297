//! The cloud-node controller (upstream `controllers/node/node_controller.go`): initializes nodes that carry the
//! uninitialized taint — providerID, instance-type/zone/region labels (GA and beta), addresses — then removes the
//! taint and records `Synced`. Initialized nodes get only the label reconcile; their addresses are refreshed
//! every `--node-status-update-frequency`.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, NodeAddress};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use super::Backoff;
use crate::cloud::{Cloud, CloudError, InstanceMetadata};
use crate::nodes::{
    UNINITIALIZED_TAINT, addresses_changed, has_taint, init_labels, labels_to_reconcile, merge_addresses,
};

pub const COMPONENT: &str = "cloud-node-controller";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to get instance metadata for node {node}: {source}")]
    Metadata { node: String, source: CloudError },
    #[error("provided node ip for node {node:?} is not valid: {reason}")]
    NodeIp { node: String, reason: String },
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

pub struct Context<C> {
    pub client: kube::Client,
    pub cloud: Arc<C>,
    recorder: Recorder,
    /// Upstream's node queue: per-item exponential backoff from 5 ms to 1000 s.
    backoff: Backoff,
    /// The resourceVersion each node had after we initialized it: a cached copy older than that is stale, and
    /// must not cost a second cloud call (the watch brings the new version).
    written: std::sync::Mutex<std::collections::HashMap<String, u64>>,
}

/// Run until the stream ends (it does not, short of a shutdown).
pub async fn run<C: Cloud>(client: kube::Client, cloud: Arc<C>, concurrency: u16, refresh_every: Duration) {
    let recorder = Recorder::new(client.clone(), Reporter { controller: COMPONENT.into(), instance: None });
    let ctx = Arc::new(Context {
        client: client.clone(),
        cloud,
        recorder,
        backoff: Backoff::new(Duration::from_millis(5), Duration::from_secs(1000)),
        written: Default::default(),
    });
    let controller = Controller::new(Api::<Node>::all(client), watcher::Config::default())
        .with_config(ControllerConfig::default().concurrency(concurrency));
    let refresh = refresh_addresses(controller.store(), ctx.clone(), refresh_every);
    let sync = controller.run(reconcile, error_policy, ctx).for_each(|res| async move {
        if let Err(e) = res {
            tracing::debug!(error = %e, "node sync");
        }
    });
    tokio::join!(sync, refresh);
}

async fn reconcile<C: Cloud>(node: Arc<Node>, ctx: Arc<Context<C>>) -> Result<Action, Error> {
    let name = node.name_any();
    let api = Api::<Node>::all(ctx.client.clone());
    if !has_taint(&node, UNINITIALIZED_TAINT) {
        // Initialized: only the label reconcile, no cloud call.
        let fix = labels_to_reconcile(&node);
        if !fix.is_empty() {
            api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Strategic(serde_json::json!({"metadata": {"labels": fix}})),
            )
            .await?;
        }
        ctx.backoff.succeeded(&name);
        return Ok(Action::await_change());
    }
    let rv = |n: &Node| n.metadata.resource_version.as_deref().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    if ctx.written.lock().unwrap_or_else(|p| p.into_inner()).get(&name).is_some_and(|w| rv(&node) < *w) {
        return Ok(Action::await_change());
    }
    let md =
        ctx.cloud.instance_metadata(&node).await.map_err(|source| Error::Metadata { node: name.clone(), source })?;
    // The kubelet's provided-node-ip must be one of the cloud's addresses, or the node stays tainted (trap 1).
    let addresses =
        merge_addresses(&node, &md.addresses).map_err(|reason| Error::NodeIp { node: name.clone(), reason })?;
    let updated = initialize(&api, &node, &md).await?;
    ctx.written.lock().unwrap_or_else(|p| p.into_inner()).insert(name.clone(), rv(&updated));
    update_addresses(&api, &updated, &addresses).await?;
    let synced = Event {
        type_: EventType::Normal,
        reason: "Synced".into(),
        note: Some("Node synced successfully".into()),
        action: "Synced".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&synced, &updated.object_ref(&())).await {
        tracing::warn!(node = %name, error = %e, "cannot record the Synced event");
    }
    tracing::info!(node = %name, provider_id = %md.provider_id, "node initialized");
    ctx.backoff.succeeded(&name);
    Ok(Action::await_change())
}

/// providerID (set once), the label set, the taint removed: one full update, retried on conflict from a fresh
/// read (upstream: RetryOnConflict with 20 steps).
async fn initialize(api: &Api<Node>, node: &Node, md: &InstanceMetadata) -> Result<Node, Error> {
    let name = node.name_any();
    let mut current = node.clone();
    for attempt in 0.. {
        let mut n = current.clone();
        let spec = n.spec.get_or_insert_with(Default::default);
        if spec.provider_id.as_deref().unwrap_or_default().is_empty() && !md.provider_id.is_empty() {
            spec.provider_id = Some(md.provider_id.clone());
        }
        if let Some(taints) = spec.taints.as_mut() {
            taints.retain(|t| t.key != UNINITIALIZED_TAINT);
        }
        n.metadata.labels.get_or_insert_with(Default::default).extend(init_labels(md));
        match api.replace(&name, &PostParams::default(), &n).await {
            Ok(updated) => return Ok(updated),
            Err(kube::Error::Api(s)) if s.is_conflict() && attempt < 20 => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                current = api.get(&name).await?;
            }
            Err(e) => return Err(e.into()),
        }
    }
    unreachable!("the loop returns")
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
    let delay = ctx.backoff.failed(&node.name_any());
    tracing::warn!(node = %node.name_any(), error = %err, retry_in = ?delay, "node sync failed");
    Action::requeue(delay)
}

/// Upstream `UpdateNodeStatus`: at start and every period, refresh initialized nodes' addresses. Errors are
/// logged per node and retried only at the next period.
async fn refresh_addresses<C: Cloud>(store: Store<Node>, ctx: Arc<Context<C>>, every: Duration) {
    let api = Api::<Node>::all(ctx.client.clone());
    if store.wait_until_ready().await.is_err() {
        return;
    }
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        for node in store.state() {
            if has_taint(&node, UNINITIALIZED_TAINT) {
                continue;
            }
            let name = node.name_any();
            let result = match ctx.cloud.instance_metadata(&node).await {
                Ok(md) => match merge_addresses(&node, &md.addresses) {
                    Ok(addrs) => update_addresses(&api, &node, &addrs).await.map_err(|e| e.to_string()),
                    Err(e) => Err(e),
                },
                Err(e) => Err(e.to_string()),
            };
            if let Err(e) = result {
                tracing::warn!(node = %name, error = %e, "address refresh failed; next try at the next period");
            }
        }
    }
}

//! The cloud-node-lifecycle controller (upstream `controllers/nodelifecycle`): every `--node-monitor-period`,
//! for each node that is not Ready, ask the cloud whether its instance still exists — delete the Node if not —
//! and whether it is shut down — taint it if so. Ready nodes are never checked against the cloud; the shutdown
//! taint is removed only when a node is Ready again (trap 5).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Resource, ResourceExt};

use crate::cloud::Cloud;
use crate::nodes::{SHUTDOWN_TAINT, has_taint, ready_status};

pub const COMPONENT: &str = "cloud-node-lifecycle-controller";

pub async fn run<C: Cloud>(client: kube::Client, cloud: Arc<C>, period: Duration) {
    let recorder = Recorder::new(client.clone(), Reporter { controller: COMPONENT.into(), instance: None });
    let api = Api::<Node>::all(client.clone());
    let (store, writer) = reflector::store::<Node>();
    let watch = reflector::reflector(writer, watcher(api.clone(), watcher::Config::default()))
        .default_backoff()
        .touched_objects()
        .for_each(|_| futures::future::ready(()));
    let monitor = async {
        if store.wait_until_ready().await.is_err() {
            return;
        }
        let mut tick = tokio::time::interval(period);
        loop {
            tick.tick().await;
            for node in store.state() {
                monitor_node(&api, &*cloud, &recorder, &node).await;
            }
        }
    };
    tokio::join!(watch, monitor);
}

async fn monitor_node<C: Cloud>(api: &Api<Node>, cloud: &C, recorder: &Recorder, node: &Node) {
    let name = node.name_any();
    if ready_status(node) == "True" {
        if has_taint(node, SHUTDOWN_TAINT)
            && let Err(e) = edit_taint(api, &name, false).await
        {
            tracing::warn!(node = %name, error = %e, "cannot remove the shutdown taint");
        }
        return;
    }
    // Existence first, then shutdown; an error in either means skip this node, never delete.
    let exists = match cloud.instance_exists(node).await {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(node = %name, error = %e, "cannot tell whether the instance exists; skipping");
            return;
        }
    };
    if !exists {
        let reference = node.object_ref(&());
        let note = format!("Deleting node {name} because it does not exist in the cloud provider");
        let deleting = Event {
            type_: EventType::Normal,
            reason: "DeletingNode".into(),
            note: Some(note),
            action: "DeletingNode".into(),
            secondary: None,
        };
        let _ = recorder.publish(&deleting, &reference).await;
        tracing::info!(node = %name, "deleting node: its instance is gone");
        if let Err(e) = api.delete(&name, &Default::default()).await {
            let failed = Event {
                type_: EventType::Warning,
                reason: "DeletingNodeFailed".into(),
                note: Some(format!("Failed deleting node {name}: {e}")),
                action: "DeletingNode".into(),
                secondary: None,
            };
            let _ = recorder.publish(&failed, &reference).await;
        }
        return;
    }
    match cloud.instance_shutdown(node).await {
        Ok(true) if !has_taint(node, SHUTDOWN_TAINT) => {
            if let Err(e) = edit_taint(api, &name, true).await {
                tracing::warn!(node = %name, error = %e, "cannot add the shutdown taint");
            } else {
                tracing::info!(node = %name, "instance is shut down; tainted");
            }
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(node = %name, error = %e, "cannot tell whether the instance is shut down; skipping"),
    }
}

/// Add or remove the shutdown taint: read, then patch carrying the resourceVersion (optimistic), retried 5×
/// at 100 ms on conflict (upstream `taints.go`).
async fn edit_taint(api: &Api<Node>, name: &str, add: bool) -> Result<(), kube::Error> {
    for attempt in 0.. {
        let node = api.get(name).await?;
        let mut taints: Vec<Taint> = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
        let had = taints.iter().any(|t| t.key == SHUTDOWN_TAINT);
        if add == had {
            return Ok(());
        }
        if add {
            taints.push(Taint {
                key: SHUTDOWN_TAINT.into(),
                effect: "NoSchedule".into(),
                value: None,
                time_added: None,
            });
        } else {
            taints.retain(|t| t.key != SHUTDOWN_TAINT);
        }
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": node.resource_version()},
            "spec": {"taints": taints},
        });
        match api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.is_conflict() && attempt < 5 => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

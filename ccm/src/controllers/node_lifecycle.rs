//! The cloud-node-lifecycle controller (upstream `controllers/nodelifecycle`): a period after each pass
//! (`--node-monitor-period`), every node that is not Ready is checked against the cloud — existence first:
//! the Node is deleted if its instance is gone; then shutdown: a stopped instance's node gets the shutdown
//! taint. Ready nodes are never checked against the cloud; the shutdown taint is removed only when a node is
//! Ready again (docs/upstream-ccm.md, trap 5). An error from the cloud skips the node until the next pass,
//! never deletes it.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, GetParams, Patch, PatchParams};
use kube::runtime::reflector::Store;

use crate::client_go::events::{EventType, Recorder, node_ref};
use crate::client_go::informer::Synced;
use crate::cloud::Cloud;
use crate::nodes::{ready_status, shutdown_taint_edit, taints};

pub const COMPONENT: &str = "cloud-node-lifecycle-controller";
/// Upstream's taint helpers: 5 tries, 100 ms apart, on conflict.
const TAINT_TRIES: u32 = 5;

/// Run until the process ends, over the shared cache `nodes` (complete once `synced`).
pub async fn run<C: Cloud>(client: kube::Client, cloud: Arc<C>, period: Duration, nodes: Store<Node>, synced: Synced) {
    let recorder = Recorder::new(client.clone(), COMPONENT);
    let api = Api::<Node>::all(client);
    if !synced.wait().await {
        return;
    }
    loop {
        for node in nodes.state() {
            monitor_node(&api, &*cloud, &recorder, &node).await;
        }
        tokio::time::sleep(period).await;
    }
}

async fn monitor_node<C: Cloud>(api: &Api<Node>, cloud: &C, recorder: &Recorder, node: &Node) {
    let name = node.name_any();
    if ready_status(node) == "True" {
        if shutdown_taint_edit(taints(node), false).is_some()
            && let Err(e) = edit_shutdown_taint(api, &name, false).await
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
        let note = format!("Deleting node {name} because it does not exist in the cloud provider");
        tracing::info!(node = %name, "deleting node: its instance is gone");
        recorder.publish(node_ref(node), EventType::Normal, "DeletingNode", note);
        if let Err(e) = api.delete(&name, &Default::default()).await {
            let note = format!("Failed deleting node {name}: {e}");
            recorder.publish(node_ref(node), EventType::Warning, "DeletingNodeFailed", note);
        }
        return;
    }
    match cloud.instance_shutdown(node).await {
        Ok(true) => match edit_shutdown_taint(api, &name, true).await {
            Ok(true) => tracing::info!(node = %name, "instance is shut down; tainted"),
            Ok(false) => {}
            Err(e) => tracing::warn!(node = %name, error = %e, "cannot add the shutdown taint"),
        },
        Ok(false) => {}
        Err(e) => tracing::warn!(node = %name, error = %e, "cannot tell whether the instance is shut down; skipping"),
    }
}

/// Add or remove the shutdown taint as upstream's taint helpers do: read the node (the first time from the
/// apiserver's cache, `resourceVersion=0`), then patch its taints carrying that resourceVersion, so a concurrent
/// change makes it retry; 5 tries on conflict. `Ok(false)` when there was nothing to change.
async fn edit_shutdown_taint(api: &Api<Node>, name: &str, add: bool) -> Result<bool, kube::Error> {
    let mut attempt = 1;
    loop {
        let params = if attempt == 1 { GetParams::any() } else { GetParams::default() };
        let node = api.get_with(name, &params).await?;
        let Some(new) = shutdown_taint_edit(taints(&node), add) else {
            return Ok(false);
        };
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": node.resource_version()},
            "spec": {"taints": new},
        });
        match api.patch(name, &PatchParams::default(), &Patch::Strategic(patch)).await {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(s)) if s.is_conflict() && attempt < TAINT_TRIES => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

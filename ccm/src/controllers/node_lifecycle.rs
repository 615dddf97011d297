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

#[cfg(test)]
mod tests {
    //! One node's pass, table-driven as upstream's `Test_NodesDeleted` and `Test_NodesShutdown`: a Node in, its
    //! instance in → the cloud calls, the API requests, the events.

    use super::*;
    use crate::client_go::fake_api::{FakeApi, assert_contains, merged, settle};
    use crate::cloud::CloudError;
    use crate::cloud::in_memory::{Call, InMemoryCloud, Instance, Op};
    use crate::nodes::SHUTDOWN_TAINT;
    use serde_json::{Value, json};

    /// `n1`, initialized, with a Ready condition of `ready` (`None`: no Ready condition at all).
    fn node(ready: Option<&str>, extra: Value) -> Value {
        let conditions: Vec<Value> = ready.map(|s| json!({"type": "Ready", "status": s})).into_iter().collect();
        merged(
            json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": "n1", "uid": "u1", "resourceVersion": "7"},
                "spec": {"providerID": "fakecloud://local-1a/i-1", "taints": [{"key": "team", "effect": "NoSchedule"}]},
                "status": {"conditions": conditions}}),
            extra,
        )
    }

    fn with_shutdown_taint() -> Value {
        let taints =
            [json!({"key": "team", "effect": "NoSchedule"}), json!({"key": SHUTDOWN_TAINT, "effect": "NoSchedule"})];
        json!({"spec": {"taints": taints}})
    }

    fn instance(shutdown: bool, exists: bool) -> InMemoryCloud {
        InMemoryCloud::default().with_instance(Instance {
            shutdown,
            exists,
            ..Instance::running("i-1", "n1", "10.0.0.5")
        })
    }

    struct Case {
        name: &'static str,
        node: Value,
        cloud: InMemoryCloud,
        api: FakeApi,
        calls: Vec<Call>,
        /// `"METHOD path?query"` and what the body must contain.
        requests: Vec<(&'static str, Value)>,
        events: Vec<&'static str>,
    }

    async fn check(c: Case) {
        let node: Node = serde_json::from_value(c.node.clone()).unwrap();
        let api = c.api.with(c.node);
        let client = api.client();
        let recorder = Recorder::new(client.clone(), COMPONENT);
        monitor_node(&Api::all(client), &c.cloud, &recorder, &node).await;
        drop(recorder);
        settle().await;
        let name = c.name;
        assert_eq!(c.cloud.calls(), c.calls, "{name}: cloud calls");
        let sent = api.requests();
        let calls: Vec<String> = sent
            .iter()
            .map(|s| if s.query.is_empty() { s.call.clone() } else { format!("{}?{}", s.call, s.query) })
            .collect();
        let want: Vec<&str> = c.requests.iter().map(|(call, _)| *call).collect();
        assert_eq!(calls, want, "{name}: API requests");
        for (s, (_, body)) in sent.iter().zip(&c.requests) {
            assert_contains(&s.body, body, &format!("{name}: {}", s.call));
        }
        assert_eq!(api.events(), c.events, "{name}: events");
        if c.events.first() == Some(&"Normal DeletingNode") {
            let ev = &api.event_bodies()[0];
            assert_contains(
                ev,
                &json!({"message": "Deleting node n1 because it does not exist in the cloud provider",
                    "involvedObject": {"kind": "Node", "name": "n1", "uid": "u1"},
                    "source": {"component": "cloud-node-lifecycle-controller"}}),
                name,
            );
        }
    }

    /// The taint edit: a GET from the apiserver's cache, then a strategic patch carrying its resourceVersion.
    fn taint_edit(taints: Value) -> [(&'static str, Value); 2] {
        [
            ("GET /api/v1/nodes/n1?&resourceVersion=0", Value::Null),
            ("PATCH /api/v1/nodes/n1", json!({"metadata": {"resourceVersion": "7"}, "spec": {"taints": taints}})),
        ]
    }

    #[tokio::test(start_paused = true)]
    async fn monitor_nodes() {
        let exists_then_shutdown = vec![Call::InstanceExists("n1".into()), Call::InstanceShutdown("n1".into())];
        let cases = [
            Case {
                name: "Ready: never asks the cloud (trap 5)",
                node: node(Some("True"), json!({})),
                cloud: instance(true, false),
                api: FakeApi::default(),
                calls: vec![],
                requests: vec![],
                events: vec![],
            },
            Case {
                name: "Ready again: the shutdown taint goes, without a cloud call (trap 5)",
                node: node(Some("True"), with_shutdown_taint()),
                cloud: instance(true, true),
                api: FakeApi::default(),
                calls: vec![],
                requests: taint_edit(json!([{"key": "team"}])).into(),
                events: vec![],
            },
            Case {
                name: "NotReady, instance gone: DeletingNode, then the Node deleted (trap 4)",
                node: node(Some("False"), json!({})),
                cloud: InMemoryCloud::default(),
                api: FakeApi::default(),
                calls: vec![Call::InstanceExists("n1".into())],
                requests: vec![("DELETE /api/v1/nodes/n1", json!({}))],
                events: vec!["Normal DeletingNode"],
            },
            Case {
                name: "Unknown, instance terminated: deleted on the first pass (trap 4)",
                node: node(Some("Unknown"), json!({})),
                cloud: instance(false, false),
                api: FakeApi::default(),
                calls: vec![Call::InstanceExists("n1".into())],
                requests: vec![("DELETE /api/v1/nodes/n1", json!({}))],
                events: vec!["Normal DeletingNode"],
            },
            Case {
                name: "the delete fails: DeletingNodeFailed",
                node: node(Some("False"), json!({})),
                cloud: InMemoryCloud::default(),
                api: FakeApi::default().failing("DELETE /api/v1/nodes/n1", 500, 1),
                calls: vec![Call::InstanceExists("n1".into())],
                requests: vec![("DELETE /api/v1/nodes/n1", json!({}))],
                events: vec!["Normal DeletingNode", "Warning DeletingNodeFailed"],
            },
            Case {
                name: "the cloud errors on existence: left alone, never deleted (trap 5)",
                node: node(Some("False"), json!({})),
                cloud: InMemoryCloud::default().failing(Op::InstanceExists, CloudError::Transient("boom".into())),
                api: FakeApi::default(),
                calls: vec![Call::InstanceExists("n1".into())],
                requests: vec![],
                events: vec![],
            },
            Case {
                name: "no Ready condition counts as not Ready; stopped: the shutdown taint added",
                node: node(None, json!({})),
                cloud: instance(true, true),
                api: FakeApi::default(),
                calls: exists_then_shutdown.clone(),
                requests: taint_edit(json!([{"key": "team"}, {"key": SHUTDOWN_TAINT, "effect": "NoSchedule",
                    "value": null}]))
                .into(),
                events: vec![],
            },
            Case {
                name: "stopped and tainted already: read, not written",
                node: node(Some("False"), with_shutdown_taint()),
                cloud: instance(true, true),
                api: FakeApi::default(),
                calls: exists_then_shutdown.clone(),
                requests: vec![("GET /api/v1/nodes/n1?&resourceVersion=0", Value::Null)],
                events: vec![],
            },
            Case {
                name: "running again but NotReady: the shutdown taint stays (trap 5)",
                node: node(Some("False"), with_shutdown_taint()),
                cloud: instance(false, true),
                api: FakeApi::default(),
                calls: exists_then_shutdown.clone(),
                requests: vec![],
                events: vec![],
            },
            Case {
                name: "the cloud errors on shutdown: left alone",
                node: node(Some("False"), json!({})),
                cloud: instance(true, true)
                    .failing(Op::InstanceShutdown, CloudError::QuotaExceeded { code: "q".into(), message: "m".into() }),
                api: FakeApi::default(),
                calls: exists_then_shutdown.clone(),
                requests: vec![],
                events: vec![],
            },
            Case {
                name: "a conflicting taint patch is retried from a fresh read (trap 19)",
                node: node(Some("False"), json!({})),
                cloud: instance(true, true),
                api: FakeApi::default().failing("PATCH /api/v1/nodes/n1", 409, 1),
                calls: exists_then_shutdown,
                requests: vec![
                    ("GET /api/v1/nodes/n1?&resourceVersion=0", Value::Null),
                    ("PATCH /api/v1/nodes/n1", json!({"metadata": {"resourceVersion": "7"}})),
                    ("GET /api/v1/nodes/n1", Value::Null),
                    ("PATCH /api/v1/nodes/n1", json!({"spec": {"taints": [{}, {"key": SHUTDOWN_TAINT}]}})),
                ],
                events: vec![],
            },
        ];
        for c in cases {
            check(c).await;
        }
    }
}

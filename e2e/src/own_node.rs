//! Nodes a case registers itself, playing the kubelet, for machines that have none (tagged
//! [`NO_KUBELET_TAG`]`=none`, see [`crate::Env::machine_without_kubelet`]): so a Node can be named otherwise than
//! its machine, carry its providerID from registration (`--provider-id`), or lack one, as the bugs it replays had.

use std::time::Duration;

use fakecloud_api::Instance;
pub use fakecloud_controlplane::kubelets::NO_KUBELET_TAG;
use fakecloud_controlplane::kubelets::{PROVIDED_NODE_IP, UNINITIALIZED_TAINT};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};

use crate::env::SIMULATED_TAINT;

/// A kubelet's Ready condition, as it reports it at registration and in every heartbeat.
pub fn ready_now() -> serde_json::Value {
    condition_now(true)
}

fn condition_now(ready: bool) -> serde_json::Value {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let (status, reason) = if ready { ("True", "KubeletReady") } else { ("False", "KubeletNotReady") };
    serde_json::json!([{"type": "Ready", "status": status, "reason": reason, "message": reason,
                        "lastHeartbeatTime": now, "lastTransitionTime": now}])
}

/// A kubelet's heartbeat for a Node no simulated kubelet owns: Ready, every 2 s, so the controller manager does
/// not mark it NotReady (and the lifecycle controller delete it) however slow the test runs. Conditions only:
/// addresses merged in after the CCM wrote its own would undo them (upstream rewrites them only every 5 min).
/// The heartbeat stops when dropped, as a dead machine's kubelet does.
pub struct Heartbeat(tokio::task::JoinHandle<()>);

impl Heartbeat {
    pub fn start(nodes: Api<Node>, name: String) -> Self {
        Self(tokio::spawn(async move {
            loop {
                let status = serde_json::json!({"status": {"conditions": ready_now()}});
                let _ = nodes.patch_status(&name, &PatchParams::default(), &Patch::Strategic(status)).await;
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }))
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How the case's kubelet registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registration {
    /// As `--cloud-provider=external` with `--provider-id`: the uninitialized taint and this providerID already
    /// set (AWS's nodes, named after their private DNS name, register this way; [`crate::Env::provider_id`] is the
    /// one the CCM under test reads).
    WithProviderId(String),
    /// With neither taint nor providerID, as a Node registered before any CCM ran: the CCM finds its machine
    /// by the Node's name only.
    Bare,
}

/// A Node a case keeps for a machine of its own.
pub struct OwnNode {
    pub name: String,
    nodes: Api<Node>,
    beat: Option<Heartbeat>,
}

impl OwnNode {
    /// Register Node `name` for `machine`: the kubelet's labels, its provided-node-ip annotation, the suite's
    /// simulated-machine taint (no real pod lands on it, and a run cut short leaves nothing a next run keeps),
    /// `labels` beside the kubelet's (`--node-labels`), `ready` or not; a Ready one is kept Ready by a heartbeat
    /// until [`OwnNode::stop`].
    pub async fn register(
        nodes: Api<Node>,
        machine: &Instance,
        name: &str,
        how: Registration,
        labels: &[(&str, &str)],
        ready: bool,
    ) -> Self {
        let mut taints = vec![serde_json::json!({"key": SIMULATED_TAINT, "value": "true", "effect": "NoSchedule"})];
        let mut spec = serde_json::json!({});
        if let Registration::WithProviderId(provider_id) = how {
            taints.insert(0, serde_json::json!({"key": UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}));
            spec["providerID"] = provider_id.into();
        }
        spec["taints"] = taints.into();
        let mut all_labels = serde_json::json!({"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"});
        for (k, v) in labels {
            all_labels[*k] = (*v).into();
        }
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": name,
                "labels": all_labels,
                "annotations": {PROVIDED_NODE_IP: machine.private_ip.to_string()},
            },
            "spec": spec,
            "status": {
                "conditions": condition_now(ready),
                "addresses": [{"type": "InternalIP", "address": machine.private_ip.to_string()},
                              {"type": "Hostname", "address": name}],
            },
        }))
        .expect("a valid Node");
        nodes.create(&PostParams::default(), &node).await.unwrap_or_else(|e| panic!("registering Node {name}: {e}"));
        let beat = ready.then(|| Heartbeat::start(nodes.clone(), name.to_string()));
        Self { name: name.to_string(), nodes, beat }
    }

    /// The kubelet dies: no more heartbeats, so the controller manager marks the Node unreachable.
    pub fn stop(&mut self) {
        self.beat = None;
    }

    /// Delete the Node (at the end of a case: the suite removes Nodes by their machines' names only).
    pub async fn delete(mut self) {
        self.stop();
        let _ = self.nodes.delete(&self.name, &DeleteParams::default()).await;
    }
}

/// A Node name as AWS gives its nodes (`ip-10-0-1-7.<domain>`), from the machine's private address: never its
/// machine's name.
pub fn dns_name(machine: &Instance, domain: &str) -> String {
    format!("ip-{}.{domain}", machine.private_ip.to_string().replace('.', "-"))
}

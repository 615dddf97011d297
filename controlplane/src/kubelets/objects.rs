//! What a kubelet started with `--cloud-provider=external` writes — its Node at registration and the status it
//! reports — and the Lease patch that silences a stopped machine's Node. Pure functions, so they are tested
//! without an API server.

use std::collections::BTreeMap;

use fakecloud_api::Instance;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec, NodeStatus, NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;

/// The taint a kubelet with `--cloud-provider=external` registers with, until a CCM initializes the node.
pub const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// The annotation through which a kubelet tells the CCM which address it chose.
pub const PROVIDED_NODE_IP: &str = "alpha.kubernetes.io/provided-node-ip";
/// Where kubelets keep their Leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";
/// The kubelet's default `--node-lease-duration-seconds`.
pub const LEASE_SECONDS: u32 = 40;
/// How the holder of a Lease this simulation took to silence a Node begins: such a Lease is released (deleted)
/// when the machine is up again, and no other.
pub const SILENCING_HOLDER: &str = "fakecloud: ";
/// A silencing Lease's duration, a year: kwok takes over a Lease only when it has expired.
const SILENT_SECONDS: i32 = 365 * 24 * 3600;
/// The port a kubelet serves on, reported in `status.daemonEndpoints`.
const KUBELET_PORT: i32 = 10250;
/// Pods a kubelet admits by default (`--max-pods`).
const MAX_PODS: &str = "110";

/// The conditions a healthy kubelet reports: type, status, reason, message (the kubelet's own wording).
const HEALTHY: [(&str, &str, &str, &str); 4] = [
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
];

/// The Ready condition of a kubelet whose node network is not up yet: what a kind node reports from
/// registration until its CNI plugin (kindnet) has written its config.
const NETWORK_NOT_READY: (&str, &str, &str, &str) = (
    "Ready",
    "False",
    "KubeletNotReady",
    "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized",
);

/// The conditions a kubelet reports: all healthy, or (`ready` false) healthy but for a network not ready yet.
fn conditions(ready: bool) -> [(&'static str, &'static str, &'static str, &'static str); 4] {
    let mut c = HEALTHY;
    if !ready {
        c[3] = NETWORK_NOT_READY;
    }
    c
}

/// What an instance type offers a kubelet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub vcpus: u32,
    pub memory_mib: u32,
}

impl Shape {
    /// Used for an instance type missing from the region's catalog (the catalog is read once at start).
    pub const FALLBACK: Shape = Shape { vcpus: 2, memory_mib: 4096 };
}

/// The Node a kubelet creates when it registers: labels it sets itself (never the zone, region or
/// instance-type labels — the CCM adds those), the uninitialized taint and then `register_with_taints` (the
/// kubelet's `--register-with-taints`), the provided-node-ip annotation, no providerID, and a full status (the
/// API server keeps a Node's status on create, so one call registers it); `ready` false: not Ready yet.
pub fn node(
    inst: &Instance,
    shape: Shape,
    kubelet_version: &str,
    register_with_taints: &[Taint],
    managed_by: (&str, &str),
    now: Timestamp,
    ready: bool,
) -> Node {
    let capacity: BTreeMap<String, Quantity> = [
        ("cpu", shape.vcpus.to_string()),
        ("memory", format!("{}Mi", shape.memory_mib)),
        ("pods", MAX_PODS.to_string()),
        ("ephemeral-storage", "100Gi".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), Quantity(v)))
    .collect();
    // The kubelet still sets the deprecated beta os/arch labels beside the GA ones.
    let labels: BTreeMap<String, String> = [
        ("kubernetes.io/hostname", inst.name.as_str()),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("beta.kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", "amd64"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let time = Time(now);
    Node {
        metadata: ObjectMeta {
            name: Some(inst.name.clone()),
            labels: Some(labels),
            annotations: Some(
                [
                    // As a dual-stack kubelet's `--node-ip=<v4>,<v6>`: one address of each family.
                    (PROVIDED_NODE_IP.to_string(), ips(inst).join(",")),
                    // What kwok's `--manage-nodes-with-annotation-selector` picks this simulation's Nodes by.
                    (managed_by.0.to_string(), managed_by.1.to_string()),
                ]
                .into(),
            ),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: Some(
                std::iter::once(Taint {
                    key: UNINITIALIZED_TAINT.into(),
                    value: Some("true".into()),
                    effect: "NoSchedule".into(),
                    time_added: None,
                })
                .chain(register_with_taints.iter().cloned())
                .collect(),
            ),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            addresses: Some(addresses(inst)),
            conditions: Some(
                conditions(ready)
                    .iter()
                    .map(|&(type_, status, reason, message)| NodeCondition {
                        type_: type_.into(),
                        status: status.into(),
                        reason: Some(reason.into()),
                        message: Some(message.into()),
                        last_heartbeat_time: Some(time.clone()),
                        last_transition_time: Some(time.clone()),
                    })
                    .collect(),
            ),
            capacity: Some(capacity.clone()),
            allocatable: Some(capacity),
            daemon_endpoints: Some(NodeDaemonEndpoints {
                kubelet_endpoint: Some(DaemonEndpoint { port: KUBELET_PORT }),
            }),
            node_info: Some(NodeSystemInfo {
                kubelet_version: kubelet_version.to_string(),
                kube_proxy_version: String::new(),
                operating_system: "linux".into(),
                architecture: "amd64".into(),
                os_image: "fakecloud simulated kubelet".into(),
                kernel_version: "simulated".into(),
                container_runtime_version: "simulated://1.0".into(),
                machine_id: inst.id.clone(),
                system_uuid: inst.id.clone(),
                boot_id: inst.id.clone(),
                ..Default::default()
            }),
            ..Default::default()
        }),
    }
}

fn ips(inst: &Instance) -> Vec<String> {
    inst.addresses().map(|a| a.to_string()).collect()
}

fn addresses(inst: &Instance) -> Vec<NodeAddress> {
    let internal = ips(inst).into_iter().map(|address| NodeAddress { type_: "InternalIP".into(), address });
    internal.chain(std::iter::once(NodeAddress { type_: "Hostname".into(), address: inst.name.clone() })).collect()
}

/// Whether `node` shows every condition as this kubelet reports it (`ready`: Ready or not yet). When it does
/// not (the controller manager marked it Unknown while this kubelet was silent, or its network just came up),
/// the next heartbeat must post status at once.
pub fn reports(node: &Node, ready: bool) -> bool {
    let shown = node.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default();
    conditions(ready).iter().all(|&(type_, status, ..)| shown.iter().any(|c| c.type_ == type_ && c.status == status))
}

/// The strategic-merge status patch of a heartbeat, given the Node as it is now. Conditions merge by type;
/// `lastTransitionTime` moves only for a condition whose status changes, as the kubelet's does. Addresses are
/// sent only while the Node has none: with an external cloud provider the kubelet leaves addresses the CCM set
/// alone.
pub fn status_patch(inst: &Instance, current: &Node, now: Timestamp, ready: bool) -> serde_json::Value {
    let status = current.status.as_ref();
    let existing = status.and_then(|s| s.conditions.as_deref()).unwrap_or_default();
    let time = Time(now);
    let conditions: Vec<NodeCondition> = conditions(ready)
        .iter()
        .map(|&(type_, want, reason, message)| {
            let changed = !existing.iter().any(|c| c.type_ == type_ && c.status == want);
            NodeCondition {
                type_: type_.into(),
                status: want.into(),
                reason: Some(reason.into()),
                message: Some(message.into()),
                last_heartbeat_time: Some(time.clone()),
                last_transition_time: changed.then(|| time.clone()),
            }
        })
        .collect();
    let mut patch = serde_json::json!({ "status": { "conditions": conditions } });
    if status.and_then(|s| s.addresses.as_ref()).is_none_or(Vec::is_empty) {
        patch["status"]["addresses"] = serde_json::json!(addresses(inst));
    }
    patch
}

/// Why a machine's kubelet fell silent; it names the silencing Lease's holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Silence {
    Stopped,
    Hung,
}

impl Silence {
    pub fn holder(self) -> String {
        let why = match self {
            Silence::Stopped => "machine not running",
            Silence::Hung => "machine hung",
        };
        format!("{SILENCING_HOLDER}{why}")
    }
}

/// The merge patch that silences a Node: its Lease taken by another holder for a year. kwok renews only a
/// Lease it holds (or one expired), so it stops. `renewTime` moves to `now`, once: the controller manager
/// (1.37's lease circuit breaker) takes a Lease whose version changed without a newer `renewTime` for a stale
/// cache and never marks the Node unreachable, so the silence must read as one last renewal.
pub fn silencing_patch(why: Silence, now: Timestamp) -> serde_json::Value {
    serde_json::json!({ "spec": {
        "holderIdentity": why.holder(),
        "leaseDurationSeconds": SILENT_SECONDS,
        "renewTime": MicroTime(now),
    } })
}

/// The silencing Lease itself, for a Node that has none yet; owned by the Node so it goes with it.
pub fn silencing_lease(name: &str, node_uid: &str, why: Silence, now: Timestamp) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(LEASE_NAMESPACE.into()),
            owner_references: (!node_uid.is_empty()).then(|| {
                vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: name.to_string(),
                    uid: node_uid.to_string(),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(why.holder()),
            lease_duration_seconds: Some(SILENT_SECONDS),
            renew_time: Some(MicroTime(now)),
            ..Default::default()
        }),
    }
}

/// Whether a Lease is one this simulation took to silence its Node.
pub fn is_silencing(lease: &Lease) -> bool {
    lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref()).is_some_and(|h| h.starts_with(SILENCING_HOLDER))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const MANAGED: (&str, &str) = ("fakecloud.io/simulated-by", "test");

    pub(crate) fn instance(name: &str, ip: &str) -> Instance {
        serde_json::from_value(serde_json::json!({
            "id": format!("i-{name}"), "name": name, "zone": "local-1a", "region": "local-1",
            "instance_type": "fc.small", "market": "on-demand", "state": "running", "private_ip": ip,
            "provider_id": format!("fakecloud://local-1a/i-{name}"), "tags": {},
            "created_at": "2026-11-22T00:00:00Z", "state_changed_at": "2026-11-22T00:00:00Z",
        }))
        .expect("a valid instance")
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    #[test]
    fn registration_is_what_an_external_cloud_provider_kubelet_posts() {
        let inst = instance("node-a", "10.0.0.7");
        let n = node(
            &inst,
            Shape { vcpus: 4, memory_mib: 8192 },
            "v1.37.2",
            &[],
            MANAGED,
            ts("2026-11-22T10:00:00Z"),
            true,
        );
        let spec = n.spec.as_ref().expect("spec");
        assert_eq!(spec.provider_id, None);
        let taints = spec.taints.as_ref().expect("taints");
        assert_eq!((taints[0].key.as_str(), taints[0].effect.as_str()), (UNINITIALIZED_TAINT, "NoSchedule"));
        let annotations = n.metadata.annotations.as_ref().expect("annotations");
        assert_eq!(annotations[PROVIDED_NODE_IP], "10.0.0.7");
        assert_eq!(annotations[MANAGED.0], MANAGED.1, "kwok finds the Node by this");
        let labels = n.metadata.labels.as_ref().expect("labels");
        assert_eq!(labels["kubernetes.io/hostname"], "node-a");
        assert!(labels.keys().all(|k| !k.contains("zone") && !k.contains("region") && !k.contains("instance-type")));
        let status = n.status.as_ref().expect("status");
        assert_eq!(status.capacity.as_ref().expect("capacity")["cpu"], Quantity("4".into()));
        assert_eq!(status.allocatable.as_ref().expect("allocatable")["memory"], Quantity("8192Mi".into()));
        assert_eq!(status.capacity.as_ref().expect("capacity")["pods"], Quantity("110".into()));
        assert!(reports(&n, true));
        assert!(!reports(&n, false));
    }

    #[test]
    fn register_with_taints_come_after_the_uninitialized_taint() {
        let simulated =
            Taint { key: "example.com/simulated".into(), effect: "NoSchedule".into(), ..Default::default() };
        let n = node(
            &instance("node-b", "10.0.0.8"),
            Shape::FALLBACK,
            "v1.37.2",
            std::slice::from_ref(&simulated),
            MANAGED,
            ts("2026-11-22T10:00:00Z"),
            true,
        );
        let taints = n.spec.expect("spec").taints.expect("taints");
        assert_eq!(
            taints.iter().map(|t| t.key.as_str()).collect::<Vec<_>>(),
            [UNINITIALIZED_TAINT, "example.com/simulated"]
        );
        assert_eq!(taints[1], simulated);
    }

    #[test]
    fn heartbeats_move_transition_times_only_on_change_and_leave_ccm_addresses_alone() {
        let inst = instance("node-a", "10.0.0.7");
        let mut n = node(&inst, Shape::FALLBACK, "v1.37.2", &[], MANAGED, ts("2026-11-22T10:00:00Z"), true);
        let later = ts("2026-11-22T10:00:20Z");
        let p = status_patch(&inst, &n, later, true);
        assert!(p["status"].get("addresses").is_none(), "addresses are set already: {p}");
        for c in p["status"]["conditions"].as_array().expect("conditions") {
            assert!(c.get("lastTransitionTime").is_none(), "nothing changed: {c}");
            assert_eq!(c["lastHeartbeatTime"], "2026-11-22T10:00:20Z");
        }

        // The controller manager marked the node Unknown: the heartbeat flips Ready back with a transition.
        let status = n.status.as_mut().expect("status");
        for c in status.conditions.as_mut().expect("conditions") {
            c.status = "Unknown".into();
        }
        status.addresses = None;
        assert!(!reports(&n, true));
        let p = status_patch(&inst, &n, later, true);
        let ready = p["status"]["conditions"]
            .as_array()
            .expect("conditions")
            .iter()
            .find(|c| c["type"] == "Ready")
            .expect("Ready")
            .clone();
        assert_eq!(
            (ready["status"].as_str(), ready["lastTransitionTime"].as_str()),
            (Some("True"), Some("2026-11-22T10:00:20Z"))
        );
        assert_eq!(p["status"]["addresses"][0]["address"], "10.0.0.7");
    }

    #[test]
    fn a_kubelet_whose_network_is_not_up_registers_not_ready_then_turns_ready() {
        let inst = instance("node-a", "10.0.0.7");
        let n = node(&inst, Shape::FALLBACK, "v1.37.2", &[], MANAGED, ts("2026-11-22T10:00:00Z"), false);
        let ready = |conditions: &[NodeCondition]| {
            let c = conditions.iter().find(|c| c.type_ == "Ready").expect("Ready").clone();
            (c.status, c.reason.unwrap_or_default())
        };
        let status = n.status.as_ref().expect("status");
        assert_eq!(
            ready(status.conditions.as_deref().expect("conditions")),
            ("False".into(), "KubeletNotReady".into())
        );
        assert!(reports(&n, false) && !reports(&n, true));
        let p = status_patch(&inst, &n, ts("2026-11-22T10:00:15Z"), true);
        let posted: Vec<NodeCondition> = serde_json::from_value(p["status"]["conditions"].clone()).expect("conditions");
        assert_eq!(ready(&posted), ("True".into(), "KubeletReady".into()));
        let moved: Vec<&str> =
            posted.iter().filter(|c| c.last_transition_time.is_some()).map(|c| c.type_.as_str()).collect();
        assert_eq!(moved, ["Ready"], "only Ready changed");
    }

    #[test]
    fn a_silencing_lease_renews_once_and_is_recognised_as_silencing() {
        let p = silencing_patch(Silence::Hung, ts("2026-11-22T10:00:00Z"));
        assert_eq!(p["spec"]["holderIdentity"], "fakecloud: machine hung");
        assert_eq!(p["spec"]["renewTime"], "2026-11-22T10:00:00.000000Z", "one last renewal: {p}");
        let l = silencing_lease("node-a", "uid-1", Silence::Stopped, ts("2026-11-22T10:00:00Z"));
        assert_eq!(l.metadata.owner_references.as_ref().expect("owners")[0].uid, "uid-1");
        assert!(is_silencing(&l));
        let mut kwoks = l.clone();
        kwoks.spec.as_mut().expect("spec").holder_identity = Some("host_5e1c".into());
        assert!(!is_silencing(&kwoks));
    }
}

//! The end-to-end suite and its harness.
//!
//! - [`env`]: the **conformance suite's** view of a cluster — a kubeconfig, the emulator's URL and admin token,
//!   and a CCM deployed in some way — and [`env::case`], which runs one case in its own namespaces and cloud
//!   resources, cleans up after it and, when it fails, prints the events, the CCM's log tail and its cloud
//!   calls. The cases (`tests/it/conformance_*.rs`) judge the CCM only through the Kubernetes API and the
//!   emulator's API and audit log, so they run unchanged against any deployment: the `local` backend (the
//!   default) starts one per case, `existing` takes one from the environment (a kind cluster from `make kind-up`, or `make up`'s); see [`backend`].
//! - [`local`]: the local cluster itself — the upstream control plane, an emulator, simulated kubelets, CCM
//!   processes run as the deploy manifest's ServiceAccount — also used directly by the tests of the
//!   `fakecloud-ccm` binary (`tests/it/ccm_*.rs`) and the benchmarks.
//! - [`own_node`]: Nodes a case registers and keeps alive itself, for machines without a simulated kubelet.
//! - [`bench`]: what the CCM benchmarks measure of a CCM process, fakecloud-ccm and upstream's alike.
//! - [`Probe`]: how any of them looks at a cluster (Nodes, events, the CCM's cloud calls).
//!
//! Setup failures panic with what failed: these are tests.

pub mod backend;
pub mod bench;
pub mod env;
pub mod lb;
pub mod local;
pub mod own_node;
pub mod traffic;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fakecloud_api::{AuditEntry, AuditQuery, Client, Instance};
use fakecloud_controlplane::kubelets::NodeNames;
use k8s_openapi::api::core::v1::{Event, Namespace, Node};
use kube::api::Api;

pub use backend::Timing;
pub use env::{Env, Setup, case};
pub use local::{Ccm, Cluster, ClusterOptions, Rates};

/// The manifest's ServiceAccount.
pub const SERVICE_ACCOUNT: (&str, &str) = ("kube-system", "cloud-controller-manager");
pub const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";
pub const SHUTDOWN_TAINT: &str = "node.cloudprovider.kubernetes.io/shutdown";

/// How long a wait for something that must happen (a leader, a Node initialized, an event, an EXTERNAL-IP, an
/// answer through a load balancer) may take before the suite calls it a hang: far past anything the cluster and
/// the CCM take on a busy 2-core CI machine. A hang detector, never a speed claim; what the cluster's own
/// periods add to it is in [`Timing`].
pub const HANG: Duration = Duration::from_secs(120);

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

/// Poll `f` every 250 ms until it gives a value; `None` once `timeout` has passed.
pub async fn poll<T>(timeout: Duration, mut f: impl AsyncFnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if start.elapsed() >= timeout {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Poll `f` every 250 ms until it gives a value; panic after `timeout`.
pub async fn until<T>(timeout: Duration, what: &str, f: impl AsyncFnMut() -> Option<T>) -> T {
    poll(timeout, f).await.unwrap_or_else(|| panic!("timed out after {timeout:?} waiting for {what}"))
}

/// When the cloud answered a call, as its audit entry says.
pub fn called_at(e: &AuditEntry) -> k8s_openapi::jiff::Timestamp {
    e.time.parse().unwrap_or_else(|err| panic!("audit entry {} has no RFC 3339 time {:?}: {err}", e.seq, e.time))
}

pub fn taint_keys(n: &Node) -> Vec<String> {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|t| t.iter().map(|t| t.key.clone()).collect())
        .unwrap_or_default()
}

/// Initialized by a CCM: no uninitialized taint, a providerID.
pub fn initialized(n: &Node) -> bool {
    !taint_keys(n).iter().any(|k| k == UNINITIALIZED_TAINT) && n.spec.as_ref().is_some_and(|s| s.provider_id.is_some())
}

/// The cloud's instance ID in a Node's providerID: fakecloud's `fakecloud://<zone>/<id>` or cloud-provider-aws's
/// `aws:///<zone>/<i-…>` (the same instance, whichever face the CCM reads it through); `None` without one.
pub fn instance_id(n: &Node) -> Option<String> {
    let pid = n.spec.as_ref()?.provider_id.as_deref()?;
    let id = fakecloud_api::parse_provider_id(pid).or_else(|| fakecloud_controlplane::aws_cluster::instance_id(pid))?;
    Some(id.to_string())
}

/// A Node's condition of this type: (status, reason).
pub fn condition(n: &Node, type_: &str) -> Option<(String, String)> {
    let c = n.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone().unwrap_or_default()))
}

/// How a test looks at a cluster: its Kubernetes API (as the admin) and the emulator's API and audit log (with
/// the admin token). Reads for wait loops treat a failed call as "not yet": a loaded apiserver can time out a
/// request, and the loop asks again rather than failing the test.
#[derive(Clone)]
pub struct Probe {
    pub kube: kube::Client,
    /// The emulator, as its administrator (quotas, faults, the audit log; never faulted itself).
    pub cloud: Client,
    /// The CCM's cloud calls are counted from this time on (a shared emulator has older ones).
    audit_since: Option<String>,
    /// What the cluster's kubelets name a machine's Node.
    node_names: NodeNames,
}

impl Probe {
    /// Of a cluster whose Nodes are named after their machines.
    pub fn new(kube: kube::Client, cloud: Client) -> Self {
        Self { kube, cloud, audit_since: None, node_names: NodeNames::Instance }
    }

    /// The same, on a cluster whose kubelets name Nodes as `names` says (cloud-provider-aws's: private DNS names).
    pub fn naming_nodes(mut self, names: NodeNames) -> Self {
        self.node_names = names;
        self
    }

    /// The name of `inst`'s Node.
    pub fn node_name(&self, inst: &Instance) -> String {
        self.node_names.of(inst)
    }

    /// The same, counting the CCM's cloud calls only from now on.
    pub fn from_now(mut self) -> Self {
        self.audit_since = Some(k8s_openapi::jiff::Timestamp::now().to_string());
        self
    }

    pub fn client(&self) -> kube::Client {
        self.kube.clone()
    }

    pub fn nodes(&self) -> Api<Node> {
        Api::all(self.kube.clone())
    }

    /// A Node; `None` when it does not exist and also when the call fails.
    pub async fn node(&self, name: &str) -> Option<Node> {
        self.nodes().get_opt(name).await.ok().flatten()
    }

    /// Whether the Node is gone; a failed call is not taken for "gone".
    pub async fn node_gone(&self, name: &str) -> bool {
        matches!(self.nodes().get_opt(name).await, Ok(None))
    }

    /// All Nodes (empty when the call fails).
    pub async fn node_list(&self) -> Vec<Node> {
        self.nodes().list(&Default::default()).await.map(|l| l.items).unwrap_or_default()
    }

    /// Create namespace `name`.
    pub async fn create_namespace(&self, name: &str) {
        let ns: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).expect("a namespace");
        Api::<Namespace>::all(self.client()).create(&Default::default(), &ns).await.expect("the namespace is created");
    }

    /// Wait until the Nodes of these machines are initialized by a CCM.
    pub async fn wait_initialized(&self, instances: &[Instance], timeout: Duration) {
        for i in instances {
            let name = self.node_name(i);
            until(timeout, &format!("{name} initialized"), async || self.node(&name).await.filter(initialized)).await;
        }
    }

    /// Core/v1 events about Node `name` (they live in `default`), as `kubectl get events` shows them.
    pub async fn events_for(&self, name: &str) -> Vec<Event> {
        self.events_in("default", name).await
    }

    /// Core/v1 events about `name` in `namespace` (empty when the call fails: callers poll), last seen since this
    /// probe's start: a name given again (a Node named by a private address the cloud hands out again, on a shared
    /// cluster) must not bring an earlier case's events.
    pub async fn events_in(&self, namespace: &str, name: &str) -> Vec<Event> {
        let all = Api::<Event>::namespaced(self.client(), namespace).list(&Default::default()).await;
        let all = all.map(|l| l.items).unwrap_or_default();
        all.into_iter().filter(|e| e.involved_object.name.as_deref() == Some(name) && self.recent(e)).collect()
    }

    /// Whether event `e` was last seen since this probe's start (to the second: events' times are whole seconds).
    fn recent(&self, e: &Event) -> bool {
        let Some(since) = self.audit_since.as_deref().and_then(|s| s.parse::<k8s_openapi::jiff::Timestamp>().ok())
        else {
            return true;
        };
        let seen = (e.last_timestamp.as_ref().map(|t| t.0)).or(e.event_time.as_ref().map(|t| t.0)).or(e
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0));
        seen.is_none_or(|t| t >= since - k8s_openapi::jiff::SignedDuration::from_secs(1))
    }

    /// Wait for an event with `reason` about `name` in `namespace`.
    pub async fn event(&self, namespace: &str, name: &str, reason: &str, timeout: Duration) -> Event {
        until(timeout, &format!("a {reason} event about {namespace}/{name}"), async || {
            self.events_in(namespace, name).await.into_iter().find(|e| e.reason.as_deref() == Some(reason))
        })
        .await
    }

    /// The CCM's cloud calls of these operations (so far, since this probe's start).
    pub async fn ccm_calls(&self, operations: &[&str]) -> Vec<AuditEntry> {
        self.ccm_audit().await.into_iter().filter(|e| operations.contains(&e.operation.as_str())).collect()
    }

    /// Every cloud call the CCM made (so far, since this probe's start), oldest first: the calls with the
    /// *user* token, which is the CCM's; tests, kubelets and operators use the admin token.
    pub async fn ccm_audit(&self) -> Vec<AuditEntry> {
        const PAGE: u32 = 10_000;
        let (mut calls, mut after) = (Vec::new(), None);
        loop {
            let query = AuditQuery { limit: Some(PAGE), after, since: self.audit_since.clone(), ..Default::default() };
            let page = self.cloud.audit(&query).await.expect("the audit log").items;
            // A short page is the end (each audit read is itself audited: "until empty" would never end).
            after = page.last().map(|e| e.seq).filter(|_| page.len() == PAGE as usize);
            calls.extend(page.into_iter().filter(|e| e.role == "user"));
            if after.is_none() {
                return calls;
            }
        }
    }
}

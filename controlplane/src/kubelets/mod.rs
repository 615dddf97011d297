//! Simulated kubelets: a Node for every running emulator instance, registered the way a kubelet started with
//! `--cloud-provider=external` registers itself, and kept alive the way a kubelet keeps itself alive (a Lease
//! in `kube-node-lease` renewed every 10 s, a Ready status heartbeat). When an instance stops, is terminated or
//! is reclaimed, its kubelet falls silent — the controller manager then marks the Node NotReady/Unknown as for a
//! dead machine; the Node itself is left for the CCM's lifecycle controller to delete. When the instance runs
//! again, the kubelet resumes; a Node deleted while its instance runs is registered again.
//!
//! Cost per poll: one paged instance listing from the emulator; Nodes are watched, not listed; lease renewals
//! and status heartbeats run with bounded concurrency.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fakecloud_api::{Instance, InstanceState, ListInstancesQuery};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};

/// The taint a kubelet with `--cloud-provider=external` registers with, until a CCM initializes the node.
pub const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// The annotation through which a kubelet tells the CCM which address it chose.
pub const PROVIDED_NODE_IP: &str = "alpha.kubernetes.io/provided-node-ip";
const LEASE_NAMESPACE: &str = "kube-node-lease";
/// The kubelet's defaults: lease duration 40 s, renewed every 10 s.
const LEASE_SECONDS: i32 = 40;

#[derive(Debug, Clone)]
pub struct Options {
    /// How often the emulator's instances are read.
    pub poll: Duration,
    /// How often each running node's Lease is renewed.
    pub lease_renew: Duration,
    /// How often each running node's Ready condition is re-posted (the Lease is the heartbeat that matters).
    pub status_every: Duration,
    /// What `status.nodeInfo.kubeletVersion` says.
    pub kubelet_version: String,
    /// API calls in flight at once.
    pub concurrency: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            poll: Duration::from_secs(1),
            lease_renew: Duration::from_secs(10),
            status_every: Duration::from_secs(60),
            kubelet_version: crate::pinned_kubernetes_version().to_string(),
            concurrency: 32,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error("cannot read instances from the emulator: {0}")]
    Cloud(#[from] fakecloud_api::ClientError),
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

/// The running simulation; stops when dropped.
pub struct SimulatedKubelets {
    task: tokio::task::JoinHandle<()>,
    watch: tokio::task::JoinHandle<()>,
}

impl Drop for SimulatedKubelets {
    fn drop(&mut self) {
        self.task.abort();
        self.watch.abort();
    }
}

impl SimulatedKubelets {
    /// Start simulating kubelets for the instances of `cloud` in the cluster of `kube`.
    pub async fn start(kube: kube::Client, cloud: fakecloud_api::Client, opts: Options) -> Result<Self, KubeletError> {
        let region = cloud.region().await?;
        let types: HashMap<String, (u32, u32)> =
            region.instance_types.iter().map(|t| (t.name.clone(), (t.vcpus, t.memory_mib))).collect();
        let (nodes, writer) = reflector::store::<Node>();
        let stream = reflector::reflector(writer, watcher(Api::<Node>::all(kube.clone()), watcher::Config::default()))
            .default_backoff()
            .touched_objects()
            .for_each(|_| futures::future::ready(()));
        let watch = tokio::spawn(stream);
        let sim = Arc::new(Sim { kube, cloud, opts, types, nodes });
        let task = tokio::spawn(async move { sim.run().await });
        Ok(Self { task, watch })
    }
}

struct Sim {
    kube: kube::Client,
    cloud: fakecloud_api::Client,
    opts: Options,
    types: HashMap<String, (u32, u32)>,
    nodes: Store<Node>,
}

/// What the simulation remembers about a node it runs.
#[derive(Default)]
struct Kubelet {
    /// The instance was running at the last poll.
    alive: bool,
    last_lease: Option<Instant>,
    last_status: Option<Instant>,
}

impl Sim {
    async fn run(self: Arc<Self>) {
        if let Err(e) = self.nodes.wait_until_ready().await {
            tracing::error!(error = %e, "node watch never became ready");
            return;
        }
        let mut kubelets: HashMap<String, Kubelet> = HashMap::new();
        let mut tick = tokio::time::interval(self.opts.poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = self.pass(&mut kubelets).await {
                tracing::warn!(error = %e, "simulated kubelets: pass failed; retrying next poll");
            }
        }
    }

    /// One poll: register, renew, fall silent, resume.
    async fn pass(self: &Arc<Self>, kubelets: &mut HashMap<String, Kubelet>) -> Result<(), KubeletError> {
        let query = ListInstancesQuery { page_size: Some(1000), ..Default::default() };
        let instances = self.cloud.list_all_instances(&query).await?;
        // The newest instance of a name wins (a terminated one may still be listed beside its successor).
        let mut by_name: BTreeMap<String, Instance> = BTreeMap::new();
        for i in instances {
            let running = i.state == InstanceState::Running;
            match by_name.get(&i.name) {
                Some(existing) if existing.state == InstanceState::Running && !running => {}
                _ => {
                    by_name.insert(i.name.clone(), i);
                }
            }
        }
        let now = Instant::now();
        let mut work = Vec::new();
        for (name, inst) in &by_name {
            let k = kubelets.entry(name.clone()).or_default();
            let running = inst.state == InstanceState::Running;
            if !running {
                if k.alive {
                    tracing::info!(node = %name, state = %inst.state, "instance not running; kubelet falls silent");
                }
                k.alive = false;
                continue;
            }
            let node = self.nodes.get(&reflector::ObjectRef::new(name));
            let resumed = !k.alive;
            k.alive = true;
            let status_due = resumed || k.last_status.is_none_or(|t| now.duration_since(t) >= self.opts.status_every);
            let lease_due = resumed || k.last_lease.is_none_or(|t| now.duration_since(t) >= self.opts.lease_renew);
            let job = match node {
                None => Job::Register,
                Some(n) if status_due => Job::Heartbeat {
                    uid: n.metadata.uid.clone().unwrap_or_default(),
                    status: true,
                    transition: resumed,
                },
                Some(n) if lease_due => {
                    Job::Heartbeat { uid: n.metadata.uid.clone().unwrap_or_default(), status: false, transition: false }
                }
                Some(_) => continue,
            };
            if matches!(job, Job::Register | Job::Heartbeat { status: true, .. }) {
                k.last_status = Some(now);
            }
            k.last_lease = Some(now);
            work.push((inst.clone(), job));
        }
        kubelets.retain(|name, _| by_name.contains_key(name));
        let results: Vec<Result<(), KubeletError>> = futures::stream::iter(work)
            .map(|(inst, job)| {
                let sim = self.clone();
                async move { sim.act(&inst, job).await }
            })
            .buffer_unordered(self.opts.concurrency)
            .collect()
            .await;
        for r in results {
            if let Err(e) = r {
                tracing::warn!(error = %e, "simulated kubelet call failed; retrying next poll");
            }
        }
        Ok(())
    }

    async fn act(&self, inst: &Instance, job: Job) -> Result<(), KubeletError> {
        let nodes = Api::<Node>::all(self.kube.clone());
        let uid = match job {
            Job::Register => {
                let created = match nodes.create(&PostParams::default(), &self.node(inst)).await {
                    Ok(n) => n,
                    // Registered meanwhile (or by an earlier run): take it over, as a restarted kubelet would.
                    Err(kube::Error::Api(s)) if s.is_already_exists() => nodes.get(&inst.name).await?,
                    Err(e) => return Err(e.into()),
                };
                tracing::info!(node = %inst.name, ip = %inst.private_ip, "registered node");
                self.post_status(&nodes, inst, true).await?;
                created.metadata.uid.unwrap_or_default()
            }
            Job::Heartbeat { uid, status, transition } => {
                if status {
                    self.post_status(&nodes, inst, transition).await?;
                }
                uid
            }
        };
        self.renew_lease(&inst.name, &uid).await
    }

    fn node(&self, inst: &Instance) -> Node {
        let (cpus, mem) = self.types.get(&inst.instance_type).copied().unwrap_or((2, 4096));
        let capacity: BTreeMap<String, Quantity> = [
            ("cpu".to_string(), Quantity(cpus.to_string())),
            ("memory".to_string(), Quantity(format!("{mem}Mi"))),
            ("pods".to_string(), Quantity("110".into())),
            ("ephemeral-storage".to_string(), Quantity("100Gi".into())),
        ]
        .into();
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
        Node {
            metadata: ObjectMeta {
                name: Some(inst.name.clone()),
                labels: Some(labels),
                annotations: Some([(PROVIDED_NODE_IP.to_string(), inst.private_ip.to_string())].into()),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                taints: Some(vec![Taint {
                    key: UNINITIALIZED_TAINT.into(),
                    value: Some("true".into()),
                    effect: "NoSchedule".into(),
                    time_added: None,
                }]),
                ..Default::default()
            }),
            status: Some(NodeStatus {
                capacity: Some(capacity.clone()),
                allocatable: Some(capacity),
                node_info: Some(NodeSystemInfo {
                    kubelet_version: self.opts.kubelet_version.clone(),
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

    /// Post the kubelet's view: addresses, and Ready with no pressure. Conditions merge by type; the transition
    /// time moves only when the node (re)starts, as a kubelet's does only when a condition changes.
    async fn post_status(&self, nodes: &Api<Node>, inst: &Instance, transition: bool) -> Result<(), KubeletError> {
        let now = Time(jiff::Timestamp::now());
        let cond = |type_: &str, status: &str, reason: &str, message: &str| NodeCondition {
            type_: type_.into(),
            status: status.into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            last_heartbeat_time: Some(now.clone()),
            last_transition_time: transition.then(|| now.clone()),
        };
        let status = serde_json::json!({
            "status": {
                "addresses": [
                    NodeAddress { type_: "InternalIP".into(), address: inst.private_ip.to_string() },
                    NodeAddress { type_: "Hostname".into(), address: inst.name.clone() },
                ],
                "conditions": [
                    cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                    cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                    cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                    cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
                ],
            }
        });
        nodes.patch_status(&inst.name, &PatchParams::default(), &Patch::Strategic(status)).await?;
        Ok(())
    }

    async fn renew_lease(&self, name: &str, node_uid: &str) -> Result<(), KubeletError> {
        let leases = Api::<Lease>::namespaced(self.kube.clone(), LEASE_NAMESPACE);
        let spec = LeaseSpec {
            holder_identity: Some(name.to_string()),
            lease_duration_seconds: Some(LEASE_SECONDS),
            renew_time: Some(MicroTime(jiff::Timestamp::now())),
            ..Default::default()
        };
        let patch = serde_json::json!({ "spec": spec });
        match leases.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.is_not_found() => {
                // Owned by the Node, as the kubelet does, so deleting the Node removes its Lease.
                let lease = Lease {
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
                    spec: Some(spec),
                };
                match leases.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(()),
                    Err(e) => Err(e.into()),
                }
            }
            Err(e) => Err(e.into()),
        }
    }
}

enum Job {
    Register,
    /// Renew the Lease; with `status`, post the conditions too; with `transition`, as newly Ready.
    Heartbeat {
        uid: String,
        status: bool,
        transition: bool,
    },
}

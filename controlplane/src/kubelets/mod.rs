//! Simulated kubelets: a Node for every running emulator instance, registered the way a kubelet started with
//! `--cloud-provider=external` registers itself, and kept alive by **kwok** (`sigs.k8s.io/kwok`, built by
//! `make kwok`): kwok renews each Node's Lease in `kube-node-lease` at a kubelet's cadence and runs the pods
//! bound to it, with IPs from the Node's pod CIDR. When an instance stops, is terminated or is reclaimed, or its
//! machine hangs, its kubelet falls silent: this module takes the Node's Lease from kwok (kwok renews only a
//! Lease it holds), so the controller manager marks the Node NotReady/Unknown as for a dead machine; the Node
//! itself is left for the CCM's lifecycle controller to delete. When the machine runs again, the Lease is
//! released and kwok renews it again; a Node deleted while its instance runs is registered again.
//!
//! What stays here rather than in a kwok stage — registration, the Node status (NotReady for a window after a
//! start, else Ready; reported on a change at once, else every 5 minutes as a kubelet does) — and why, is in
//! [`schedule`]. One kwok process per simulation, managing only the Nodes this simulation registered.
//!
//! Two loops, so that a slow or failing cloud API never stops the machines (a cloud's API can be down while its
//! machines run):
//! - the *instance poller* lists the running instances, one paged call per poll, and publishes the latest
//!   answer; on an error or timeout the previous answer stands;
//! - the *kubelet loop* plans, every poll, the calls that are due against the last published instances and a
//!   watch of the Nodes, and runs them with bounded concurrency.
//!
//! Cost with the defaults, per Node: kwok's Lease renewal every 10 s and a status report every 5 minutes, i.e.
//! about 103 API calls a second for 1,000 Nodes (a real kubelet's), against 150 when this module posted status
//! every 20 s itself.

mod kwok;
mod objects;
mod schedule;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fakecloud_api::{Instance, InstanceState, ListInstancesQuery};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

pub use objects::{LEASE_NAMESPACE, LEASE_SECONDS, PROVIDED_NODE_IP, SILENCING_HOLDER, UNINITIALIZED_TAINT};
use objects::{Shape, Silence};
pub use schedule::NO_KUBELET_TAG;
use schedule::{Action, Job, Kubelet, Periods};

/// A listing that takes longer than this is abandoned (the previous one stands) and retried at the next poll.
const LIST_TIMEOUT: Duration = Duration::from_secs(10);
/// One kubelet's calls in a round; beyond this they count as failed and back off.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The annotation by which kwok (`--manage-nodes-with-annotation-selector`) knows this simulation's Nodes.
pub const SIMULATED_BY: &str = "fakecloud.io/simulated-by";

#[derive(Debug, Clone)]
pub struct Options {
    /// How often the emulator's instances are read, and how often due calls are looked for.
    pub poll: Duration,
    /// The Lease's duration (the kubelet's `--node-lease-duration-seconds`, 40); kwok renews it every quarter
    /// of that, as the kubelet does.
    pub lease_seconds: u32,
    /// How often a running node's status is reported when nothing changed (the kubelet's
    /// `nodeStatusReportFrequency`: 5 minutes).
    pub status_every: Duration,
    /// What `status.nodeInfo.kubeletVersion` says.
    pub kubelet_version: String,
    /// API calls in flight at once.
    pub concurrency: usize,
    /// Only instances with this tag (`key=value`, or `key` for "has the tag") get a kubelet; `None`: all. A
    /// cluster that also has real kubelets (kind's nodes, adopted as instances) needs this.
    pub instance_tag: Option<String>,
    /// Taints every Node registers with beside the uninitialized one (the kubelet's `--register-with-taints`),
    /// e.g. one that keeps real pods off machines that cannot run them.
    pub register_with_taints: Vec<Taint>,
    /// How long a started machine's Node reports NotReady (network not ready) before Ready, as a real kubelet
    /// does until its CNI plugin is up.
    pub not_ready_for: Duration,
    /// The kwok binary (its pod stages beside it, as `make kwok` leaves them); `None`: found as
    /// [`crate::kwok`] finds it.
    pub kwok: Option<PathBuf>,
    /// Where kwok's output goes; `None`: a file in a temporary directory, gone with the simulation.
    pub kwok_log: Option<PathBuf>,
    /// What each Node is named.
    pub node_names: NodeNames,
}

/// What a simulated kubelet names its Node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum NodeNames {
    /// The instance's name, which fakecloud's CCMs look instances up by.
    #[default]
    Instance,
    /// The instance's private DNS name (`ip-10-0-1-5.<region>.compute.internal`), as a kubelet on EC2 names its
    /// Node: its hostname. cloud-provider-aws finds the instance by it (`private-dns-name`).
    PrivateDns,
}

impl NodeNames {
    /// The Node name of `inst`.
    pub fn of(self, inst: &Instance) -> String {
        match self {
            Self::Instance => inst.name.clone(),
            Self::PrivateDns => fakecloud_api::net::private_dns_name(&inst.id, inst.private_ip, &inst.region),
        }
    }
}

/// The default Ready=False window after a machine starts: a kind node's, from its kubelet's registration until
/// the CNI config is written. On this project's kind clusters it measured 46–59 s, most of it `make kind-up`
/// loading images before the VPC router writes the config; 10 s is the order of a node whose CNI plugin starts
/// at once. See the book, docs/book/src/getting-started.md.
pub const KIND_NOT_READY_FOR: Duration = Duration::from_secs(10);

impl Default for Options {
    fn default() -> Self {
        Self {
            poll: Duration::from_secs(1),
            lease_seconds: LEASE_SECONDS,
            status_every: Duration::from_secs(300),
            kubelet_version: crate::pinned_kubernetes_version().to_string(),
            concurrency: 32,
            instance_tag: None,
            register_with_taints: Vec::new(),
            not_ready_for: KIND_NOT_READY_FOR,
            kwok: None,
            kwok_log: None,
            node_names: NodeNames::Instance,
        }
    }
}

/// A taint as the kubelet's `--register-with-taints` takes it: `key[=value]:Effect`.
pub fn parse_taint(s: &str) -> Result<Taint, String> {
    const EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];
    let (key_value, effect) =
        s.rsplit_once(':').ok_or_else(|| format!("{s:?} is not key[=value]:Effect (the effect is missing)"))?;
    if !EFFECTS.contains(&effect) {
        return Err(format!("{s:?}: the effect {effect:?} is not one of {}", EFFECTS.join(", ")));
    }
    let (key, value) = match key_value.split_once('=') {
        Some((k, v)) => (k, Some(v.to_string())),
        None => (key_value, None),
    };
    if key.is_empty() {
        return Err(format!("{s:?}: the key is empty"));
    }
    Ok(Taint { key: key.to_string(), value, effect: effect.to_string(), time_added: None })
}

#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error("cannot read the region from the emulator: {0}")]
    Cloud(#[from] fakecloud_api::ClientError),
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("no answer from the Kubernetes API within {0:?}")]
    Timeout(Duration),
    #[error("invalid options: {0}")]
    Options(&'static str),
    #[error(transparent)]
    Setup(#[from] crate::Error),
}

/// The running simulation; stops (kwok too) when dropped.
pub struct SimulatedKubelets {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    kwok: kwok::KwokProcess,
}

impl Drop for SimulatedKubelets {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl SimulatedKubelets {
    /// Start simulating kubelets for the instances of `cloud` in the cluster `kubeconfig` names, with kwok
    /// (see [`Options::kwok`]). Fails if kwok is missing or the region (the instance-type catalog)
    /// cannot be read; later errors are logged and retried.
    pub async fn start(kubeconfig: &Path, cloud: fakecloud_api::Client, opts: Options) -> Result<Self, KubeletError> {
        if opts.poll.is_zero() || opts.status_every.is_zero() {
            return Err(KubeletError::Options("poll and status_every must be above zero"));
        }
        if opts.lease_seconds < 4 {
            return Err(KubeletError::Options("lease_seconds must be at least 4 (kwok renews every quarter)"));
        }
        if opts.concurrency == 0 {
            return Err(KubeletError::Options("concurrency must be at least 1"));
        }
        let binaries = match &opts.kwok {
            Some(binary) => crate::kwok_at(binary.clone())?,
            None => crate::kwok()?,
        };
        let kube = crate::kubeconfig::client(kubeconfig).await?;
        let region = cloud.region().await?;
        let shapes: HashMap<String, Shape> = region
            .instance_types
            .iter()
            .map(|t| (t.name.clone(), Shape { vcpus: t.vcpus, memory_mib: t.memory_mib }))
            .collect();
        // Each simulation manages its own Nodes: a cluster may hold several (one per tag).
        let managed_by = format!("kubelets-{:016x}", schedule::fnv1a(opts.instance_tag.as_deref().unwrap_or("")));
        let kwok = kwok::KwokProcess::start(
            &binaries,
            kubeconfig,
            (SIMULATED_BY, &managed_by),
            opts.lease_seconds,
            opts.kwok_log.as_deref(),
        )?;

        let (nodes, writer) = reflector::store::<Node>();
        let node_watch = reflector::reflector(writer, watcher(Api::<Node>::all(kube.clone()), Default::default()))
            .default_backoff()
            .for_each(|event| {
                if let Err(e) = event {
                    tracing::warn!(error = %e, "simulated kubelets: Node watch failed; retrying");
                }
                futures::future::ready(())
            });
        let (publish, running) = watch::channel(None);
        let poller = poll_instances(cloud, opts.poll, opts.instance_tag.clone(), opts.node_names, publish);
        let sim = Arc::new(Sim { kube, opts, shapes, nodes, managed_by, kwok: kwok.watch() });
        let kubelets = sim.run(running);
        Ok(Self { tasks: vec![tokio::spawn(node_watch), tokio::spawn(poller), tokio::spawn(kubelets)], kwok })
    }

    /// How kwok exited (its status and the end of its log), if it has: the simulated Nodes' Leases are then no
    /// longer renewed, and a process that runs only this simulation should stop and say so.
    pub fn kwok_exited(&self) -> Option<String> {
        self.kwok.exited()
    }
}

/// What the poller last saw: the running instances by name, and the names of the hung machines among them.
type Running = Option<Arc<(BTreeMap<String, Instance>, BTreeSet<String>)>>;

/// The instance poller: one listing of the running instances (with `tag`) and one of the hung machines per
/// `poll`, published; failures keep the last.
async fn poll_instances(
    cloud: fakecloud_api::Client,
    poll: Duration,
    tag: Option<String>,
    names: NodeNames,
    publish: watch::Sender<Running>,
) {
    let query =
        ListInstancesQuery { state: Some(InstanceState::Running), tag, page_size: Some(1000), ..Default::default() };
    let mut tick = tokio::time::interval(poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tick.tick().await;
        let listed = async {
            let mut running = cloud.list_all_instances(&query).await?;
            let hung: BTreeSet<String> = match cloud.list_hangs().await {
                Ok(h) => h.items.into_iter().map(|h| h.name).collect(),
                // Hangs are the admin's to see: with the user token no machine is ever hung.
                Err(e) if e.status() == Some(403) => BTreeSet::new(),
                Err(e) => return Err(e),
            };
            // From here on a machine is known by its Node's name.
            let mut hung_nodes = BTreeSet::new();
            for inst in &mut running {
                let node = names.of(inst);
                if hung.contains(&inst.name) {
                    hung_nodes.insert(node.clone());
                }
                inst.name = node;
            }
            let hung = hung_nodes;
            Ok::<_, fakecloud_api::ClientError>((running, hung))
        };
        let listed = match tokio::time::timeout(LIST_TIMEOUT, listed).await {
            Ok(Ok(list)) => Ok(list),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {LIST_TIMEOUT:?}")),
        };
        match listed {
            Ok((list, hung)) => {
                if std::mem::take(&mut failing) {
                    tracing::info!("simulated kubelets: the emulator answers again");
                }
                publish.send_replace(Some(Arc::new((schedule::running_by_name(list), hung))));
            }
            // Logged once per outage: a fault-injection test may keep the API failing for minutes.
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "simulated kubelets: cannot list instances; the machines keep running as last seen");
            }
            Err(e) => tracing::debug!(error = %e, "simulated kubelets: listing instances still fails"),
        }
    }
}

struct Sim {
    kube: kube::Client,
    opts: Options,
    shapes: HashMap<String, Shape>,
    nodes: Store<Node>,
    managed_by: String,
    kwok: kwok::Watch,
}

impl Sim {
    fn periods(&self) -> Periods {
        Periods { poll: self.opts.poll, status: self.opts.status_every, not_ready: self.opts.not_ready_for }
    }

    /// The kubelet loop.
    async fn run(self: Arc<Self>, mut running: watch::Receiver<Running>) {
        if let Err(e) = self.nodes.wait_until_ready().await {
            tracing::error!(error = %e, "simulated kubelets: the Node watch never started; stopping");
            return;
        }
        // Nothing to do until the instances have been read once.
        if running.wait_for(Option::is_some).await.is_err() {
            return;
        }
        let mut kubelets: HashMap<String, Kubelet> = HashMap::new();
        let mut tick = tokio::time::interval(self.opts.poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.kwok.check();
            let Some(current) = running.borrow_and_update().clone() else { continue };
            let (machines, hung) = &*current;
            self.round(machines, hung, &mut kubelets).await;
        }
    }

    /// One round: plan what is due, run it with bounded concurrency, record the outcomes.
    async fn round(
        self: &Arc<Self>,
        running: &BTreeMap<String, Instance>,
        hung: &BTreeSet<String>,
        kubelets: &mut HashMap<String, Kubelet>,
    ) {
        let now = Instant::now();
        let node_of = |name: &str| self.nodes.get(&ObjectRef::new(name));
        let jobs = schedule::plan(running, hung, node_of, kubelets, now, Timestamp::now(), &self.periods());
        if jobs.is_empty() {
            return;
        }
        let total = jobs.len();
        let outcomes: Vec<(Job, Result<(), KubeletError>)> = futures::stream::iter(jobs)
            .map(|job| {
                let sim = self.clone();
                async move {
                    let result = match tokio::time::timeout(CALL_TIMEOUT, sim.act(&job)).await {
                        Ok(r) => r,
                        Err(_) => Err(KubeletError::Timeout(CALL_TIMEOUT)),
                    };
                    (job, result)
                }
            })
            .buffer_unordered(self.opts.concurrency)
            .collect()
            .await;
        let periods = self.periods();
        let mut failed: Option<(String, KubeletError)> = None;
        let mut failures = 0;
        for (job, result) in outcomes {
            let name = &job.name;
            let Some(k) = kubelets.get_mut(name) else { continue };
            match result {
                Ok(()) => k.succeeded(name, &job.action, now, &periods),
                Err(e) => {
                    k.failed(Instant::now(), &periods);
                    failures += 1;
                    tracing::debug!(node = %name, error = %e, "simulated kubelet call failed");
                    failed.get_or_insert((name.clone(), e));
                }
            }
        }
        // One line per round, not one per node: with the API server down, a thousand nodes fail together.
        if let Some((node, error)) = failed {
            tracing::warn!(failures, of = total, first = %node, %error, "simulated kubelet calls failed; backing off");
        }
    }

    async fn act(&self, job: &Job) -> Result<(), KubeletError> {
        match &job.action {
            Action::Register { instance, ready } => self.register(instance, *ready).await,
            Action::Report { status } => self.post_status(&job.name, status).await,
            Action::Resume { status } => {
                self.post_status(&job.name, status).await?;
                self.release_lease(&job.name).await?;
                tracing::info!(node = %job.name, "kubelet reports again");
                Ok(())
            }
            Action::Silence { uid, why } => self.silence(&job.name, uid, *why).await,
        }
    }

    async fn post_status(&self, name: &str, status: &serde_json::Value) -> Result<(), KubeletError> {
        let nodes = Api::<Node>::all(self.kube.clone());
        nodes.patch_status(name, &PatchParams::default(), &Patch::Strategic(status)).await?;
        Ok(())
    }

    /// Register the Node (one create: the API server keeps the status given on create); kwok makes its Lease.
    async fn register(&self, inst: &Instance, ready: bool) -> Result<(), KubeletError> {
        let nodes = Api::<Node>::all(self.kube.clone());
        let shape = self.shapes.get(&inst.instance_type).copied().unwrap_or(Shape::FALLBACK);
        let now = Timestamp::now();
        let o = &self.opts;
        let managed_by = (SIMULATED_BY, self.managed_by.as_str());
        let node = objects::node(inst, shape, &o.kubelet_version, &o.register_with_taints, managed_by, now, ready);
        match nodes.create(&PostParams::default(), &node).await {
            Ok(_) => tracing::info!(node = %inst.name, ip = %inst.private_ip, "registered node"),
            // Registered already (by this simulation a moment ago — the watch lags — or before a restart): carry
            // on with that Node, as a restarted kubelet does.
            Err(kube::Error::Api(s)) if s.is_already_exists() => {
                let current = nodes.get(&inst.name).await?;
                self.post_status(&inst.name, &objects::status_patch(inst, &current, now, ready)).await?;
            }
            Err(e) => return Err(e.into()),
        }
        // An earlier Node of the name may have left a silenced Lease behind (not yet garbage-collected).
        self.release_lease(&inst.name).await
    }

    /// Take the Node's Lease from kwok, or make it taken when there is none yet.
    async fn silence(&self, name: &str, node_uid: &str, why: Silence) -> Result<(), KubeletError> {
        let leases = Api::<Lease>::namespaced(self.kube.clone(), LEASE_NAMESPACE);
        let patch = objects::silencing_patch(why, Timestamp::now());
        match leases.patch(name, &PatchParams::default(), &Patch::Merge(patch)).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_not_found() => {
                let lease = objects::silencing_lease(name, node_uid, why, Timestamp::now());
                leases.create(&PostParams::default(), &lease).await?;
            }
            Err(e) => return Err(e.into()),
        }
        tracing::info!(node = %name, holder = %why.holder(), "took the Node's Lease: its kubelet is silent");
        Ok(())
    }

    /// Delete the Node's Lease if this simulation holds it (kwok then makes a new one and renews it); a Lease
    /// kwok holds is left alone.
    async fn release_lease(&self, name: &str) -> Result<(), KubeletError> {
        let leases = Api::<Lease>::namespaced(self.kube.clone(), LEASE_NAMESPACE);
        let Some(lease) = leases.get_opt(name).await? else { return Ok(()) };
        if !objects::is_silencing(&lease) {
            return Ok(());
        }
        let preconditions = Preconditions { resource_version: lease.metadata.resource_version, uid: None };
        match leases.delete(name, &DeleteParams { preconditions: Some(preconditions), ..Default::default() }).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_named_by_its_instance_or_as_a_kubelet_on_ec2_names_it() {
        let inst = objects::tests::instance("node-a", "10.0.1.5");
        assert_eq!(NodeNames::Instance.of(&inst), "node-a");
        assert_eq!(NodeNames::PrivateDns.of(&inst), "ip-10-0-1-5.local-1.compute.internal");
    }

    #[test]
    fn taints_parse_as_the_kubelet_flag_takes_them() {
        let t = parse_taint("fakecloud.io/simulated=true:NoSchedule").expect("a taint");
        assert_eq!(
            (t.key.as_str(), t.value.as_deref(), t.effect.as_str()),
            ("fakecloud.io/simulated", Some("true"), "NoSchedule")
        );
        let t = parse_taint("dedicated:NoExecute").expect("a taint");
        assert_eq!((t.key.as_str(), t.value, t.effect.as_str()), ("dedicated", None, "NoExecute"));
        assert!(parse_taint("dedicated").unwrap_err().contains("effect is missing"));
        assert!(parse_taint("a=b:Sometimes").unwrap_err().contains("not one of NoSchedule"));
        assert!(parse_taint("=b:NoSchedule").unwrap_err().contains("key is empty"));
    }
}

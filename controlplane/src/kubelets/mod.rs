//! Simulated kubelets: a Node for every running emulator instance, registered the way a kubelet started with
//! `--cloud-provider=external` registers itself, and kept alive the way a kubelet keeps itself alive (a Lease
//! in `kube-node-lease` renewed every 10 s, a Ready status heartbeat). When an instance stops, is terminated or
//! is reclaimed, its kubelet falls silent — the controller manager then marks the Node NotReady/Unknown as for a
//! dead machine; the Node itself is left for the CCM's lifecycle controller to delete. When the instance runs
//! again, the kubelet resumes; a Node deleted while its instance runs is registered again.
//!
//! Two loops, so that a slow or failing cloud API never stops the machines' heartbeats (a cloud's API can be
//! down while its machines run):
//! - the *instance poller* lists the running instances, one paged call per poll, and publishes the latest
//!   answer; on an error or timeout the previous answer stands;
//! - the *kubelet loop* plans, every poll, the calls that are due (see [`schedule`]) against the last published
//!   instances and a watch of the Nodes, and runs them with bounded concurrency.
//!
//! Cost with the defaults: per Node a Lease renewal every 10 s and a status patch every 20 s, i.e. 150 API
//! calls a second for 1,000 Nodes, spread over the periods.

mod objects;
mod schedule;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fakecloud_api::{Instance, InstanceState, ListInstancesQuery};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

use objects::Shape;
pub use objects::{LEASE_NAMESPACE, LEASE_SECONDS, PROVIDED_NODE_IP, UNINITIALIZED_TAINT};
pub use schedule::NO_KUBELET_TAG;
use schedule::{Action, Job, Kubelet, Periods};

/// A listing that takes longer than this is abandoned (the previous one stands) and retried at the next poll.
const LIST_TIMEOUT: Duration = Duration::from_secs(10);
/// One kubelet's calls in a round; beyond this they count as failed and back off.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct Options {
    /// How often the emulator's instances are read, and how often due heartbeats are looked for.
    pub poll: Duration,
    /// How often each running node's Lease is renewed (the kubelet's default: 10 s, for a 40 s lease).
    pub lease_renew: Duration,
    /// How often each running node's conditions are re-posted with a fresh `lastHeartbeatTime`.
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
}

/// The default Ready=False window after a machine starts: a kind node's, from its kubelet's registration until
/// the CNI config is written. On this project's kind clusters it measured 46–59 s, most of it `make kind-up`
/// loading images before the VPC router writes the config; 10 s is the order of a node whose CNI plugin starts
/// at once. See the README.
pub const KIND_NOT_READY_FOR: Duration = Duration::from_secs(10);

impl Default for Options {
    fn default() -> Self {
        Self {
            poll: Duration::from_secs(1),
            lease_renew: Duration::from_secs(10),
            status_every: Duration::from_secs(20),
            kubelet_version: crate::pinned_kubernetes_version().to_string(),
            concurrency: 32,
            instance_tag: None,
            register_with_taints: Vec::new(),
            not_ready_for: KIND_NOT_READY_FOR,
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
}

/// The running simulation; stops when dropped.
pub struct SimulatedKubelets {
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for SimulatedKubelets {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl SimulatedKubelets {
    /// Start simulating kubelets for the instances of `cloud` in the cluster of `kube`. Fails only if the
    /// region (the instance-type catalog) cannot be read; later errors are logged and retried.
    pub async fn start(kube: kube::Client, cloud: fakecloud_api::Client, opts: Options) -> Result<Self, KubeletError> {
        if opts.poll.is_zero() || opts.lease_renew.is_zero() || opts.status_every.is_zero() {
            return Err(KubeletError::Options("poll, lease_renew and status_every must be above zero"));
        }
        if opts.concurrency == 0 {
            return Err(KubeletError::Options("concurrency must be at least 1"));
        }
        let region = cloud.region().await?;
        let shapes: HashMap<String, Shape> = region
            .instance_types
            .iter()
            .map(|t| (t.name.clone(), Shape { vcpus: t.vcpus, memory_mib: t.memory_mib }))
            .collect();

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
        let poller = poll_instances(cloud, opts.poll, opts.instance_tag.clone(), publish);
        let sim = Arc::new(Sim { kube, opts, shapes, nodes });
        let kubelets = sim.run(running);
        Ok(Self { tasks: vec![tokio::spawn(node_watch), tokio::spawn(poller), tokio::spawn(kubelets)] })
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
            let running = cloud.list_all_instances(&query).await?;
            let hung = match cloud.list_hangs().await {
                Ok(h) => h.items.into_iter().map(|h| h.name).collect(),
                // Hangs are the admin's to see: with the user token no machine is ever hung.
                Err(e) if e.status() == Some(403) => BTreeSet::new(),
                Err(e) => return Err(e),
            };
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
}

impl Sim {
    fn periods(&self) -> Periods {
        Periods {
            poll: self.opts.poll,
            lease: self.opts.lease_renew,
            status: self.opts.status_every,
            not_ready: self.opts.not_ready_for,
        }
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
            let name = &job.instance.name;
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
        let inst = &job.instance;
        match &job.action {
            Action::Register { ready } => self.register(inst, *ready).await,
            Action::Heartbeat { uid, status, lease } => {
                if let Some(patch) = status {
                    let nodes = Api::<Node>::all(self.kube.clone());
                    nodes.patch_status(&inst.name, &PatchParams::default(), &Patch::Strategic(patch)).await?;
                }
                if *lease {
                    self.renew_lease(&inst.name, uid, false).await?;
                }
                Ok(())
            }
        }
    }

    /// Register the Node (one create: the API server keeps the status given on create), then its Lease.
    async fn register(&self, inst: &Instance, ready: bool) -> Result<(), KubeletError> {
        let nodes = Api::<Node>::all(self.kube.clone());
        let shape = self.shapes.get(&inst.instance_type).copied().unwrap_or(Shape::FALLBACK);
        let now = Timestamp::now();
        let node = objects::node(inst, shape, &self.opts.kubelet_version, &self.opts.register_with_taints, now, ready);
        match nodes.create(&PostParams::default(), &node).await {
            Ok(created) => {
                tracing::info!(node = %inst.name, ip = %inst.private_ip, "registered node");
                self.renew_lease(&inst.name, created.metadata.uid.as_deref().unwrap_or_default(), true).await
            }
            // Registered already (by this simulation a moment ago — the watch lags — or before a restart): carry
            // on with that Node, as a restarted kubelet does.
            Err(kube::Error::Api(s)) if s.is_already_exists() => {
                let current = nodes.get(&inst.name).await?;
                let patch = objects::status_patch(inst, &current, now, ready);
                nodes.patch_status(&inst.name, &PatchParams::default(), &Patch::Strategic(patch)).await?;
                self.renew_lease(&inst.name, current.metadata.uid.as_deref().unwrap_or_default(), false).await
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Renew the Lease, creating it when missing. `fresh`: the Node was just created, so try creating first.
    async fn renew_lease(&self, name: &str, node_uid: &str, fresh: bool) -> Result<(), KubeletError> {
        let leases = Api::<Lease>::namespaced(self.kube.clone(), LEASE_NAMESPACE);
        let now = Timestamp::now();
        let create = async || match leases.create(&PostParams::default(), &objects::lease(name, node_uid, now)).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(false),
            Err(e) => Err(e),
        };
        // A fresh Node's Lease may still exist from an earlier Node of that name (not yet garbage-collected):
        // then the renewal below takes it over.
        if fresh && create().await? {
            return Ok(());
        }
        let patch = objects::lease_renewal(name, node_uid, now);
        match leases.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.is_not_found() => {
                create().await?;
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

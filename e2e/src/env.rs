//! The conformance suite's view of a cluster, whatever deployed it: the Kubernetes API as its admin, the
//! emulator's API and audit log with its admin token, and a CCM that can be killed (a process, or the pod that
//! holds the leader Lease). [`case`] runs one case on it:
//!
//! - the case gets its own namespaces ([`Env::namespace`]) and machines ([`Env::create_instance`]: tagged,
//!   given a simulated kubelet of the suite's own, with a taint that keeps real pods off them);
//! - on an existing cluster, what the case changed is put back afterwards (quotas, fault rules, rate limits
//!   and presets, outages), its namespaces deleted (and so their load balancers) and its machines and Nodes removed, and
//!   what earlier runs left behind is removed before it starts;
//! - when it fails, the report shows the events about its objects, the CCM's last cloud calls from the audit
//!   log, and the tail of the CCM's log.
//!
//! Everything a case asserts is seen through [`Probe`] (the Kubernetes API and the emulator's audit log), never
//! through CCM internals, so the same case runs on the local backend and on kind.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use fakecloud_api::{
    Client, CreateInstanceRequest, Instance, InstanceState, ListInstancesQuery, LoadBalancer, LoadBalancerState,
    QuotaName, SetRateLimitRequest,
};
use fakecloud_controlplane::aws_cluster::{self, AwsCli, CLUSTER_ID, cluster_tag};
use fakecloud_controlplane::kubelets::{self, NodeNames, SimulatedKubelets};
use futures::FutureExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Pod, Service, Taint};
use kube::api::{Api, DeleteParams, ListParams, LogParams};
use tokio::sync::Mutex;

use crate::backend::{Backend, Existing, LocalCcm, Timing};
use crate::local::{Ccm, CcmLauncher, Cluster, ClusterOptions, Emulator, LOG_TAIL, Rates};
use crate::{HANG, Probe, condition, poll, until};

/// The tag on every machine the suite makes; its value names the case run.
pub const CASE_TAG: &str = "fakecloud.io/e2e-case";
/// The taint the suite's simulated machines register with: they cannot run pods, so nothing real (a CCM
/// replica, say) may be scheduled onto them.
pub const SIMULATED_TAINT: &str = "fakecloud.io/simulated-kubelet";
/// The local CCM's flags beside the harness's: the route controller every second, and leader election fast
/// enough that a killed leader is replaced within a case's patience.
const LOCAL_CCM_ARGS: [&str; 4] = [
    "--route-reconciliation-period=1s",
    "--leader-elect-lease-duration=4s",
    "--leader-elect-renew-deadline=3s",
    "--leader-elect-retry-period=1s",
];
/// Where the CCM's leader-election Lease is on the local backend (the CCM's defaults).
pub(crate) const LOCAL_LEASE: (&str, &str) = ("kube-system", "cloud-controller-manager");
/// How many of the CCM's cloud calls a failure report shows.
const AUDIT_TAIL: usize = 40;
/// How many events a failure report shows.
const EVENTS_TAIL: usize = 40;

/// The CCM the local backend runs ([`LocalCcm`]), and how.
#[derive(Debug, Clone)]
struct LocalProcess {
    bin: std::path::PathBuf,
    args: Vec<&'static str>,
    upstream: bool,
}

impl LocalProcess {
    /// `fakecloud_ccm`: the case's build of fakecloud-ccm, run unless `FAKECLOUD_E2E_CCM` names another.
    fn new(fakecloud_ccm: &str) -> Self {
        let which = LocalCcm::from_env();
        let args = LOCAL_CCM_ARGS.iter().chain(which.extra_args()).copied().collect();
        Self { bin: which.binary(fakecloud_ccm), args, upstream: matches!(which, LocalCcm::Upstream(_)) }
    }

    fn start(&self, cluster: &Cluster) -> Ccm {
        self.start_with(&cluster.ccm_launcher())
    }

    fn start_with(&self, launcher: &CcmLauncher) -> Ccm {
        launcher.start(self.bin.as_os_str(), &self.args)
    }
}

/// How often the local backend looks for a CCM replica that exited.
const RESTART_CHECK: Duration = Duration::from_millis(500);

/// The local backend's CCM replicas kept running as their Deployment keeps its pods: one that exits by itself — a
/// CCM exits when it loses its Lease, which a renewal late on a busy machine does — is started again. (A replica
/// the case kills is replaced by [`Env::kill_ccm_leader`] itself.) Stopped when dropped.
struct Restarter(tokio::task::JoinHandle<()>);

impl Restarter {
    fn start(launcher: CcmLauncher, ccm: LocalProcess, replicas: Arc<Mutex<Vec<Ccm>>>) -> Self {
        Self(tokio::spawn(async move {
            loop {
                tokio::time::sleep(RESTART_CHECK).await;
                for replica in replicas.lock().await.iter_mut() {
                    if let Ok(Some(status)) = replica.child.try_wait() {
                        eprintln!("a CCM replica exited ({status}); started again, as its Deployment would restart it");
                        *replica = ccm.start_with(&launcher);
                    }
                }
            }
        }))
    }
}

impl Drop for Restarter {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The local backend's CCM (fakecloud-ccm, the case's build `fakecloud_ccm`, unless `FAKECLOUD_E2E_CCM` names
/// another) on `cluster`, with the suite's flags and then `args`: for a case that starts its clusters itself.
pub fn start_local_ccm(cluster: &Cluster, fakecloud_ccm: &str, args: &[&str]) -> Ccm {
    let ccm = LocalProcess::new(fakecloud_ccm);
    let all: Vec<&str> = ccm.args.iter().chain(args).copied().collect();
    cluster.ccm(&ccm.bin, &all)
}

/// What a case needs of the cluster.
#[derive(Debug, Clone)]
pub struct Setup {
    ccm: &'static str,
    replicas: usize,
    emulator: Option<&'static str>,
    kills_ccm: bool,
    pods_on: usize,
    not_ready_for: Duration,
    aws: bool,
    /// Why the case is cloud-provider-aws's alone (what only it does), if it is.
    only_aws: Option<&'static str>,
}

impl Setup {
    /// `ccm`: the CCM binary the local backend runs (the test's `CARGO_BIN_EXE_e2e-fakecloud-ccm`).
    pub fn new(ccm: &'static str) -> Self {
        Self {
            ccm,
            replicas: 1,
            emulator: None,
            kills_ccm: false,
            pods_on: 0,
            not_ready_for: Duration::ZERO,
            aws: false,
            only_aws: None,
        }
    }

    /// The case is about what cloud-provider-aws alone does (`why`): against the other CCMs it is skipped,
    /// saying why.
    pub fn only_for_aws(mut self, why: &'static str) -> Self {
        self.aws = true;
        self.only_aws = Some(why);
        self
    }

    /// The case states what cloud-provider-aws does where it differs ([`Env::ccm_is_aws`]), from its source.
    /// Against cloud-provider-aws, cases that do not yet are skipped, saying so (issue #50: the suite is being
    /// stated for it case by case; the README's table says which are).
    pub fn stated_for_aws(mut self) -> Self {
        self.aws = true;
        self
    }

    /// The case's simulated Nodes register Ready=False (network not ready) for `window` before Ready, as kind's
    /// nodes do; other cases' Nodes are Ready at registration, so that call counts measure the CCM's own work.
    pub fn kubelets_start_not_ready(mut self, window: Duration) -> Self {
        self.not_ready_for = window;
        self
    }

    /// CCM replicas on the local backend (an existing deployment has its own; the shipped one has 2).
    pub fn replicas(mut self, n: usize) -> Self {
        self.replicas = n;
        self
    }

    /// The case runs real pods (the data plane: the pod network, traffic) on `nodes` different nodes: the
    /// cluster needs that many schedulable nodes with a real kubelet (a simulated kubelet's pods run in name
    /// only: kwok marks them Running, no container serves).
    pub fn runs_pods_on(mut self, nodes: usize) -> Self {
        self.pods_on = nodes;
        self
    }

    /// The case kills the CCM's leader: on an existing cluster the leader must be a pod.
    pub fn kills_ccm(mut self) -> Self {
        self.kills_ccm = true;
        self
    }

    /// The case kills and restarts the emulator: the local backend runs `fakecloud` (the test's
    /// `CARGO_BIN_EXE_e2e-fakecloud`) as a process; an existing one needs the kill and start commands.
    pub fn restarts_emulator(mut self, fakecloud: &'static str) -> Self {
        self.emulator = Some(fakecloud);
        self
    }
}

/// Run one conformance case: set up on the backend the environment names, run `body`, report and clean up.
/// The case is skipped (with a message) when the backend cannot give what it needs.
pub async fn case(name: &str, setup: Setup, body: impl AsyncFnOnce(&Env)) {
    let Some(env) = Env::start(name, &setup).await else {
        return;
    };
    let outcome = AssertUnwindSafe(body(&env)).catch_unwind().await;
    if outcome.is_err() {
        env.report().await;
    }
    env.clean_up().await;
    // Dropped before the panic goes on, so nothing is reported twice.
    drop(env);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// The cluster a case runs on.
pub struct Env {
    pub probe: Probe,
    pub timing: Timing,
    /// The CCM's `--cluster-name` (routes are named after it).
    pub cluster_name: String,
    /// This run's value of [`CASE_TAG`].
    run: String,
    /// What makes this run's names its own on a shared cluster.
    suffix: String,
    namespaces: std::sync::Mutex<Vec<String>>,
    kind: Kind,
}

enum Kind {
    /// A cluster of the case's own, and its CCM processes (a killed one is replaced, as a Deployment would).
    Local {
        /// Stops first: nothing is restarted while the rest goes.
        _restarter: Restarter,
        cluster: Box<Cluster>,
        ccm: LocalProcess,
        replicas: Arc<Mutex<Vec<Ccm>>>,
    },
    /// A shared cluster: its CCM is the pods behind the Lease `cfg` names.
    Existing {
        cfg: Box<Existing>,
        baseline: Baseline,
        /// The suite's simulated kubelets; stopped before clean-up removes their Nodes (a running one would
        /// register a deleted Node again while its machine still reads as running).
        kubelets: std::sync::Mutex<Option<SimulatedKubelets>>,
        _one_at_a_time: tokio::sync::MutexGuard<'static, ()>,
    },
}

/// What a case on a shared cluster must put back.
struct Baseline {
    quotas: Vec<(QuotaName, u32)>,
    faults: BTreeSet<String>,
    /// By id, with their specs: a case may replace one (installing a preset replaces every preset's limits).
    rate_limits: BTreeMap<String, SetRateLimitRequest>,
    outages: BTreeSet<String>,
}

/// Cases of one test binary run in parallel threads under `cargo test`; on a shared cluster they would see each
/// other's faults and quotas.
static ONE_CASE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

impl std::ops::Deref for Env {
    type Target = Probe;
    fn deref(&self) -> &Probe {
        &self.probe
    }
}

fn kubelet_options(mut opts: kubelets::Options, run: &str, setup: &Setup) -> kubelets::Options {
    opts.instance_tag = Some(format!("{CASE_TAG}={run}"));
    opts.not_ready_for = setup.not_ready_for;
    opts.register_with_taints = vec![Taint {
        key: SIMULATED_TAINT.into(),
        value: Some("true".into()),
        effect: "NoSchedule".into(),
        time_added: None,
    }];
    opts
}

impl Env {
    async fn start(name: &str, setup: &Setup) -> Option<Self> {
        let backend = Backend::from_env();
        if setup.pods_on > 0 && matches!(backend, Backend::Local) {
            eprintln!(
                "skipping {name}: it runs pods on {} nodes, and the local backend's kubelets are simulated \
                 (kwok marks their pods Running; no container serves traffic); run it on kind: make e2e-kind",
                setup.pods_on
            );
            return None;
        }
        let aws = match &backend {
            Backend::Local => matches!(LocalCcm::from_env(), LocalCcm::Aws { .. }),
            Backend::Existing(cfg) => cfg.ccm == "aws",
        };
        if aws && !setup.aws {
            eprintln!(
                "skipping {name}: the case does not yet state what cloud-provider-aws does where it differs from \
                 fakecloud's CCMs (issue #50)"
            );
            return None;
        }
        if let (false, Some(why)) = (aws, setup.only_aws) {
            eprintln!("skipping {name}: it is about cloud-provider-aws alone ({why}); FAKECLOUD_E2E_CCM=aws runs it");
            return None;
        }
        let suffix = uuid_suffix();
        let run = format!("{name}-{suffix}");
        match backend {
            Backend::Local => Self::start_local(name, run, suffix, setup).await,
            Backend::Existing(cfg) => Self::start_existing(name, run, suffix, setup, cfg).await,
        }
    }

    /// A cluster of the case's own, served by the upstream binaries.
    async fn start_local(name: &str, run: String, suffix: String, setup: &Setup) -> Option<Self> {
        let rates = Rates::fast();
        let timing = Timing {
            node_grace: rates.node_monitor_grace_period,
            node_monitor: Duration::from_secs(1),
            route_period: Duration::from_secs(1),
        };
        let rates = Rates { kubelets: kubelet_options(rates.kubelets, &run, setup), ..rates };
        let options =
            ClusterOptions { rates, emulator_binary: setup.emulator.map(Into::into), ..ClusterOptions::default() };
        let cluster = Cluster::start_with_options(&format!("e2e case {name}"), options).await?;
        let ccm = LocalProcess::new(setup.ccm);
        let replicas: Arc<Mutex<Vec<Ccm>>> =
            Arc::new(Mutex::new((0..setup.replicas.max(1)).map(|_| ccm.start(&cluster)).collect()));
        let restarter = Restarter::start(cluster.ccm_launcher(), ccm.clone(), replicas.clone());
        let env = Self {
            probe: cluster.probe.clone().from_now(),
            timing,
            cluster_name: if cluster.is_aws() { CLUSTER_ID } else { "kubernetes" }.into(),
            run,
            suffix,
            namespaces: Default::default(),
            kind: Kind::Local { _restarter: restarter, cluster: Box::new(cluster), ccm, replicas },
        };
        env.wait_for_leader(None, HANG).await;
        Some(env)
    }

    async fn start_existing(
        name: &str,
        run: String,
        suffix: String,
        setup: &Setup,
        cfg: Box<Existing>,
    ) -> Option<Self> {
        let one_at_a_time = ONE_CASE_AT_A_TIME.lock().await;
        if setup.emulator.is_some() && (cfg.emulator_kill.is_none() || cfg.emulator_start.is_none()) {
            eprintln!(
                "skipping {name}: it kills and restarts the emulator; set FAKECLOUD_E2E_EMULATOR_KILL and \
                 FAKECLOUD_E2E_EMULATOR_START to commands that do that (make e2e-kind sets them)"
            );
            return None;
        }
        let kube = fakecloud_controlplane::kubeconfig::client(&cfg.kubeconfig).await.unwrap_or_else(|e| panic!("{e}"));
        let cloud = Client::new(&cfg.emulator, cfg.admin_token.clone()).expect("an emulator client");
        // cloud-provider-aws finds a Node's machine by its private DNS name, as a kubelet on EC2 names its Node.
        let node_names = if cfg.ccm == "aws" { NodeNames::PrivateDns } else { NodeNames::Instance };
        let probe = Probe::new(kube.clone(), cloud.clone()).naming_nodes(node_names);
        remove_leftovers(&probe).await;
        let baseline = Baseline::take(&cloud).await;
        let options = kubelets::Options { node_names, ..kubelet_options(Rates::fast().kubelets, &run, setup) };
        let kubelets = SimulatedKubelets::start(&cfg.kubeconfig, cloud, options)
            .await
            .unwrap_or_else(|e| panic!("simulated kubelets against {}: {e}", cfg.emulator));
        let env = Self {
            probe: probe.from_now(),
            timing: cfg.timing.clone(),
            cluster_name: cfg.cluster_name.clone(),
            run,
            suffix,
            namespaces: Default::default(),
            kind: Kind::Existing {
                cfg,
                baseline,
                kubelets: std::sync::Mutex::new(Some(kubelets)),
                _one_at_a_time: one_at_a_time,
            },
        };
        let holder = env.wait_for_leader(None, HANG).await;
        let pod_nodes = env.pod_nodes().await.len();
        if pod_nodes < setup.pods_on {
            eprintln!(
                "skipping {name}: it runs pods on {} nodes, and this cluster has {pod_nodes} schedulable nodes \
                 with a real kubelet",
                setup.pods_on
            );
            return None;
        }
        if setup.kills_ccm && env.leader_pod(&holder).await.is_none() {
            eprintln!("skipping {name}: it kills the CCM's leader, and the Lease holder {holder:?} is not a pod");
            return None;
        }
        Some(env)
    }

    /// Whether the CCM under test is upstream's (`FAKECLOUD_E2E_CCM=upstream`, locally or deployed): for the few
    /// assertions where upstream's controllers really differ, each saying where upstream does it.
    pub fn ccm_is_upstream(&self) -> bool {
        match &self.kind {
            Kind::Local { ccm, .. } => ccm.upstream,
            Kind::Existing { cfg, .. } => cfg.ccm == "upstream",
        }
    }

    /// Whether the CCM under test is cloud-provider-aws (`FAKECLOUD_E2E_CCM=aws`, locally or deployed), for the
    /// cases that state where it differs ([`Setup::stated_for_aws`]).
    pub fn ccm_is_aws(&self) -> bool {
        match &self.kind {
            Kind::Local { cluster, .. } => cluster.is_aws(),
            Kind::Existing { cfg, .. } => cfg.ccm == "aws",
        }
    }

    /// The operations the CCM reads instances with: fakecloud's `GetInstance` and `ListInstances`, or
    /// cloud-provider-aws's `DescribeInstances` (by ID, or by a `private-dns-name` filter).
    pub fn instance_reads(&self) -> &'static [&'static str] {
        if self.ccm_is_aws() { &["DescribeInstances"] } else { &["GetInstance", "ListInstances"] }
    }

    /// The operations the CCM changes load balancers with: fakecloud's three, or cloud-provider-aws's classic ELB
    /// writes and those of the security group it makes for each (`ensureLoadBalancer`, `ensureSecurityGroup`,
    /// `updateInstanceSecurityGroupsForLoadBalancer` in aws.go and aws_loadbalancer.go).
    pub fn lb_writes(&self) -> &'static [&'static str] {
        if self.ccm_is_aws() {
            &[
                "CreateLoadBalancer",
                "DeleteLoadBalancer",
                "CreateLoadBalancerListeners",
                "DeleteLoadBalancerListeners",
                "RegisterInstancesWithLoadBalancer",
                "DeregisterInstancesFromLoadBalancer",
                "ConfigureHealthCheck",
                "ModifyLoadBalancerAttributes",
                "AttachLoadBalancerToSubnets",
                "DetachLoadBalancerFromSubnets",
                "ApplySecurityGroupsToLoadBalancer",
                "CreateLoadBalancerPolicy",
                "SetLoadBalancerPoliciesOfListener",
                "SetLoadBalancerPoliciesForBackendServer",
                "AddTags",
                "RemoveTags",
                "CreateSecurityGroup",
                "DeleteSecurityGroup",
                "AuthorizeSecurityGroupIngress",
                "RevokeSecurityGroupIngress",
            ]
        } else {
            &["CreateLoadBalancer", "UpdateLoadBalancer", "DeleteLoadBalancer"]
        }
    }

    /// What the CCM writes to a Service's ingress for load balancer `lb`: its VIP, or under cloud-provider-aws
    /// its DNS name (`toStatus`, aws.go L2879), which resolves to the VIP.
    pub fn ingress_of(&self, lb: &LoadBalancer) -> Option<String> {
        if self.ccm_is_aws() { lb.dns_name.clone() } else { lb.address.map(|a| a.to_string()) }
    }

    /// Wait (at most `timeout`) until Service `name` has its ingress; the address its load balancer answers at:
    /// the EXTERNAL-IP, or the address its hostname (cloud-provider-aws's) resolves to at the cloud's DNS.
    pub async fn wait_for_vip(&self, services: &Api<Service>, name: &str, timeout: Duration) -> IpAddr {
        let address = crate::lb::wait_for_ingress(services, name, timeout).await;
        if let Ok(ip) = address.parse() {
            return ip;
        }
        let dns = self.cloud_dns().unwrap_or_else(|| {
            panic!("{name}'s ingress is the name {address}: set FAKECLOUD_E2E_DNS to the emulator's DNS address (make kind-up serves it)")
        });
        // An NLB's name answers once it is active, and cloud-provider-aws writes it while it provisions
        // (`v2toStatus`, aws.go L2893): ask until it does.
        crate::until(timeout, &format!("{address} resolving at {dns}"), async || {
            let found = fakecloud_controlplane::names::resolve(dns, &address, HANG).await.ok()?;
            found.first().copied()
        })
        .await
    }

    /// The state a new load balancer of the CCM's is first seen in: fakecloud's provision, classic ELBs (the ones
    /// cloud-provider-aws makes by default) are active at once, as AWS's are.
    pub fn first_lb_state(&self) -> LoadBalancerState {
        if self.ccm_is_aws() { LoadBalancerState::Active } else { LoadBalancerState::Provisioning }
    }

    /// The operations the CCM looks a load balancer up with: fakecloud's, or classic ELB's
    /// `DescribeLoadBalancers` (cloud-provider-aws's `describeLoadBalancer`).
    pub fn lb_reads(&self) -> &'static [&'static str] {
        if self.ccm_is_aws() { &["DescribeLoadBalancers"] } else { &["ListLoadBalancers", "GetLoadBalancer"] }
    }

    /// The AWS CLI and the CCM's account on the cluster's cloud: only a cluster set up for cloud-provider-aws has
    /// them.
    fn aws(&self) -> AwsCli<'_> {
        let access = match &self.kind {
            Kind::Local { cluster, .. } => cluster.aws(),
            Kind::Existing { cfg, .. } => cfg.aws.as_ref(),
        };
        access.expect("the AWS CLI is set up for cloud-provider-aws only (FAKECLOUD_E2E_CCM=aws)").cli()
    }

    /// `aws ec2 <args>` on the cluster's cloud with the CCM's account, as JSON: what only the AWS face shows, such as
    /// security groups.
    pub async fn aws_ec2(&self, args: &[&str]) -> serde_json::Value {
        self.aws().ec2(args).await.unwrap_or_else(|e| panic!("{e}"))
    }

    /// `aws elb <args>` (classic ELB), as [`Self::aws_ec2`].
    pub async fn aws_elb(&self, args: &[&str]) -> serde_json::Value {
        self.aws().elb(args).await.unwrap_or_else(|e| panic!("{e}"))
    }

    /// The repository's `scripts/<name>` with `args`, driving the AWS CLI on the cluster's cloud with the CCM's
    /// account (as a user runs it after `source aws.env`); what it printed.
    pub async fn aws_script(&self, name: &str, args: &[&str]) -> String {
        let script = crate::repo().join("scripts").join(name);
        self.aws().script(&script, args).await.unwrap_or_else(|e| panic!("{e}"))
    }

    /// The ingress rules of the security group cloud-provider-aws makes for a Service's ELB (`k8s-elb-<name>`,
    /// `buildELBSecurityGroupList`, aws.go L2011), as (protocol, port, source CIDR); `None` while there is no such
    /// group.
    pub async fn elb_group_rules(&self, svc: &Service) -> Option<BTreeSet<(String, i64, String)>> {
        let filter = format!("Name=group-name,Values=k8s-elb-{}", crate::lb::name(svc));
        let found = self.aws_ec2(&["describe-security-groups", "--filters", &filter]).await;
        let group = found["SecurityGroups"].as_array()?.first()?.clone();
        let permissions = group["IpPermissions"].as_array().cloned().unwrap_or_default();
        let rule = |p: &serde_json::Value| {
            let protocol = p["IpProtocol"].as_str().unwrap_or_default().to_string();
            let port = p["FromPort"].as_i64().unwrap_or(-1);
            let ranges = p["IpRanges"].as_array().cloned().unwrap_or_default();
            ranges
                .into_iter()
                .map(move |r| (protocol.clone(), port, r["CidrIp"].as_str().unwrap_or_default().to_string()))
        };
        Some(permissions.iter().flat_map(rule).collect())
    }

    /// The providerID the CCM gives `inst`'s Node: fakecloud's, or cloud-provider-aws's `aws:///<zone>/<i-…>`
    /// (`KubernetesInstanceID`, aws_instance.go; the instance ID is the cloud's own, `i-` and 17 hex digits).
    pub fn provider_id(&self, inst: &Instance) -> String {
        if self.ccm_is_aws() { aws_cluster::provider_id(&inst.zone, &inst.id) } else { inst.provider_id.clone() }
    }

    /// The emulator's DNS address, where the cloud's names answer (`FAKECLOUD_E2E_DNS`: `make kind-up` serves
    /// them); the local backend's emulators serve none.
    pub fn cloud_dns(&self) -> Option<&str> {
        match &self.kind {
            Kind::Local { .. } => None,
            Kind::Existing { cfg, .. } => cfg.dns.as_deref(),
        }
    }

    // ------------------------------------------------------------------------------------ the case's objects

    /// `base` made the case's own: `<base>-<this run's suffix>`, so names of different runs never meet on a
    /// shared cluster. Machines and namespaces are named this way.
    pub fn name(&self, base: &str) -> String {
        format!("{base}-{}", self.suffix)
    }

    /// A namespace of the case's own, named [`Env::name`]`(base)`; deleted after the case.
    pub async fn namespace(&self, base: &str) -> String {
        let name = self.name(base);
        self.create_namespace(&name).await;
        self.namespaces.lock().unwrap_or_else(|p| p.into_inner()).push(name.clone());
        name
    }

    /// A machine of the case's own, named [`Env::name`]`(req.name)` and tagged (with the cluster's tag too for
    /// cloud-provider-aws, which sees only the cluster's instances); a simulated kubelet registers its Node.
    pub async fn create_instance(&self, mut req: CreateInstanceRequest) -> Instance {
        req.name = self.name(&req.name);
        req.tags.insert(CASE_TAG.into(), self.run.clone());
        if self.ccm_is_aws() {
            req.tags.insert(cluster_tag(&self.cluster_name), "owned".into());
        }
        self.cloud.create_instance(&req, None).await.unwrap_or_else(|e| panic!("creating instance {}: {e}", req.name))
    }

    /// A machine of the case's own (named [`Env::name`]`(name)`) that no simulated kubelet registers: its Node
    /// is the case's to register (see the `own_node` module) or never comes. Returned once it runs, as a kubelet
    /// starts only on a booted machine (a cloud with a boot delay, kind's, has it `pending` first, and a pending
    /// machine is no load balancer target). Removed with the case's other machines.
    pub async fn machine_without_kubelet(&self, name: &str) -> Instance {
        let tags = [(kubelets::NO_KUBELET_TAG.to_string(), "none".to_string())].into();
        let created =
            self.create_instance(CreateInstanceRequest { name: name.into(), tags, ..Default::default() }).await;
        until(HANG, &format!("{} running", created.name), async || {
            self.cloud.get_instance(&created.id).await.ok().filter(|i| i.state == InstanceState::Running)
        })
        .await
    }

    /// A machine named [`Env::name`]`(name)` in `zone`.
    pub async fn instance(&self, name: &str, zone: &str) -> Instance {
        self.create_instance(CreateInstanceRequest { name: name.into(), zone: Some(zone.into()), ..Default::default() })
            .await
    }

    /// `count` machines named [`Env::name`]`(<prefix>-<i>)`, once their Nodes are initialized by the CCM.
    pub async fn initialized_nodes(&self, prefix: &str, count: usize) -> Vec<Instance> {
        let mut instances = Vec::new();
        for i in 0..count {
            let req = CreateInstanceRequest { name: format!("{prefix}-{i}"), ..Default::default() };
            instances.push(self.create_instance(req).await);
        }
        self.wait_initialized(&instances, HANG).await;
        instances
    }

    /// The Nodes that run pods: a real kubelet (simulated ones report the runtime `simulated://`), Ready, and
    /// with no NoSchedule taint (the control plane's, the suite's simulated machines').
    pub async fn pod_nodes(&self) -> Vec<Node> {
        let mut nodes: Vec<Node> = self
            .node_list()
            .await
            .into_iter()
            .filter(|n| {
                let status = n.status.as_ref();
                let runtime = status.and_then(|s| s.node_info.as_ref()).map(|i| i.container_runtime_version.as_str());
                let tainted = n
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|ts| ts.iter().any(|t| t.effect == "NoSchedule" || t.effect == "NoExecute"));
                runtime.is_some_and(|r| !r.starts_with("simulated://"))
                    && !tainted
                    && condition(n, "Ready").is_some_and(|c| c.0 == "True")
            })
            .collect();
        nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        nodes
    }

    /// The case's machines, terminated ones too (the emulator keeps them listed for a while).
    pub async fn instances(&self) -> Vec<Instance> {
        case_instances(&self.cloud, Some(&self.run)).await
    }

    // ------------------------------------------------------------------------------------------ disruption

    /// The CCM's leader dies at once — SIGKILL of the process, or its pod force-deleted — and is replaced
    /// as a Deployment replaces it; returns once another instance of the CCM leads.
    pub async fn kill_ccm_leader(&self) {
        let holder = self.wait_for_leader(None, HANG).await;
        match &self.kind {
            Kind::Local { cluster, ccm, replicas, .. } => {
                let mut replicas = replicas.lock().await;
                let i = replicas.iter().position(|r| r.identity().as_deref() == Some(holder.as_str()));
                let i = i.unwrap_or_else(|| panic!("no local CCM has the leader's identity {holder:?}"));
                replicas[i].kill().await;
                replicas[i] = ccm.start(cluster);
            }
            Kind::Existing { cfg, .. } => {
                let pod = self
                    .leader_pod(&holder)
                    .await
                    .unwrap_or_else(|| panic!("the CCM's leader {holder:?} is not a pod"));
                let params = DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
                Api::<Pod>::namespaced(self.client(), &cfg.ccm_namespace)
                    .delete(&pod, &params)
                    .await
                    .expect("the leader's pod is deleted");
            }
        }
        self.wait_for_leader(Some(&holder), HANG).await;
    }

    /// SIGKILL the emulator: no shutdown, no flush.
    pub async fn kill_emulator(&self) {
        match &self.kind {
            Kind::Local { cluster, .. } => match &cluster.server {
                Emulator::Process(p) => p.kill().await,
                Emulator::InProcess(_) | Emulator::Shared(_) => panic!("Setup::restarts_emulator was not asked for"),
            },
            Kind::Existing { cfg, .. } => shell(cfg.emulator_kill.as_deref().unwrap_or_default()),
        }
    }

    /// Start the emulator again on the state it had.
    pub async fn start_emulator(&self) {
        match &self.kind {
            Kind::Local { cluster, .. } => match &cluster.server {
                Emulator::Process(p) => p.restart().await,
                Emulator::InProcess(_) | Emulator::Shared(_) => panic!("Setup::restarts_emulator was not asked for"),
            },
            Kind::Existing { cfg, .. } => {
                shell(cfg.emulator_start.as_deref().unwrap_or_default());
                until(HANG, "the emulator answering again", async || self.cloud.region().await.ok()).await;
            }
        }
    }

    /// The Lease's holder once it is held and fresh, and (with `other_than`) held by another than that one.
    async fn wait_for_leader(&self, other_than: Option<&str>, timeout: Duration) -> String {
        let (namespace, name) = match &self.kind {
            Kind::Local { .. } => LOCAL_LEASE,
            Kind::Existing { cfg, .. } => (cfg.ccm_namespace.as_str(), cfg.ccm_lease.as_str()),
        };
        let leases = Api::<Lease>::namespaced(self.client(), namespace);
        until(timeout, &format!("the CCM leading (Lease {namespace}/{name})"), async || {
            let spec = leases.get_opt(name).await.ok()??.spec?;
            let holder = spec.holder_identity.filter(|h| !h.is_empty())?;
            let fresh = spec.renew_time.is_some_and(|t| {
                let age = k8s_openapi::jiff::Timestamp::now().duration_since(t.0);
                age.as_secs_f64() < f64::from(spec.lease_duration_seconds.unwrap_or(15))
            });
            (fresh && other_than != Some(holder.as_str())).then_some(holder)
        })
        .await
    }

    /// The pod behind a Lease holder's identity (`<hostname>_<uuid>`; a pod's hostname is its name).
    async fn leader_pod(&self, holder: &str) -> Option<String> {
        let Kind::Existing { cfg, .. } = &self.kind else { return None };
        let pod = holder.split('_').next()?;
        Api::<Pod>::namespaced(self.client(), &cfg.ccm_namespace).get_opt(pod).await.ok()??;
        Some(pod.to_string())
    }

    // ------------------------------------------------------------------------------ reports and clean-up

    /// What the cluster saw: events about the case's objects, the CCM's last cloud calls, its log tail.
    async fn report(&self) {
        let nodes: BTreeSet<String> = self.instances().await.into_iter().map(|i| self.node_name(&i)).collect();
        let namespaces = self.namespaces.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut events: Vec<Event> = Vec::new();
        for ns in namespaces.iter().map(String::as_str).chain(["default"]) {
            let list = Api::<Event>::namespaced(self.client(), ns).list(&ListParams::default()).await;
            events.extend(
                list.map(|l| l.items)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|e| ns != "default" || e.involved_object.name.as_ref().is_some_and(|n| nodes.contains(n))),
            );
        }
        events.sort_by_key(|e| e.last_timestamp.as_ref().map(|t| t.0));
        eprintln!("--- the last {EVENTS_TAIL} events about this case's objects ---");
        for e in events.iter().rev().take(EVENTS_TAIL).rev() {
            let o = &e.involved_object;
            eprintln!(
                "{} {} {} {}/{}/{}: {}",
                e.last_timestamp.as_ref().map(|t| t.0.to_string()).unwrap_or_default(),
                e.type_.as_deref().unwrap_or_default(),
                e.reason.as_deref().unwrap_or_default(),
                o.kind.as_deref().unwrap_or_default(),
                o.namespace.as_deref().unwrap_or("-"),
                o.name.as_deref().unwrap_or_default(),
                e.message.as_deref().unwrap_or_default(),
            );
        }
        eprintln!("--- the CCM's last {AUDIT_TAIL} cloud calls (the emulator's audit log) ---");
        let calls = self.ccm_audit().await;
        for c in calls.iter().rev().take(AUDIT_TAIL).rev() {
            eprintln!(
                "#{} {} {} {} -> {} {}{}",
                c.seq,
                c.time,
                c.operation,
                c.resource_id.as_deref().unwrap_or("-"),
                c.status,
                c.error_code.as_deref().unwrap_or_default(),
                c.fault.as_deref().map(|f| format!(" (fault {f})")).unwrap_or_default(),
            );
        }
        match &self.kind {
            Kind::Local { replicas, .. } => {
                for r in replicas.lock().await.iter() {
                    eprintln!("--- the last {LOG_TAIL} lines of a CCM's log ---\n{}", r.tail());
                }
            }
            Kind::Existing { cfg, .. } => {
                eprintln!("--- the CCM under test: {} (pods {}) ---", cfg.ccm, cfg.ccm_pods);
                let namespace = &cfg.ccm_namespace;
                let api = Api::<Pod>::namespaced(self.client(), namespace);
                let pods = api.list(&ListParams::default().labels(&cfg.ccm_pods)).await;
                let list = pods.map(|l| l.items).unwrap_or_default();
                for p in list {
                    let name = p.metadata.name.unwrap_or_default();
                    let params = LogParams { tail_lines: Some(LOG_TAIL as i64), ..Default::default() };
                    let log = api.logs(&name, &params).await.unwrap_or_else(|e| format!("(no log: {e})"));
                    eprintln!("--- the last {LOG_TAIL} lines of {namespace}/{name}'s log ---\n{log}");
                }
            }
        }
        eprintln!("---");
    }

    /// On a shared cluster: put back what the case changed and remove what it made. (A local cluster goes
    /// away with the case.)
    async fn clean_up(&self) {
        let Kind::Existing { baseline, kubelets, .. } = &self.kind else { return };
        drop(kubelets.lock().unwrap_or_else(|p| p.into_inner()).take());
        baseline.restore(&self.cloud).await;
        let namespaces = Api::<Namespace>::all(self.client());
        let mine = self.namespaces.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for ns in &mine {
            let _ = namespaces.delete(ns, &DeleteParams::default()).await;
        }
        let mut ids = remove_machines(self, Some(&self.run)).await;
        // Their load balancers go before the namespaces do (the cleanup finalizer), their routes within a
        // route period or two: the next case must not count them.
        // (Warned about, never a failure: the case itself is over.)
        let patience = self.timing.routes() + Duration::from_secs(60);
        let gone = poll(patience, async || {
            for ns in &mine {
                if !matches!(namespaces.get_opt(ns).await, Ok(None)) {
                    return None;
                }
            }
            let routes = self.cloud.list_routes("main").await.ok()?.items;
            ids.retain(|id| routes.iter().any(|r| &r.target_instance == id));
            ids.is_empty().then_some(())
        })
        .await;
        if gone.is_none() {
            eprintln!("warning: the case's namespaces or routes were not all gone after {patience:?}");
        }
    }
}

impl Baseline {
    async fn take(cloud: &Client) -> Self {
        let quotas = cloud.list_quotas().await.expect("the quotas").items;
        Self {
            quotas: quotas.into_iter().map(|q| (q.name, q.limit)).collect(),
            faults: cloud.list_faults().await.expect("the fault rules").items.into_iter().map(|f| f.id).collect(),
            rate_limits: cloud
                .list_rate_limits()
                .await
                .expect("the rate limits")
                .items
                .into_iter()
                .map(|r| (r.id, r.limit))
                .collect(),
            outages: cloud.list_outages().await.expect("the outages").items.into_iter().map(|o| o.id).collect(),
        }
    }

    async fn restore(&self, cloud: &Client) {
        for f in cloud.list_faults().await.map(|l| l.items).unwrap_or_default() {
            if !self.faults.contains(&f.id) {
                let _ = cloud.delete_fault(&f.id).await;
            }
        }
        let limits = cloud.list_rate_limits().await.map(|l| l.items).unwrap_or_default();
        for r in &limits {
            if !self.rate_limits.contains_key(&r.id) {
                let _ = cloud.delete_rate_limit(&r.id).await;
            }
        }
        for (id, spec) in &self.rate_limits {
            if !limits.iter().any(|r| &r.id == id && &r.limit == spec) {
                let _ = cloud.set_rate_limit(id, spec).await;
            }
        }
        for o in cloud.list_outages().await.map(|l| l.items).unwrap_or_default() {
            if !self.outages.contains(&o.id) {
                let _ = cloud.stop_outage(&o.id).await;
            }
        }
        for (name, limit) in &self.quotas {
            let _ = cloud.set_quota(*name, *limit).await;
        }
    }
}

/// The suite's machines, terminated ones too: of one run, or (`None`) of any.
async fn case_instances(cloud: &Client, run: Option<&str>) -> Vec<Instance> {
    let tag = match run {
        Some(run) => format!("{CASE_TAG}={run}"),
        None => CASE_TAG.to_string(),
    };
    let all = cloud.list_all_instances(&ListInstancesQuery { tag: Some(tag), ..Default::default() }).await;
    all.unwrap_or_default()
}

/// Terminate the suite's live machines (of one run, or of any) and delete their Nodes; their IDs.
async fn remove_machines(probe: &Probe, run: Option<&str>) -> Vec<String> {
    let mut ids = Vec::new();
    let live = case_instances(&probe.cloud, run).await.into_iter().filter(|i| i.state != InstanceState::Terminated);
    for i in live {
        let _ = probe.cloud.terminate_instance(&i.id).await;
        let _ = probe.nodes().delete(&probe.node_name(&i), &DeleteParams::default()).await;
        ids.push(i.id);
    }
    ids
}

/// What an earlier run that was cut short left on a shared cluster: its machines and Nodes (their Nodes
/// would stay NotReady, yet in every load balancer's backends).
async fn remove_leftovers(probe: &Probe) {
    let ids = remove_machines(probe, None).await;
    if !ids.is_empty() {
        eprintln!("removed {} machine(s) an earlier run of the suite left behind", ids.len());
    }
    // Nodes only the suite's simulated kubelets register, whose machines are gone already.
    for n in probe.node_list().await.iter().filter(|n| crate::taint_keys(n).iter().any(|k| k == SIMULATED_TAINT)) {
        let _ = probe.nodes().delete(n.metadata.name.as_deref().unwrap_or_default(), &DeleteParams::default()).await;
    }
}

fn shell(command: &str) {
    let status = std::process::Command::new("sh").args(["-c", command]).status();
    assert!(status.is_ok_and(|s| s.success()), "`{command}` failed");
}

/// Eight random hex characters, so the names of different runs never meet.
fn uuid_suffix() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_string()
}

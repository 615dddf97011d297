//! The local cluster: the upstream control plane (kube-apiserver, etcd, kube-controller-manager) on loopback,
//! an emulator on a SQLite file (in the test process, or as a `fakecloud serve` process that can be killed),
//! simulated kubelets (a Node per running instance), and CCM processes authenticated as the deploy manifest's
//! ServiceAccount through the TokenRequest API, so the shipped RBAC is what is exercised.
//!
//! In a test of this crate (Cargo defines `CARGO_BIN_EXE_*` only for integration tests, so this example is
//! not compiled as a doc-test):
//!
//! ```ignore
//! # async fn t() {
//! let Some(cluster) = fakecloud_e2e::Cluster::start("my test").await else { return };
//! let ccm = cluster.ccm(env!("CARGO_BIN_EXE_e2e-fakecloud-ccm"), &[]);
//! # }
//! ```

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use fakecloud_api::{Client, CloudConfig, CreateInstanceRequest, Instance};
use fakecloud_controlplane::aws_cluster::{self, CLUSTER_ID};
use fakecloud_controlplane::kubelets::{self, NodeNames, SimulatedKubelets};
use fakecloud_controlplane::launcher::CLUSTER_CIDR;
use fakecloud_controlplane::{Binaries, ControlPlane, composition, kubeconfig};
use fakecloud_emulator::auth::Tokens;
use fakecloud_emulator::aws::credentials::Keys;
use fakecloud_emulator::config::{Config, DbLocation, Timings, Topology};
use fakecloud_emulator::server::Server;
use k8s_openapi::jiff::Timestamp;

use crate::backend::{AwsAccess, LocalCcm};
use crate::{HANG, Probe, SERVICE_ACCOUNT, repo, until};

/// The CCM's token: a cloud customer's, so injected faults, rate limits and outages reach it (admin calls are
/// never faulted), and its calls are told apart in the audit log.
pub const USER: &str = "e2e-user-token-0123456789abcdef";
/// The test's and the simulated kubelets' token: the infrastructure, not faulted.
pub const ADMIN: &str = "e2e-admin-token-0123456789abcdef";

/// How fast the cluster notices silent nodes, how often the simulated kubelets beat, and how long the cloud
/// takes to provision a load balancer.
#[derive(Debug, Clone)]
pub struct Rates {
    pub node_monitor_grace_period: Duration,
    pub kubelets: kubelets::Options,
    pub lb_provision_delay: Duration,
}

impl Rates {
    /// For tests: a node is NotReady 8 s after its kubelet falls silent; Leases of 8 s (renewed every 2 s);
    /// Nodes Ready at registration (a case that wants kind's startup window asks for it); a load balancer is
    /// provisioned in 2 s (so `<pending>` is seen).
    pub fn fast() -> Self {
        let kubelets = kubelets::Options {
            poll: Duration::from_millis(200),
            lease_seconds: 8,
            not_ready_for: Duration::ZERO,
            ..kubelets::Options::default()
        };
        Self { node_monitor_grace_period: Duration::from_secs(8), kubelets, lb_provision_delay: Duration::from_secs(2) }
    }

    /// As a real cluster: the controller manager's 50 s grace period, the kubelet's 40 s Lease (renewed every 10 s)
    /// and 5-minute status report;
    /// the emulator's default 3 s to provision a load balancer. Nodes are Ready at registration: the benchmarks
    /// count the calls initialization takes, not the lifecycle controller's checks of NotReady nodes.
    pub fn real() -> Self {
        Self {
            node_monitor_grace_period: Duration::from_secs(50),
            kubelets: kubelets::Options { not_ready_for: Duration::ZERO, ..kubelets::Options::default() },
            lb_provision_delay: Timings::default().lb_provision_delay,
        }
    }
}

/// Cases of one test binary run in parallel threads under `cargo test`; each starts a whole cluster, and on
/// 2 cores two at once only make both slow and their timings loose. A cluster holds this lock for its life.
static ONE_CLUSTER_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What a cluster starts with, beyond the defaults.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    pub rates: Rates,
    /// The emulator's region, zones and address pools (1,000 VIPs need a public pool larger than the default /24).
    pub topology: Topology,
    /// The controller manager's pod CIDR size per node (default /24: 256 nodes in the /16 cluster CIDR).
    pub node_cidr_mask_size: Option<u8>,
    /// Run the emulator as this `fakecloud` binary (a test's `CARGO_BIN_EXE_e2e-fakecloud`) instead of in the
    /// test process, so that it can be killed (SIGKILL) and restarted. Default topology.
    pub emulator_binary: Option<PathBuf>,
    /// The controller manager's `--cluster-cidr` (its Nodes' pod CIDRs come from it), which the cluster's CCMs
    /// are given too. Clusters that share a cloud share its route table, where a destination has one route:
    /// their CIDRs must not overlap, as on a real VPC.
    pub cluster_cidr: String,
    /// The CCM the cluster is set up for ([`LocalCcm::from_env`] unless told): for cloud-provider-aws, its network
    /// is tagged as an AWS user tags it, its Nodes are named by their machines' private DNS names and
    /// [`Cluster::ccm`] gives its CCMs cloud-provider-aws's flags.
    pub ccm: LocalCcm,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            rates: Rates::fast(),
            topology: Topology::default(),
            node_cidr_mask_size: None,
            emulator_binary: None,
            cluster_cidr: CLUSTER_CIDR.to_string(),
            ccm: LocalCcm::from_env(),
        }
    }
}

/// A kubeconfig in `dir` with a TokenRequest token of the manifest's ServiceAccount.
async fn service_account_kubeconfig(cp: &ControlPlane, dir: &Path) -> PathBuf {
    let (namespace, name) = SERVICE_ACCOUNT;
    let path = dir.join("ccm.kubeconfig");
    let server = kubeconfig::Server { url: cp.apiserver_url(), ca_pem: cp.ca_pem() };
    kubeconfig::write_service_account(&cp.client(), &server, namespace, name, HOUR, &path)
        .await
        .expect("a TokenRequest token for the CCM's ServiceAccount");
    path
}

/// The network of the cloud at `url` tagged as cluster [`CLUSTER_ID`]'s with the AWS CLI at `cli`, as `make up
/// CCM=aws` tags it, and cloud-provider-aws's cloud config for it written in `dir`: its path, and the key pair
/// of the account the cluster's tokens are ([`USER`]), with the CLI that cases read the face with.
async fn aws_cloud_config(cloud: &Client, url: &str, cli: &Path, dir: &Path) -> (PathBuf, AwsAccess) {
    let keys = Keys::of(&Tokens { user: USER.into(), admin: ADMIN.into() });
    let region = cloud.region().await.expect("the emulator's region").name;
    let access = AwsAccess {
        access_key_id: keys.access_key_id,
        secret_access_key: keys.secret_access_key,
        cli: cli.to_path_buf(),
        url: url.to_string(),
        region,
    };
    let network = aws_cluster::tag_network(&access.cli(), CLUSTER_ID).await.unwrap_or_else(|e| panic!("{e}"));
    let path = dir.join("aws-cloud-config.ini");
    std::fs::write(&path, network.cloud_config(&access.region, CLUSTER_ID, url).text()).expect("cloud config written");
    (path, access)
}

/// How long the CCM's ServiceAccount token lasts: longer than any case.
const HOUR: Duration = Duration::from_secs(3600);

/// The API server's audit log, in the cluster's directory: the CCM's writes, whatever CCM it is.
const AUDIT_LOG: &str = "apiserver-audit.log";
/// One line per write request of the CCM's ServiceAccount, once answered; nothing else (the log backend
/// writes each event before the response goes out, so a count read after a request has it). Events it creates
/// are logged with their body, so that their reasons can be told apart.
/// What [`Cluster::ccm_writes`] adds to an Event write for something recorded before the time it is given.
pub const RECORDED_EARLIER: &str = "(recorded earlier)";

fn ccm_writes_audit_policy() -> String {
    let (namespace, name) = SERVICE_ACCOUNT;
    format!(
        r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Request
    users: ["system:serviceaccount:{namespace}:{name}"]
    verbs: ["create", "patch"]
    resources: [{{group: "", resources: ["events"]}}, {{group: "events.k8s.io", resources: ["events"]}}]
  - level: Metadata
    users: ["system:serviceaccount:{namespace}:{name}"]
    verbs: ["create", "update", "patch", "delete", "deletecollection"]
  - level: None
"#
    )
}

/// The cluster without a CCM; start CCMs with [`Cluster::ccm`]. Looks at itself through its [`Probe`].
pub struct Cluster {
    apiserver: ControlPlane,
    pub server: Emulator,
    pub probe: Probe,
    pub dir: tempfile::TempDir,
    /// A kubeconfig with a TokenRequest token of the manifest's ServiceAccount.
    pub sa_kubeconfig: PathBuf,
    pub cloud_config: PathBuf,
    kubectl: PathBuf,
    /// Its `--cluster-cidr`, which [`Cluster::ccm`] passes on.
    cluster_cidr: String,
    /// Set up for cloud-provider-aws ([`ClusterOptions::ccm`]).
    aws: Option<AwsAccess>,
    _kubelets: SimulatedKubelets,
    /// `None` for a cluster started beside another ([`Cluster::start_beside`]), whose guard covers both.
    _one_at_a_time: Option<tokio::sync::MutexGuard<'static, ()>>,
}

impl std::ops::Deref for Cluster {
    type Target = Probe;
    fn deref(&self) -> &Probe {
        &self.probe
    }
}

impl Cluster {
    /// With [`Rates::fast`]. `None` when the control-plane binaries are missing outside CI (the test is then
    /// skipped).
    pub async fn start(test: &str) -> Option<Self> {
        Self::start_with(test, Rates::fast()).await
    }

    pub async fn start_with(test: &str, rates: Rates) -> Option<Self> {
        Self::start_with_options(test, ClusterOptions { rates, ..ClusterOptions::default() }).await
    }

    pub async fn start_with_options(test: &str, options: ClusterOptions) -> Option<Self> {
        let binaries = Binaries::for_tests(test)?;
        // (Each test has its own runtime; tokio's Mutex does not need one, and a failing case releases it as it
        // unwinds.)
        let one_at_a_time = ONE_CLUSTER_AT_A_TIME.lock().await;
        Some(Self::start_on(&binaries, options, None, Some(one_at_a_time)).await)
    }

    /// A second cluster on this one's cloud: its own control plane, simulated kubelets and CCM credentials, the
    /// same emulator (region, tokens, quotas, rate limits, route table), as several clusters share one account
    /// of a real cloud. `options` says how it differs (its `cluster_cidr` apart from this one's, its kubelets'
    /// instance tag); the emulator options in it are this cluster's and are not read.
    pub async fn start_beside(&self, test: &str, options: ClusterOptions) -> Self {
        let binaries = Binaries::for_tests(test).expect("the binaries the first cluster runs on");
        Self::start_on(&binaries, options, Some(self.server.url()), None).await
    }

    /// A control plane, then the rest around it ([`Cluster::assemble`]), on the emulator at `cloud` if given.
    async fn start_on(
        binaries: &Binaries,
        options: ClusterOptions,
        cloud: Option<String>,
        one_at_a_time: Option<tokio::sync::MutexGuard<'static, ()>>,
    ) -> Self {
        let kubectl = binaries.kubectl().unwrap_or_else(|| "kubectl".into());
        let mut builder = ControlPlane::builder()
            .node_monitor_grace_period(options.rates.node_monitor_grace_period)
            .node_monitor_period(Duration::from_secs(1))
            // After the launcher's own: the last one counts.
            .controller_manager_arg(format!("--cluster-cidr={}", options.cluster_cidr));
        if let Some(size) = options.node_cidr_mask_size {
            builder = builder.controller_manager_arg(format!("--node-cidr-mask-size={size}"));
        }
        let dir = tempfile::tempdir().expect("a temporary directory");
        let policy = dir.path().join("audit-policy.yaml");
        std::fs::write(&policy, ccm_writes_audit_policy()).expect("the audit policy written");
        builder = builder
            .apiserver_arg(format!("--audit-policy-file={}", policy.display()))
            .apiserver_arg(format!("--audit-log-path={}", dir.path().join(AUDIT_LOG).display()));
        let cp = builder.start().await.expect("the control plane starts");
        Self::assemble(cp, dir, kubectl, options, cloud, one_at_a_time).await
    }

    /// The emulator, the simulated kubelets and the CCM's credentials around an API server.
    async fn assemble(
        apiserver: ControlPlane,
        dir: tempfile::TempDir,
        kubectl: PathBuf,
        options: ClusterOptions,
        cloud: Option<String>,
        one_at_a_time: Option<tokio::sync::MutexGuard<'static, ()>>,
    ) -> Self {
        let ClusterOptions { rates, topology, node_cidr_mask_size: _, emulator_binary, cluster_cidr, ccm } = options;
        let timings = Timings {
            stop_delay: Duration::from_millis(200),
            terminate_delay: Duration::from_millis(200),
            lb_provision_delay: rates.lb_provision_delay,
            ..Timings::instant()
        };
        let server = match (cloud, emulator_binary) {
            (Some(url), _) => Emulator::Shared(url),
            (None, None) => {
                let tokens = Tokens { user: USER.into(), admin: ADMIN.into() };
                let db = DbLocation::File(dir.path().join("fc.db"));
                let config = Config { timings, topology, ..Config::default() };
                Emulator::InProcess(
                    Server::start("127.0.0.1:0", &db, config, tokens).await.expect("the emulator starts"),
                )
            }
            (None, Some(bin)) => Emulator::Process(Box::new(EmulatorProcess::start(bin, dir.path(), &timings).await)),
        };
        let cloud = Client::new(&server.url(), ADMIN).expect("emulator client");
        let (cloud_config, aws) = match &ccm {
            LocalCcm::Aws { cli, .. } => {
                let (path, access) = aws_cloud_config(&cloud, &server.url(), cli, dir.path()).await;
                (path, Some(access))
            }
            LocalCcm::Fakecloud | LocalCcm::Upstream(_) | LocalCcm::Command(_) => {
                let path = dir.path().join("cloud-config.yaml");
                let config =
                    CloudConfig { region: Some("local-1".into()), ..CloudConfig::with_token(server.url(), USER) };
                config.write(&path).expect("cloud config written");
                (path, None)
            }
        };
        let node_names = if aws.is_some() { NodeNames::PrivateDns } else { NodeNames::Instance };
        let kubelet_options = kubelets::Options { node_names, ..rates.kubelets };
        let kubelets = SimulatedKubelets::start(apiserver.admin_kubeconfig(), cloud.clone(), kubelet_options)
            .await
            .expect("simulated kubelets start");
        let mut cluster = Self {
            probe: Probe::new(apiserver.client(), cloud).naming_nodes(node_names),
            apiserver,
            server,
            dir,
            sa_kubeconfig: PathBuf::new(),
            cloud_config,
            kubectl,
            cluster_cidr,
            aws,
            _kubelets: kubelets,
            _one_at_a_time: one_at_a_time,
        };
        // The shipped RBAC, applied for real; the CCM gets a token of its ServiceAccount.
        cluster.kubectl_ok(&["apply", "-f", &repo().join("ccm/deploy/rbac.yaml").to_string_lossy()]);
        cluster.sa_kubeconfig = service_account_kubeconfig(&cluster.apiserver, cluster.dir.path()).await;
        cluster
    }

    /// `kubectl` (the cluster's own version when built) as the admin: exit status and output.
    pub fn kubectl(&self, args: &[&str]) -> (bool, String) {
        let out = std::process::Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(self.apiserver.admin_kubeconfig())
            .args(args)
            .output()
            .expect("kubectl runs");
        (
            out.status.success(),
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        )
    }

    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let (ok, out) = self.kubectl(args);
        assert!(ok, "kubectl {args:?}: {out}");
        out
    }

    /// Start a CCM process (`bin`: the test's `CARGO_BIN_EXE_...`) as the ServiceAccount, serving HTTPS on a
    /// free loopback port; `args` come after the harness's (a repeated flag overrides). On a cluster set up for
    /// cloud-provider-aws, with its flags and key pair.
    pub fn ccm(&self, bin: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Ccm {
        self.ccm_launcher().start(bin.as_ref(), args)
    }

    /// What [`Cluster::ccm`] starts CCMs with, apart from the cluster (for a task that starts them again).
    pub fn ccm_launcher(&self) -> CcmLauncher {
        CcmLauncher {
            dir: self.dir.path().to_path_buf(),
            cloud_config: self.cloud_config.clone(),
            sa_kubeconfig: self.sa_kubeconfig.clone(),
            cluster_cidr: self.cluster_cidr.clone(),
            aws: self.aws.clone(),
        }
    }

    /// Every API-server write of the CCM's ServiceAccount so far, oldest first, as `<verb> <resource>` (with
    /// `/<subresource>`), and the reason of every Event among them, from one read of the API server's audit log.
    /// An Event write for what the CCM recorded before `recorded_from` (its event queue was long) is `<verb>
    /// events` [`RECORDED_EARLIER`]: work delivered late, not something that happened after.
    pub fn ccm_writes(&self, recorded_from: Option<Timestamp>) -> (Vec<String>, Vec<String>) {
        // Events carry whole seconds: one stamped in `recorded_from`'s own second counts as after it.
        let from = recorded_from.map(|t| t.as_second());
        let log = std::fs::read_to_string(self.dir.path().join(AUDIT_LOG)).unwrap_or_default();
        let (mut writes, mut reasons) = (Vec::new(), Vec::new());
        for e in log.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()) {
            let (verb, object) = (e["verb"].as_str().unwrap_or_default(), &e["objectRef"]);
            let resource = object["resource"].as_str().unwrap_or_default();
            if verb == "create" && resource == "events" {
                reasons.push(e["requestObject"]["reason"].as_str().unwrap_or("(none)").to_string());
            }
            let recorded = e["requestObject"]["lastTimestamp"].as_str().and_then(|t| t.parse::<Timestamp>().ok());
            let earlier = match (resource, recorded, from) {
                ("events", Some(at), Some(from)) => at.as_second() < from,
                _ => false,
            };
            writes.push(match object["subresource"].as_str() {
                Some(sub) => format!("{verb} {resource}/{sub}"),
                None if earlier => format!("{verb} {resource} {RECORDED_EARLIER}"),
                None => format!("{verb} {resource}"),
            });
        }
        (writes, reasons)
    }

    /// Whether it is set up for cloud-provider-aws ([`ClusterOptions::ccm`]).
    pub fn is_aws(&self) -> bool {
        self.aws.is_some()
    }

    /// The account's key pair and the AWS CLI on its cloud; `None` when the cluster is not set up for
    /// cloud-provider-aws.
    pub fn aws(&self) -> Option<&AwsAccess> {
        self.aws.as_ref()
    }

    /// A machine named `name` as the cluster's CCM sees its own: for cloud-provider-aws, with the cluster's tag
    /// (its `describeInstances` keeps only those).
    pub fn instance_request(&self, name: &str) -> CreateInstanceRequest {
        let mut req = CreateInstanceRequest { name: name.into(), ..Default::default() };
        if self.is_aws() {
            req.tags.insert(aws_cluster::cluster_tag(CLUSTER_ID), "owned".into());
        }
        req
    }

    /// Create `count` instances named `<prefix>-<i>` and wait until their Nodes are initialized by a CCM.
    pub async fn initialized_nodes(&self, prefix: &str, count: usize, timeout: Duration) -> Vec<Instance> {
        let mut instances = Vec::new();
        for i in 0..count {
            let req = self.instance_request(&format!("{prefix}-{i}"));
            instances.push(self.cloud.create_instance(&req, None).await.expect("an instance is created"));
        }
        self.wait_initialized(&instances, timeout).await;
        instances
    }
}

/// How a cluster starts its CCM processes ([`Cluster::ccm_launcher`]).
#[derive(Debug, Clone)]
pub struct CcmLauncher {
    dir: PathBuf,
    cloud_config: PathBuf,
    sa_kubeconfig: PathBuf,
    cluster_cidr: String,
    aws: Option<AwsAccess>,
}

impl CcmLauncher {
    /// As [`Cluster::ccm`].
    pub fn start(&self, bin: &std::ffi::OsStr, args: &[&str]) -> Ccm {
        let port = free_port();
        let log = self.dir.join(format!("ccm-{port}.log"));
        let (flags, env) = match &self.aws {
            None => {
                let flags = composition::Ccm {
                    cloud_config: &self.cloud_config,
                    kubeconfig: &self.sa_kubeconfig,
                    cluster_cidr: &self.cluster_cidr,
                    port,
                };
                (flags.args(), Vec::new())
            }
            Some(access) => {
                let flags = composition::AwsCcm {
                    cloud_config: &self.cloud_config,
                    kubeconfig: &self.sa_kubeconfig,
                    cluster_cidr: &self.cluster_cidr,
                    cluster_name: CLUSTER_ID,
                    port,
                    keys: (&access.access_key_id, &access.secret_access_key),
                };
                (flags.args(), flags.env())
            }
        };
        let child = tokio::process::Command::new(bin)
            .args(flags)
            .envs(env)
            .arg("--node-monitor-period=1s")
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("CCM log file"))
            .kill_on_drop(true)
            .spawn()
            .expect("the CCM starts");
        Ccm { child, log, port }
    }
}

pub(crate) fn free_port() -> u16 {
    fakecloud_controlplane::ports::free_port().expect("a free port")
}

/// The emulator: in the test process, or a `fakecloud serve` process that can be killed and restarted, or
/// another cluster's (at this URL), whose cloud this cluster shares.
pub enum Emulator {
    InProcess(Server),
    Process(Box<EmulatorProcess>),
    Shared(String),
}

impl Emulator {
    pub fn url(&self) -> String {
        match self {
            Self::InProcess(s) => s.url(),
            Self::Process(p) => format!("http://127.0.0.1:{}", p.port),
            Self::Shared(url) => url.clone(),
        }
    }
}

/// `fakecloud serve` on a fixed loopback port and a SQLite file in the cluster's directory; killed when
/// dropped.
pub struct EmulatorProcess {
    child: tokio::sync::Mutex<tokio::process::Child>,
    bin: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    pub port: u16,
}

impl EmulatorProcess {
    async fn start(bin: PathBuf, dir: &Path, t: &Timings) -> Self {
        let port = free_port();
        let ms = |d: Duration| format!("{}ms", d.as_millis());
        let (listen, db) = (format!("127.0.0.1:{port}"), dir.join("fc.db"));
        let mut args =
            composition::Emulator { listen: &listen, db: &db, tokens: Some((USER, ADMIN)), dns_listen: None }.args();
        args.extend([
            format!("--boot-delay={}", ms(t.boot_delay)),
            format!("--stop-delay={}", ms(t.stop_delay)),
            format!("--terminate-delay={}", ms(t.terminate_delay)),
            format!("--lb-provision-delay={}", ms(t.lb_provision_delay)),
            format!("--lb-delete-delay={}", ms(t.lb_delete_delay)),
        ]);
        let log = dir.join("emulator.log");
        let child = Self::spawn(&bin, &args, &log).await.into();
        Self { child, bin, args, log, port }
    }

    async fn spawn(bin: &Path, args: &[String], log: &Path) -> tokio::process::Child {
        let out = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("emulator log file");
        let child = tokio::process::Command::new(bin)
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(out.try_clone().expect("emulator log file"))
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .expect("the emulator starts");
        let serving = std::fs::read_to_string(log).unwrap_or_default().matches("fakecloud: serving").count();
        until(HANG, "the emulator serving", async || {
            let now = std::fs::read_to_string(log).unwrap_or_default().matches("fakecloud: serving").count();
            (now > serving).then_some(())
        })
        .await;
        child
    }

    /// SIGKILL: no shutdown, no flush; what it acknowledged is in the SQLite file.
    pub async fn kill(&self) {
        self.child.lock().await.kill().await.expect("the emulator is killed");
    }

    /// Start it again on the same port and database.
    pub async fn restart(&self) {
        *self.child.lock().await = Self::spawn(&self.bin, &self.args, &self.log).await;
    }
}

/// A CCM process; killed when dropped, and its log's tail printed then if the test is failing.
pub struct Ccm {
    pub child: tokio::process::Child,
    log: PathBuf,
    pub port: u16,
}

/// Lines of a CCM's log printed when a test fails.
pub(crate) const LOG_TAIL: usize = 60;

impl Drop for Ccm {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- the last {LOG_TAIL} lines of the CCM log ({}) ---\n{}\n---",
                self.log.display(),
                self.tail()
            );
        }
    }
}

impl Ccm {
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last [`LOG_TAIL`] lines of its log.
    pub fn tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(LOG_TAIL)..].join("\n")
    }

    pub async fn wait_log(&self, needle: &str, timeout: Duration) {
        until(timeout, &format!("{needle:?} in the CCM log"), async || self.log().contains(needle).then_some(())).await;
    }

    /// Its leader-election identity (`<hostname>_<uuid>`), from its log: fakecloud-ccm logs it as it starts
    /// to campaign; upstream's command logs it only in its `LeaderElection` event ("<id> became leader"), so an
    /// upstream replica that never led has none, which is all a leader kill needs.
    pub fn identity(&self) -> Option<String> {
        let log = self.log();
        if let Some(line) = log.lines().find(|l| l.contains("attempting to acquire leader lease")) {
            return Some(line.split("identity=").nth(1)?.split_whitespace().next()?.to_string());
        }
        let line = log.lines().find(|l| l.contains("reason=\"LeaderElection\"") && l.contains(" became leader"))?;
        let message = line.split("message=\"").nth(1)?;
        Some(message.split(" became leader").next()?.to_string())
    }

    /// GET `path` on the secure port (self-signed, so unverified): status code and body; `None` when it does
    /// not answer.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        let out = std::process::Command::new("curl")
            .args(["-sk", "--max-time", &HANG.as_secs().to_string(), "-w", "\n%{http_code}"])
            .arg(format!("https://127.0.0.1:{}{path}", self.port))
            .output()
            .expect("curl runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n')?;
        let code: u16 = code.trim().parse().ok()?;
        (code != 0).then(|| (code, body.to_string()))
    }

    /// The value of one metric line (`name{labels}` exactly as rendered), if present.
    pub fn metric(&self, series: &str) -> Option<f64> {
        let (_, body) = self.get("/metrics")?;
        body.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    /// Whether this process leads, from its `leader_election_master_status`.
    pub fn leads(&self) -> Option<bool> {
        self.metric("leader_election_master_status{name=\"cloud-controller-manager\"}").map(|v| v == 1.0)
    }

    /// Its peak resident memory so far (`VmHWM`), in MiB; 0 when it cannot be read.
    pub fn peak_rss_mib(&self) -> f64 {
        let pid = self.child.id().unwrap_or_default();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0.0);
        kib / 1024.0
    }

    /// Kill it at once (SIGKILL), as a crashed or evicted pod.
    pub async fn kill(&mut self) {
        self.child.kill().await.expect("the CCM is killed");
    }

    /// Its exit code, waiting at most `timeout`; `None` if it is still running.
    pub async fn exit_code(&mut self, timeout: Duration) -> Option<i32> {
        tokio::time::timeout(timeout, self.child.wait()).await.ok()?.ok()?.code()
    }
}

//! The process `stack up` leaves running: it starts the control plane, the emulator, the CCM and the simulated
//! kubelets, creates the instances, waits for their Nodes, and then owns it all until SIGTERM (`stack down`).
//!
//! Its progress lines go to stdout, a pipe `up` reads until [`READY`]; once `up` has returned nobody reads it,
//! and later lines (there are none by design) would be dropped. Its log (stderr) is `<run dir>/stack.log`.

use std::collections::{HashMap, HashSet};
use std::io::Write as _;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use fakecloud_api::{Client, CloudConfig, CreateInstanceRequest, QuotaName};
use fakecloud_controlplane::process::{Processes, log_tail};
use fakecloud_controlplane::{
    CLUSTER_CIDR, ControlPlane, NODE_CIDR_MASK_SIZE, kubelets::NodeNames, kubelets::UNINITIALIZED_TAINT,
    node_cidr_mask_size, pinned_kubernetes_version,
};
use fakecloud_controlplane::{aws_cluster, composition};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::{WatchStreamExt as _, watcher};
use tokio::signal::unix::{Signal, SignalKind, signal};

use super::cli::{Options, StackCcm};
use super::layout::{READY, RunDir, endpoint, node_names, sibling};

/// How long the emulator may take to answer, and the Nodes to be Ready, initialized and routed, before `up` calls it a
/// hang (each takes seconds; these leave room for a busy 2-core machine).
const EMULATOR_HANG: Duration = Duration::from_secs(60);
const NODES_HANG: Duration = Duration::from_secs(120);
/// And per Node: a larger fleet registers and is initialized a little at a time.
const NODES_HANG_PER_NODE: Duration = Duration::from_millis(500);
/// Instance creates at once: enough to keep the emulator's writer busy, few enough not to queue behind it.
const CREATES_IN_FLIGHT: usize = 32;
/// A large fleet (one whose Nodes get pod CIDRs smaller than the usual /24, layout.rs) has a CCM allowed more
/// requests to the API server.
const LARGE_FLEET_QPS: u32 = 200;
const LARGE_FLEET_BURST: u32 = 300;
/// How often a long wait says what it is waiting for.
const STILL_WAITING: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(250);
/// How often a wait on the Nodes checks that every process still runs.
const CHECK_RUNNING: Duration = Duration::from_secs(1);

pub async fn supervise(options: Options) -> anyhow::Result<()> {
    // A session of its own, as `setsid` gives: the terminal's Ctrl-C and hangup, and make's process group, do
    // not reach the stack; `stack down` stops it.
    nix::unistd::setsid().context("starting a session of its own")?;
    // Installed before starting anything, so a SIGTERM during start still stops what was started.
    let mut sigterm = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let progress = Progress { started: Instant::now() };
    let started = tokio::select! {
        stack = start(&options, &progress) => stack,
        _ = sigterm.recv() => Err(anyhow::anyhow!("interrupted by SIGTERM while starting")),
        _ = sigint.recv() => Err(anyhow::anyhow!("interrupted by SIGINT while starting")),
    };
    // On an error the components are already stopped: dropping what `start` held stops them.
    let stack = started.inspect_err(|e| progress.say(&format!("error: {e:#}")))?;
    progress.line(READY);
    stack.run_until_signalled(&mut sigterm, &mut sigint).await
}

/// Progress lines, `[up  12s] ...`, for `up` to relay (and in the log).
struct Progress {
    started: Instant,
}

impl Progress {
    fn say(&self, message: &str) {
        tracing::info!("{message}");
        self.line(&format!("[up {:>3}s] {message}", self.started.elapsed().as_secs()));
    }

    fn line(&self, line: &str) {
        // Once `up` has returned the pipe has no reader; nothing is lost that the log does not have.
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{line}").and_then(|()| stdout.flush());
    }

    /// Awaits `future`, saying every few seconds that it still waits for `what`.
    async fn awaiting<T>(&self, what: &str, future: impl Future<Output = T>) -> T {
        self.awaiting_with(|| what.to_string(), future).await
    }

    /// [`Self::awaiting`], with what it waits for said anew each time (how far it has got).
    async fn awaiting_with<T>(&self, what: impl Fn() -> String, future: impl Future<Output = T>) -> T {
        let mut future = std::pin::pin!(future);
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + STILL_WAITING, STILL_WAITING);
        let started = Instant::now();
        loop {
            tokio::select! {
                result = &mut future => return result,
                _ = tick.tick() => self.say(&format!("still waiting for {} ({} s)", what(), started.elapsed().as_secs())),
            }
        }
    }
}

/// The running stack. Fields drop in order: the services (kubelets, CCM, emulator, newest first), then the
/// control plane they use.
struct Stack {
    services: Processes,
    control_plane: ControlPlane,
}

async fn start(options: &Options, progress: &Progress) -> anyhow::Result<Stack> {
    let dir = RunDir::new(&options.run_dir.path)?;
    let fakecloud = sibling("fakecloud")?;
    let aws_binaries = match options.ccm {
        StackCcm::Fakecloud => None,
        StackCcm::Aws => Some(super::aws::binaries(options.aws_ccm.as_deref(), options.aws_cli.as_deref())?),
    };
    let ccm = match &aws_binaries {
        None => sibling("fakecloud-ccm")?,
        Some((aws_ccm, _)) => aws_ccm.clone(),
    };
    let me = std::env::current_exe().context("locating this binary")?;

    // How long each stage took, said at the end.
    let mut stages: Vec<(&str, Duration)> = Vec::new();
    let at = Instant::now();
    progress.say(&format!("starting the control plane in {}", dir.controlplane().display()));
    let mut builder = ControlPlane::builder().run_dir(dir.controlplane());
    let mask = node_cidr_mask_size(options.nodes);
    let large_fleet = mask != NODE_CIDR_MASK_SIZE;
    if large_fleet {
        progress.say(&format!("{} Nodes: a /{mask} pod CIDR each from {CLUSTER_CIDR}", options.nodes));
        builder = builder.controller_manager_arg(format!("--node-cidr-mask-size={mask}"));
    }
    if let Some(bin_dir) = &options.bin_dir {
        builder = builder.bin_dir(bin_dir);
    }
    let mut control_plane = progress.awaiting("the control plane", builder.start()).await?;
    progress.say(&format!(
        "control plane ready: Kubernetes {} at {}",
        pinned_kubernetes_version(),
        control_plane.apiserver_url()
    ));
    stages.push(("the control plane", at.elapsed()));
    let at = Instant::now();

    let mut services = Processes::logging_to(&dir.root, &dir.root)?;
    let url = endpoint(options.port);
    let db = dir.file("fakecloud.db");
    progress.say(&format!("starting the emulator at {url} (state: {})", db.display()));
    let listen = format!("127.0.0.1:{}", options.port);
    let dns = format!("127.0.0.1:{}", options.dns_port);
    let emulator = composition::Emulator { listen: &listen, db: &db, tokens: None, dns_listen: Some(&dns) };
    spawn(&mut services, &dir, "emulator", &fakecloud, &emulator.args(), &[])?;
    let tokens = progress
        .awaiting("the emulator", tokio::time::timeout(EMULATOR_HANG, emulator_ready(&mut services, &dir, &url)));
    let tokens = tokens.await.map_err(|_| {
        anyhow::anyhow!(
            "the emulator did not answer within {EMULATOR_HANG:?} (log: {})",
            dir.file("emulator.log").display()
        )
    })??;
    stages.push(("the emulator", at.elapsed()));
    let at = Instant::now();

    let kubeconfig = path(control_plane.admin_kubeconfig());
    let cloud = Client::new(&url, tokens.user.clone())?;
    let region = cloud.region().await.context("reading the emulator's region")?;
    anyhow::ensure!(!region.zones.is_empty(), "the emulator's region has no zones");
    let (mut ccm_args, ccm_env) = match &aws_binaries {
        None => {
            // The CCM as a customer of the cloud: the user token, in a file only it reads.
            let token_file = dir.file("ccm-token");
            fakecloud_controlplane::files::write(&token_file, format!("{}\n", tokens.user).as_bytes(), 0o600)?;
            let cloud_config = dir.file("cloud-config.yaml");
            CloudConfig::with_token_file(&url, &token_file).write(&cloud_config)?;
            progress.say(&format!(
                "starting fakecloud-ccm (HTTPS /healthz and /metrics on 127.0.0.1:{})",
                options.ccm_port
            ));
            let flags = composition::Ccm {
                cloud_config: &cloud_config,
                kubeconfig: control_plane.admin_kubeconfig(),
                cluster_cidr: CLUSTER_CIDR,
                port: options.ccm_port,
            };
            (flags.args(), Vec::new())
        }
        Some((_, aws_cli)) => {
            progress.say(&format!(
                "tagging the subnets and the main route table for cluster {} with the AWS CLI",
                aws_cluster::CLUSTER_ID
            ));
            let setup = super::aws::set_up(&region.name, &url, &dir, aws_cli, options.aws_cloud_config.as_deref());
            let setup = progress.awaiting("the AWS CLI", setup).await?;
            progress.say(&format!(
                "starting cloud-provider-aws on the emulator's AWS face (HTTPS /healthz on 127.0.0.1:{})",
                options.ccm_port
            ));
            let flags = composition::AwsCcm {
                cloud_config: &setup.cloud_config,
                kubeconfig: control_plane.admin_kubeconfig(),
                cluster_cidr: CLUSTER_CIDR,
                cluster_name: aws_cluster::CLUSTER_ID,
                port: options.ccm_port,
                keys: (&setup.access_key_id, &setup.secret_access_key),
            };
            (flags.args(), flags.env())
        }
    };
    if large_fleet {
        // At the client's default 20 requests a second the CCM initializes about 5 Nodes a second (a Node update
        // and its status, events): 1,000 s for 5,000. A large cluster's operator raises it; so does this.
        progress.say(&format!(
            "{} Nodes: the CCM with --kube-api-qps={LARGE_FLEET_QPS} --kube-api-burst={LARGE_FLEET_BURST} \
             (the defaults, 20 and 30, initialize about 5 Nodes a second)",
            options.nodes
        ));
        ccm_args.extend([format!("--kube-api-qps={LARGE_FLEET_QPS}"), format!("--kube-api-burst={LARGE_FLEET_BURST}")]);
    }
    let ccm_env: Vec<(&str, &std::ffi::OsStr)> = ccm_env.iter().map(|(k, v)| (*k, std::ffi::OsStr::new(v))).collect();
    spawn(&mut services, &dir, "ccm", &ccm, &ccm_args, &ccm_env)?;

    progress.say("starting the simulated kubelets");
    let credentials = path(&dir.credentials());
    // Found here, where the user's environment (HOME, FAKECLOUD_KWOK) is: the kubelets start with a clean one.
    let kwok = path(&fakecloud_controlplane::kwok()?.binary);
    let kwok_log = path(&dir.file("kwok.log"));
    let kubelet_args = [
        "kubelets",
        "--kubeconfig",
        &kubeconfig,
        "--emulator",
        &url,
        "--credentials",
        &credentials,
        "--kwok",
        &kwok,
        "--kwok-log",
        &kwok_log,
        "--node-names",
        match options.ccm {
            StackCcm::Fakecloud => "instance",
            StackCcm::Aws => "private-dns",
        },
    ];
    spawn(&mut services, &dir, "kubelets", &me, &kubelet_args, &[])?;

    stages.push(("starting the CCM and the kubelets", at.elapsed()));
    let at = Instant::now();
    let names = node_names(options.nodes)?;
    let zones = &region.zones;
    fit_quotas(&Client::new(&url, tokens.admin)?, names.len(), progress).await?;
    let requests: Vec<CreateInstanceRequest> = names
        .iter()
        .zip(zones.iter().cycle())
        .map(|(name, zone)| CreateInstanceRequest {
            name: name.clone(),
            zone: Some(zone.name.clone()),
            tags: match options.ccm {
                StackCcm::Fakecloud => Default::default(),
                // cloud-provider-aws sees only the cluster's instances (`describeInstances` keeps those with it).
                StackCcm::Aws => [(aws_cluster::cluster_tag(aws_cluster::CLUSTER_ID), "owned".to_string())].into(),
            },
            ..Default::default()
        })
        .collect();
    progress.say(&format!(
        "creating {} instances over {} zones, {CREATES_IN_FLIGHT} at a time: {}",
        names.len(),
        zones.len(),
        listed(&names)
    ));
    let created = std::sync::atomic::AtomicUsize::new(0);
    // The keys make a retry of this step return the same instances instead of failing on their names.
    let creating = cloud.create_instances(requests, CREATES_IN_FLIGHT, "make-up-", &created);
    let counted =
        || format!("the instances ({} of {} created)", created.load(std::sync::atomic::Ordering::Relaxed), names.len());
    let instances = progress.awaiting_with(counted, creating).await.context("creating the instances")?;
    stages.push(("creating the instances", at.elapsed()));
    // The Nodes' names, as the kubelets name them.
    let node_names = match options.ccm {
        StackCcm::Fakecloud => NodeNames::Instance,
        StackCcm::Aws => NodeNames::PrivateDns,
    };
    let names: Vec<String> = instances.iter().map(|i| node_names.of(i)).collect();

    let at = Instant::now();
    let hang = NODES_HANG + NODES_HANG_PER_NODE * u32::try_from(names.len()).unwrap_or(u32::MAX);
    progress.say(&format!(
        "waiting for the {} Nodes to register, turn Ready and be initialized and routed by the CCM",
        names.len()
    ));
    let fleet = Mutex::new(Fleet::default());
    let nodes = nodes_ready(&mut services, &mut control_plane, &names, &fleet);
    let said = || fleet.lock().unwrap_or_else(std::sync::PoisonError::into_inner).said(names.len());
    progress.awaiting_with(said, tokio::time::timeout(hang, nodes)).await.map_err(|_| {
        anyhow::anyhow!(
            "{} were not all Ready, initialized and routed within {hang:?}\n--- {kubelets}:\n{}\n--- {ccm}:\n{}",
            said(),
            log_tail(&dir.file("kubelets.log"), 20),
            log_tail(&dir.file("ccm.log"), 20),
            kubelets = dir.file("kubelets.log").display(),
            ccm = dir.file("ccm.log").display(),
        )
    })??;
    stages.push(("the Nodes Ready, initialized and routed", at.elapsed()));
    progress.say(&format!("up: {} Nodes Ready, initialized and routed", names.len()));
    let took: Vec<String> = stages.iter().map(|(what, took)| format!("{what} {:.1} s", took.as_secs_f64())).collect();
    progress.say(&format!("stages: {}", took.join(", ")));
    Ok(Stack { services, control_plane })
}

/// The names for a progress line: all of up to four, else the first and the last.
fn listed(names: &[String]) -> String {
    match names {
        [] => String::new(),
        [first, .., last] if names.len() > 4 => format!("{first} ... {last}"),
        all => all.join(", "),
    }
}

/// Each Node is an instance and gets a route: a fleet larger than the instance or the route table quota has it
/// raised to fit (with the admin token, as an operator would), and says so.
async fn fit_quotas(admin: &Client, nodes: usize, progress: &Progress) -> anyhow::Result<()> {
    let wanted = u32::try_from(nodes).unwrap_or(u32::MAX);
    for (name, each) in [(QuotaName::Instances, "an instance"), (QuotaName::RoutesPerRouteTable, "a route")] {
        let quota = admin.get_quota(name).await.with_context(|| format!("reading the {name} quota"))?;
        if quota.limit < wanted {
            admin.set_quota(name, wanted).await.with_context(|| format!("raising the {name} quota"))?;
            progress.say(&format!("raised the {name} quota from {} to {wanted}, {each} per Node", quota.limit));
        }
    }
    Ok(())
}

impl Stack {
    /// Until SIGTERM or SIGINT; stops everything early if the control plane fails. A service that exits is left
    /// so: replacing the CCM with one's own build starts with killing this one (see the book, docs/book/src/ccm.md).
    async fn run_until_signalled(mut self, sigterm: &mut Signal, sigint: &mut Signal) -> anyhow::Result<()> {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let outcome = loop {
            tokio::select! {
                _ = sigterm.recv() => break Ok("SIGTERM"),
                _ = sigint.recv() => break Ok("SIGINT"),
                _ = tick.tick() => if let Err(e) = self.control_plane.check_running() {
                    break Err(anyhow::Error::new(e).context("the control plane stopped working; stopping the stack"));
                },
            }
        };
        if let Ok(signal) = &outcome {
            tracing::info!("{signal} received; stopping the stack");
        }
        let Stack { mut services, control_plane } = self;
        services.stop_all();
        control_plane.stop();
        outcome.map(|_| ())
    }
}

/// Starts a service with its log at `<run dir>/<name>.log` and its PID in `<name>.pid` (`kill $(cat
/// .run/ccm.pid)` stops one service).
fn spawn(
    services: &mut Processes,
    dir: &RunDir,
    name: &'static str,
    binary: &Path,
    args: &[impl AsRef<str>],
    env: &[(&str, &std::ffi::OsStr)],
) -> anyhow::Result<()> {
    let args: Vec<String> = args.iter().map(|a| a.as_ref().to_string()).collect();
    let pid = services.spawn_with_env(name, binary, &args, env)?.record.pid;
    let pid_file = dir.file(&format!("{name}.pid"));
    std::fs::write(&pid_file, format!("{pid}\n")).with_context(|| format!("writing {}", pid_file.display()))
}

/// Fails with the log's tail if a service has exited.
fn all_running(services: &mut Processes) -> anyhow::Result<()> {
    match services.first_exited() {
        Some((name, status, log, tail)) => {
            anyhow::bail!("{name} exited ({status}); its log is {}:\n{tail}", log.display())
        }
        None => Ok(()),
    }
}

/// The emulator's two tokens, from its credentials file.
struct Tokens {
    user: String,
    admin: String,
}

/// Waits until the emulator has written its credentials and answers with them; returns its tokens.
async fn emulator_ready(services: &mut Processes, dir: &RunDir, url: &str) -> anyhow::Result<Tokens> {
    loop {
        all_running(services)?;
        let text = std::fs::read_to_string(dir.credentials()).unwrap_or_default();
        let token = |name| fakecloud_api::credential(&text, name);
        if let (Some(user), Some(admin)) = (token("FAKECLOUD_USER_TOKEN"), token("FAKECLOUD_ADMIN_TOKEN"))
            && Client::new(url, user.clone())?.region().await.is_ok()
        {
            return Ok(Tokens { user, admin });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// What `up` waits for of each Node: Ready (its kubelet), initialized (the CCM removed the uninitialized
/// taint) and routed (the CCM's route controller created its route: `NetworkUnavailable` False, `RouteCreated`).
#[derive(Clone, Copy)]
struct NodeState {
    ready: bool,
    initialized: bool,
    routed: bool,
}

impl NodeState {
    fn of(node: &Node) -> Self {
        let condition = |type_: &str| {
            node.status.as_ref().and_then(|s| s.conditions.as_ref()).and_then(|c| c.iter().find(|c| c.type_ == type_))
        };
        let tainted = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == UNINITIALIZED_TAINT));
        Self {
            ready: condition("Ready").is_some_and(|c| c.status == "True"),
            initialized: !tainted,
            routed: condition("NetworkUnavailable")
                .is_some_and(|c| c.status == "False" && c.reason.as_deref() == Some("RouteCreated")),
        }
    }

    fn done(self) -> bool {
        self.ready && self.initialized && self.routed
    }
}

/// The fleet's Nodes as the watch last saw them, the ones `up` waits for.
#[derive(Default)]
struct Fleet {
    nodes: HashMap<String, NodeState>,
}

impl Fleet {
    fn count(&self, which: impl Fn(NodeState) -> bool) -> usize {
        self.nodes.values().filter(|state| which(**state)).count()
    }

    fn said(&self, of: usize) -> String {
        format!(
            "the Nodes ({} of {of} registered, {} Ready, {} initialized, {} routed)",
            self.nodes.len(),
            self.count(|n| n.ready),
            self.count(|n| n.initialized),
            self.count(|n| n.routed)
        )
    }
}

/// Waits until every one of `names` is Ready, initialized and routed ([`NodeState`]), from a
/// watch of the Nodes (a list per poll would decode the whole fleet each time), keeping `fleet` current for the
/// progress lines.
async fn nodes_ready(
    services: &mut Processes,
    control_plane: &mut ControlPlane,
    names: &[String],
    fleet: &Mutex<Fleet>,
) -> anyhow::Result<()> {
    let wanted: HashSet<&str> = names.iter().map(String::as_str).collect();
    // (The watcher re-lists and resumes on its own after an error, with backoff.)
    let events = watcher(kube::Api::<Node>::all(control_plane.client()), watcher::Config::default()).default_backoff();
    let mut events = std::pin::pin!(events);
    let mut check = tokio::time::interval(CHECK_RUNNING);
    loop {
        tokio::select! {
            event = events.next() => {
                let mut fleet = fleet.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                match event {
                    Some(Ok(watcher::Event::Apply(node) | watcher::Event::InitApply(node))) => {
                        if let Some(name) = node.metadata.name.as_deref().filter(|n| wanted.contains(n)) {
                            fleet.nodes.insert(name.to_string(), NodeState::of(&node));
                        }
                    }
                    Some(Ok(watcher::Event::Delete(node))) => {
                        fleet.nodes.remove(node.metadata.name.as_deref().unwrap_or_default());
                    }
                    Some(Ok(watcher::Event::Init)) => fleet.nodes.clear(),
                    Some(Ok(watcher::Event::InitDone)) => {}
                    Some(Err(e)) => tracing::warn!("watching the Nodes: {e}; the watch resumes"),
                    None => anyhow::bail!("the watch of the Nodes ended"),
                }
                if fleet.count(NodeState::done) == wanted.len() {
                    return Ok(());
                }
            }
            _ = check.tick() => {
                all_running(services)?;
                control_plane.check_running()?;
            }
        }
    }
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

//! What the CCM benchmarks measure of a CCM process, the same way for fakecloud-ccm, for upstream's
//! cloud-controller-manager with fakecloud's Go provider (issue #14) and for cloud-provider-aws on the AWS face
//! (issue #50), so that they run the same work with the same flags in one run and are compared line by line:
//!
//! - cloud calls: the emulator's audit log, the calls with the CCM's token, and those it refused;
//! - API-server writes: the API server's audit log, the CCM ServiceAccount's write requests (see
//!   [`Cluster::ccm_writes`]), and the Events among them by reason;
//! - CPU seconds (user + system, all threads) and peak RSS (`VmHWM`): `/proc/<pid>`;
//! - the steady state after: the same counters over a window with nothing to do, per minute.
//!
//! The environment: `FAKECLOUD_CCM_BENCH_CCMS` (`fakecloud,upstream`, the default, in that order for each N; add
//! `aws` for cloud-provider-aws, its binary and the AWS CLI from `FAKECLOUD_AWS_CCM` and `FAKECLOUD_AWS_CLI` or
//! built and installed as `make aws-ccm aws-clients` do, its cluster set up as `make e2e-aws`'s),
//! `FAKECLOUD_CCM_BENCH_NODES` (the Ns, `1,100,1000`), `FAKECLOUD_CCM_BENCH_ARGS` (extra flags, given to both),
//! `FAKECLOUD_CCM_BENCH_STEADY` (the steady-state window in seconds, 300), `FAKECLOUD_E2E_UPSTREAM_CCM` (the
//! upstream binary; without it `scripts/build-upstream-ccm.sh` is run, which returns the cached one at once).

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use fakecloud_api::QuotaName;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};

use crate::backend::LocalCcm;
use crate::env::LOCAL_LEASE;
use crate::local::{Ccm, Cluster, ClusterOptions, RECORDED_EARLIER, Rates};
use crate::{repo, until};

/// A CCM the benchmarks run.
#[derive(Debug, Clone)]
pub struct Contender {
    /// `fakecloud`, `upstream` or `aws`.
    pub name: String,
    pub bin: PathBuf,
    /// What its cluster is set up for: cloud-provider-aws's has its network tagged on the AWS face and its Nodes
    /// named by private DNS names ([`ClusterOptions::ccm`]).
    pub setup: LocalCcm,
}

impl Contender {
    /// `options`, for a cluster this CCM can run on.
    pub fn options(&self, options: ClusterOptions) -> ClusterOptions {
        ClusterOptions { ccm: self.setup.clone(), ..options }
    }
}

/// The CCMs `FAKECLOUD_CCM_BENCH_CCMS` names; `fakecloud_ccm` is the bench's build of fakecloud-ccm.
pub fn contenders(fakecloud_ccm: &str) -> Vec<Contender> {
    let names = std::env::var("FAKECLOUD_CCM_BENCH_CCMS").unwrap_or_else(|_| "fakecloud,upstream".into());
    names
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|name| {
            let (bin, setup) = match name {
                "fakecloud" => (fakecloud_ccm.into(), LocalCcm::Fakecloud),
                "upstream" => {
                    let bin = built("FAKECLOUD_E2E_UPSTREAM_CCM", &["scripts/build-upstream-ccm.sh"]);
                    (bin.clone(), LocalCcm::Upstream(bin))
                }
                "aws" => {
                    let ccm = built("FAKECLOUD_AWS_CCM", &["scripts/build-go-tool.sh", "ccm-aws"]);
                    let cli = built("FAKECLOUD_AWS_CLI", &["scripts/aws-clients.sh"]);
                    // aws-clients.sh prints the virtualenv.
                    let cli = if cli.is_dir() { cli.join("bin/aws") } else { cli };
                    (ccm.clone(), LocalCcm::Aws { ccm, cli })
                }
                other => panic!("FAKECLOUD_CCM_BENCH_CCMS: {other:?} is not `fakecloud`, `upstream` or `aws`"),
            };
            Contender { name: name.into(), bin, setup }
        })
        .collect()
}

/// The path in `var`, or the last line the repository's script `script` (with its arguments) prints: the build
/// or installation it keeps cached, returned at once when it is there.
fn built(var: &str, script: &[&str]) -> PathBuf {
    if let Some(path) = std::env::var_os(var).filter(|v| !v.is_empty()) {
        return path.into();
    }
    let out = std::process::Command::new("bash")
        .arg(repo().join(script[0]))
        .args(&script[1..])
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("bash runs");
    assert!(out.status.success(), "{} failed; or set {var}", script.join(" "));
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout.lines().last().unwrap_or_else(|| panic!("{} prints a path", script[0])).trim().into()
}

/// The Ns of `FAKECLOUD_CCM_BENCH_NODES`.
pub fn counts() -> Vec<usize> {
    let counts = std::env::var("FAKECLOUD_CCM_BENCH_NODES").unwrap_or_else(|_| "1,100,1000".into());
    counts.split(',').filter_map(|c| c.trim().parse().ok()).collect()
}

/// The extra CCM flags of `FAKECLOUD_CCM_BENCH_ARGS`, given to every CCM alike.
pub fn extra_args() -> Vec<String> {
    std::env::var("FAKECLOUD_CCM_BENCH_ARGS").unwrap_or_default().split_whitespace().map(String::from).collect()
}

/// 5 minutes by default: the period of both CCMs' address refresh, so each window holds one pass of each and
/// the steady rows compare (in a shorter one, a pass may fall in one CCM's window and not the other's).
fn steady_window() -> Duration {
    let secs = std::env::var("FAKECLOUD_CCM_BENCH_STEADY").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    Duration::from_secs(secs)
}

/// After the CCM leads, before the work starts: upstream starts its controllers just after it wins the Lease
/// and so, a moment later, does fakecloud-ccm; the same wait for both keeps the startup out of the clock.
const SETTLE: Duration = Duration::from_secs(2);

/// How long the CCM must make no cloud call and no API write (Lease renewals aside) for the work it was given to
/// be over: what a watch sees converge may leave writes behind (upstream records its events asynchronously).
const QUIET: Duration = Duration::from_secs(3);
/// The longest wait for [`QUIET`].
const QUIET_WITHIN: Duration = Duration::from_secs(60);

/// The CCM's counters at one moment.
#[derive(Debug, Clone)]
pub struct Counters {
    pub cpu: Duration,
    /// Cloud calls by operation.
    pub calls: BTreeMap<String, usize>,
    /// The calls among them the cloud refused, by `<operation> <status>` (a throttled call is a call).
    pub refused: BTreeMap<String, usize>,
    /// API-server writes by `<verb> <resource>`.
    pub writes: BTreeMap<String, usize>,
    /// The Events among the writes' creates, by reason.
    pub events: BTreeMap<String, usize>,
}

fn tally(items: impl IntoIterator<Item = String>) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for i in items {
        *counts.entry(i).or_insert(0) += 1;
    }
    counts
}

fn minus(now: &BTreeMap<String, usize>, then: &BTreeMap<String, usize>) -> BTreeMap<String, usize> {
    now.iter()
        .map(|(k, v)| (k.clone(), v.saturating_sub(then.get(k).copied().unwrap_or(0))))
        .filter(|(_, v)| *v > 0)
        .collect()
}

impl Counters {
    /// Event writes for what was recorded before `recorded_from` are told apart (see [`Cluster::ccm_writes`]).
    async fn read(cluster: &Cluster, ccm: &Ccm, recorded_from: Option<Timestamp>) -> Self {
        let audit = cluster.ccm_audit().await;
        let (writes, reasons) = cluster.ccm_writes(recorded_from);
        let refused = audit.iter().filter(|e| e.status >= 400).map(|e| format!("{} {}", e.operation, e.status));
        Self {
            cpu: cpu_time(ccm),
            refused: tally(refused),
            calls: tally(audit.into_iter().map(|e| e.operation)),
            writes: tally(writes),
            events: tally(reasons),
        }
    }

    /// What happened between `earlier` and these.
    fn since(&self, earlier: &Self) -> Self {
        Self {
            cpu: self.cpu.saturating_sub(earlier.cpu),
            calls: minus(&self.calls, &earlier.calls),
            refused: minus(&self.refused, &earlier.refused),
            writes: minus(&self.writes, &earlier.writes),
            events: minus(&self.events, &earlier.events),
        }
    }

    pub fn total_calls(&self) -> usize {
        self.calls.values().sum()
    }

    pub fn total_writes(&self) -> usize {
        self.writes.values().sum()
    }

    /// Cloud calls and API writes but leader election's.
    fn activity(&self) -> (usize, usize) {
        (self.total_calls(), self.total_writes() - self.writes.get("update leases").copied().unwrap_or(0))
    }
}

/// User + system CPU time of all the process's threads, from `/proc/<pid>/stat` (in USER_HZ, 100 a second on
/// every architecture Linux exports it for to userspace, whatever the kernel's own HZ).
fn cpu_time(ccm: &Ccm) -> Duration {
    let pid = ccm.child.id().unwrap_or_default();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name (field 2) may hold spaces; the fields after its closing parenthesis start at 3 (state),
    // so utime (14) and stime (15) are the 12th and 13th.
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    let ticks: u64 = fields.get(11..13).map(|f| f.iter().filter_map(|t| t.parse::<u64>().ok()).sum()).unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

fn load_average() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// A CCM being measured on a cluster of its own.
pub struct Measured<'a> {
    cluster: &'a Cluster,
    pub ccm: Ccm,
    contender: &'a Contender,
    before: Counters,
    /// The steady state's window after convergence (`FAKECLOUD_CCM_BENCH_STEADY`).
    pub window: Duration,
}

impl<'a> Measured<'a> {
    /// Start `contender` with `args`, wait until it leads and has started its controllers; the counters start
    /// from there.
    pub async fn start(cluster: &'a Cluster, contender: &'a Contender, args: &[String]) -> Self {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let ccm = cluster.ccm(&contender.bin, &args);
        let (namespace, name) = LOCAL_LEASE;
        let leases = Api::<Lease>::namespaced(cluster.client(), namespace);
        until(crate::HANG, &format!("{} leading", contender.name), async || {
            let holder = leases.get_opt(name).await.ok()??.spec?.holder_identity?;
            (!holder.is_empty()).then_some(())
        })
        .await;
        tokio::time::sleep(SETTLE).await;
        let before = Counters::read(cluster, &ccm, None).await;
        Self { cluster, ccm, contender, before, window: steady_window() }
    }

    /// Start counting once the CCM is done with the bench's own setup, which it took part in: its queued events
    /// (a fleet's go out for a while after its Nodes are routed) belong to the setup, not to the work.
    pub async fn begin(&mut self) {
        self.before = self.quiet().await;
    }

    /// The counters once the CCM has been [`QUIET`] (or after [`QUIET_WITHIN`]).
    async fn quiet(&self) -> Counters {
        let mut now = Counters::read(self.cluster, &self.ccm, None).await;
        let give_up = Instant::now() + QUIET_WITHIN;
        loop {
            tokio::time::sleep(QUIET).await;
            let next = Counters::read(self.cluster, &self.ccm, None).await;
            let quiet = next.activity() == now.activity();
            now = next;
            if quiet || Instant::now() > give_up {
                return now;
            }
        }
    }

    /// The work converged after `converge`: the counters since the start until the CCM is [`QUIET`], then the
    /// steady state, printed as one line.
    pub async fn converged(&self, bench: &str, n: usize, converge: Duration) -> Outcome {
        let now = self.quiet().await;
        let load_before = load_average();
        let window = self.window;
        let from = Timestamp::now();
        let start = Counters::read(self.cluster, &self.ccm, Some(from)).await;
        tokio::time::sleep(window).await;
        let mut steady = Counters::read(self.cluster, &self.ccm, Some(from)).await.since(&start);
        // Events the work recorded and a long queue wrote only in the window (a busy machine's API server) are
        // the work's: in the steady state they would be writes with nothing to do.
        let mut work = now.since(&self.before);
        for (what, count) in steady.writes.extract_if(.., |what: &String, _| what.ends_with(RECORDED_EARLIER)) {
            *work.writes.entry(what).or_insert(0) += count;
        }
        let outcome = Outcome {
            bench: bench.into(),
            ccm: self.contender.name.clone(),
            n,
            converge,
            work,
            steady,
            window,
            peak_rss_mib: self.ccm.peak_rss_mib(),
            load: format!("{load_before} / {}", load_average()),
        };
        println!("{outcome}");
        outcome
    }
}

/// One CCM's figures for one bench at one N.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub bench: String,
    pub ccm: String,
    pub n: usize,
    pub converge: Duration,
    /// From the work's start until the CCM was quiet after convergence.
    pub work: Counters,
    /// Over the steady-state window after.
    pub steady: Counters,
    pub window: Duration,
    pub peak_rss_mib: f64,
    /// The 1/5/15-minute load averages as the steady window starts / ends.
    pub load: String,
}

impl Outcome {
    fn per_minute(&self, count: usize) -> f64 {
        count as f64 * 60.0 / self.window.as_secs_f64()
    }

    /// What the comparison table shows: (what, value, decimals).
    fn figures(&self) -> [(&'static str, f64, usize); 8] {
        [
            ("time to converge (s)", self.converge.as_secs_f64(), 1),
            ("cloud calls", self.work.total_calls() as f64, 0),
            ("API-server writes", self.work.total_writes() as f64, 0),
            ("CPU (s)", self.work.cpu.as_secs_f64(), 2),
            ("peak RSS (MiB)", self.peak_rss_mib, 1),
            ("steady: cloud calls / min", self.per_minute(self.steady.total_calls()), 1),
            ("steady: API writes / min", self.per_minute(self.steady.total_writes()), 1),
            ("steady: CPU (s / min)", self.steady.cpu.as_secs_f64() * 60.0 / self.window.as_secs_f64(), 2),
        ]
    }
}

/// The side-by-side table (Markdown) of every (bench, N) fakecloud-ccm and another CCM ran: fakecloud-ccm's
/// figures, each other CCM's, and each ÷ fakecloud's (above 1: fakecloud-ccm spends less).
pub fn comparison(outcomes: &[Outcome]) -> String {
    // The CCMs besides fakecloud-ccm, in the order they ran.
    let mut others: Vec<&str> = Vec::new();
    for o in outcomes.iter().filter(|o| o.ccm != "fakecloud") {
        if !others.contains(&o.ccm.as_str()) {
            others.push(&o.ccm);
        }
    }
    let mut table = format!(
        "| bench | N | what | fakecloud-ccm |{}{}\n|---|---:|---|---:|{}\n",
        others.iter().map(|c| format!(" {c} |")).collect::<String>(),
        others.iter().map(|c| format!(" {c} ÷ fakecloud |")).collect::<String>(),
        "---:|".repeat(2 * others.len()),
    );
    for fc in outcomes.iter().filter(|o| o.ccm == "fakecloud") {
        let rivals: Vec<Option<&Outcome>> = others
            .iter()
            .map(|c| outcomes.iter().find(|o| o.ccm == *c && o.bench == fc.bench && o.n == fc.n))
            .collect();
        if rivals.iter().all(Option::is_none) {
            continue;
        }
        for (i, (what, a, decimals)) in fc.figures().into_iter().enumerate() {
            let theirs: Vec<Option<f64>> = rivals.iter().map(|r| r.map(|r| r.figures()[i].1)).collect();
            let values: String =
                theirs.iter().map(|b| b.map_or_else(|| " – |".into(), |b| format!(" {b:.decimals$} |"))).collect();
            let ratios: String = theirs
                .iter()
                .map(|b| match b {
                    Some(b) if a > 0.0 => format!(" {:.1} |", b / a),
                    _ => " – |".into(),
                })
                .collect();
            table.push_str(&format!("| {} | {} | {what} | {a:.decimals$} |{values}{ratios}\n", fc.bench, fc.n));
        }
    }
    table
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "bench={} ccm={} n={} converge={:.1?} cloud_calls={} api_writes={} cpu={:.2}s peak_rss={:.1}MiB | \
             steady {:?}: cloud_calls/min={:.1} api_writes/min={:.1} cpu={:.2}s/min | load {} | calls={:?} \
             refused={:?} writes={:?} events={:?} steady_calls={:?} steady_writes={:?}",
            self.bench,
            self.ccm,
            self.n,
            self.converge,
            self.work.total_calls(),
            self.work.total_writes(),
            self.work.cpu.as_secs_f64(),
            self.peak_rss_mib,
            self.window,
            self.per_minute(self.steady.total_calls()),
            self.per_minute(self.steady.total_writes()),
            self.steady.cpu.as_secs_f64() * 60.0 / self.window.as_secs_f64(),
            self.load,
            self.work.calls,
            self.work.refused,
            self.work.writes,
            self.work.events,
            self.steady.calls,
            self.steady.writes,
        )
    }
}

/// The longest wait for a fleet's or a batch's objects to be done: a hang detector.
const DEADLINE: Duration = Duration::from_secs(1200);

/// Wait until `done` holds for `n` distinct objects seen by a watch started before `start` runs; how long that
/// took from `start`.
pub async fn watch_until<K, F>(api: Api<K>, n: usize, done: fn(&K) -> bool, start: F) -> Duration
where
    K: kube::Resource + Clone + std::fmt::Debug + k8s_openapi::serde::de::DeserializeOwned + Send + 'static,
    K::DynamicType: Default,
    F: std::future::Future<Output = ()>,
{
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let watch =
        tokio::spawn(watcher(api, watcher::Config::default()).default_backoff().applied_objects().for_each(move |o| {
            if let Ok(o) = o
                && done(&o)
            {
                let _ = tx.send(o.meta().name.clone().unwrap_or_default());
            }
            futures::future::ready(())
        }));
    let t = Instant::now();
    start.await;
    let mut seen = HashSet::new();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while seen.len() < n {
        let Ok(Some(name)) = tokio::time::timeout_at(deadline, rx.recv()).await else {
            panic!("only {} of {n} done after {DEADLINE:?}", seen.len());
        };
        seen.insert(name);
    }
    watch.abort();
    t.elapsed()
}

/// A cluster for a fleet of `n` Nodes with a route each, for `contender`: a kubelet's real rates, pod CIDRs small
/// enough for all of them as `make up` gives them (the default /24 fits 256), the instance and route quotas
/// raised to fit.
pub async fn fleet_cluster(test: &str, n: usize, contender: &Contender) -> Option<Cluster> {
    let options = contender.options(ClusterOptions { rates: Rates::real(), ..ClusterOptions::default() });
    fleet_cluster_with(test, n, options).await
}

/// [`fleet_cluster`] with other rates or topology (`options`, for the contender); the pod CIDR size is the
/// fleet's.
pub async fn fleet_cluster_with(test: &str, n: usize, options: ClusterOptions) -> Option<Cluster> {
    let nodes = u32::try_from(n).expect("a fleet's size fits a quota");
    let options =
        ClusterOptions { node_cidr_mask_size: Some(fakecloud_controlplane::node_cidr_mask_size(nodes)), ..options };
    let cluster = Cluster::start_with_options(test, options).await?;
    let limit = nodes + 10;
    cluster.cloud.set_quota(QuotaName::Instances, limit).await.expect("the instances quota");
    cluster.cloud.set_quota(QuotaName::RoutesPerRouteTable, limit).await.expect("the routes quota");
    Some(cluster)
}

/// Create `n` instances named `<prefix>-0000`... and wait, by watches, until every Node is initialized and then
/// every one routed: how long each took from the first create (initialized, routed).
pub async fn fleet_routed(cluster: &Cluster, prefix: &str, n: usize) -> (Duration, Duration) {
    let cloud = cluster.cloud.clone();
    let requests: Vec<_> = (0..n).map(|i| cluster.instance_request(&format!("{prefix}-{i:04}"))).collect();
    let init = watch_until(cluster.nodes(), n, initialized, async move {
        for req in requests {
            cloud.create_instance(&req, None).await.expect("creating a fleet's instance");
        }
    })
    .await;
    (init, watch_until(cluster.nodes(), n, routed, async {}).await + init)
}

fn initialized(n: &Node) -> bool {
    n.spec.as_ref().and_then(|s| s.provider_id.as_ref()).is_some()
}

/// `NetworkUnavailable=False` for the reason the route controller gives.
fn routed(n: &Node) -> bool {
    n.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| {
        cs.iter().any(|c| {
            c.type_ == "NetworkUnavailable" && c.status == "False" && c.reason.as_deref() == Some("RouteCreated")
        })
    })
}

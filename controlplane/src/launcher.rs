//! Starting etcd, kube-apiserver and kube-controller-manager on loopback, and the
//! [`ControlPlane`] handle that owns them.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::binaries::{Binaries, pinned_kubernetes_version};
use crate::error::{Error, IoContext, Result};
use crate::kubeconfig::{self, Credentials};
use crate::pki::{FRONT_PROXY_CLIENT_CN, Pki};
use crate::process::{Processes, RunState, stop_recorded};

/// Pod network the node IPAM controller carves `spec.podCIDR`s from.
pub const CLUSTER_CIDR: &str = "10.244.0.0/16";
/// Per-node pod CIDR size.
pub const NODE_CIDR_MASK_SIZE: u8 = 24;
/// Service ClusterIP range (its first address is the `kubernetes` Service).
pub const SERVICE_CLUSTER_IP_RANGE: &str = "10.96.0.0/16";
/// Issuer of ServiceAccount tokens.
pub const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc";

/// The smallest pod CIDR a Node is given: 8 addresses, room for a few pods (kwok gives each pod an address from
/// it; a large fleet is for the cloud's and the CCM's scale, not for pods).
pub const SMALLEST_NODE_CIDR: u8 = 29;

fn cluster_prefix() -> u8 {
    CLUSTER_CIDR.rsplit_once('/').and_then(|(_, p)| p.parse::<u8>().ok()).unwrap_or(NODE_CIDR_MASK_SIZE)
}

/// The pod CIDR size kube-controller-manager gives each Node of a `count`-Node fleet (`--node-cidr-mask-size`):
/// a /24 up to 256 Nodes, as kubeadm and kind do; a larger fleet keeps the cluster CIDR (the routes, the CCM's
/// flag and the book stay what they are) and gets smaller pod CIDRs, one bit per doubling: a /26 up to 1,024,
/// a /29 up to 8,192.
pub fn node_cidr_mask_size(count: u32) -> u8 {
    let bits = u8::try_from(count.max(1).next_power_of_two().trailing_zeros()).unwrap_or(u8::MAX);
    cluster_prefix().saturating_add(bits).max(NODE_CIDR_MASK_SIZE)
}

/// The most Nodes `up` brings up: the cluster CIDR holds this many of the smallest pod CIDRs (kube-controller-
/// manager allocates one per Node; a Node without one is never routed).
pub fn max_nodes() -> u32 {
    1u32.checked_shl(u32::from(SMALLEST_NODE_CIDR.saturating_sub(cluster_prefix()))).unwrap_or(u32::MAX)
}

const ETCD: &str = "etcd";
const APISERVER: &str = "kube-apiserver";
const CONTROLLER_MANAGER: &str = "kube-controller-manager";
const POLL: Duration = Duration::from_millis(100);

/// Configures and starts a [`ControlPlane`].
#[derive(Debug, Clone)]
pub struct ControlPlaneBuilder {
    run_dir: Option<PathBuf>,
    bin_dir: Option<PathBuf>,
    apiserver_port: Option<u16>,
    node_monitor_grace_period: Option<Duration>,
    node_monitor_period: Option<Duration>,
    ready_timeout: Duration,
    keep_run_dir: bool,
    clean_stale: bool,
    apiserver_args: Vec<String>,
    controller_manager_args: Vec<String>,
}

impl Default for ControlPlaneBuilder {
    fn default() -> Self {
        Self {
            run_dir: None,
            bin_dir: None,
            apiserver_port: None,
            node_monitor_grace_period: None,
            node_monitor_period: None,
            // Generous: a cold start is ~5 s, but CI may run other builds on the same 2 cores.
            ready_timeout: Duration::from_secs(90),
            keep_run_dir: false,
            clean_stale: false,
            apiserver_args: Vec::new(),
            controller_manager_args: Vec::new(),
        }
    }
}

impl ControlPlaneBuilder {
    /// Use this run directory (must be new or empty). Default: a fresh temporary directory,
    /// removed after a clean stop and kept (with its logs) after a failure or panic.
    pub fn run_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.run_dir = Some(dir.into());
        self
    }

    /// Directory with the binaries. Default: `$FAKECLOUD_K8S_BIN` or the build cache.
    pub fn bin_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.bin_dir = Some(dir.into());
        self
    }

    /// Fixed apiserver port (default: a free one). Fails with [`Error::PortInUse`] if taken.
    pub fn apiserver_port(mut self, port: u16) -> Self {
        self.apiserver_port = Some(port);
        self
    }

    /// How long the node lifecycle controller waits for a kubelet heartbeat before marking a
    /// Node `Unknown` (upstream default 50 s; tests shorten it).
    pub fn node_monitor_grace_period(mut self, period: Duration) -> Self {
        self.node_monitor_grace_period = Some(period);
        self
    }

    /// How often the node lifecycle controller checks nodes (upstream default 5 s).
    pub fn node_monitor_period(mut self, period: Duration) -> Self {
        self.node_monitor_period = Some(period);
        self
    }

    /// How long to wait for `/readyz` and the controller manager's `/healthz`.
    pub fn ready_timeout(mut self, timeout: Duration) -> Self {
        self.ready_timeout = timeout;
        self
    }

    /// Keep a temporary run directory even after a clean stop.
    pub fn keep_run_dir(mut self, keep: bool) -> Self {
        self.keep_run_dir = keep;
        self
    }

    /// Wipe a stale run directory (one whose processes are all gone) instead of refusing.
    pub fn clean_stale(mut self, clean: bool) -> Self {
        self.clean_stale = clean;
        self
    }

    /// Extra kube-apiserver flag, e.g. `--feature-gates=...` (later flags win).
    pub fn apiserver_arg(mut self, arg: impl Into<String>) -> Self {
        self.apiserver_args.push(arg.into());
        self
    }

    /// Extra kube-controller-manager flag (later flags win).
    pub fn controller_manager_arg(mut self, arg: impl Into<String>) -> Self {
        self.controller_manager_args.push(arg.into());
        self
    }

    /// Generates credentials, starts the three components and waits until they are ready.
    ///
    /// On failure everything started so far is stopped and the run directory is kept; the
    /// error names the log to read.
    pub async fn start(self) -> Result<ControlPlane> {
        let started_at = Instant::now();
        let binaries = Binaries::locate(self.bin_dir.as_deref())?;
        let (run_dir, temporary) = prepare_run_dir(self.run_dir.as_deref(), self.clean_stale)?;
        let result = self.start_in(&run_dir, temporary, binaries).await;
        match &result {
            Ok(cp) => tracing::info!(
                version = pinned_kubernetes_version(),
                apiserver = %cp.apiserver_url,
                run_dir = %run_dir.display(),
                "control plane ready in {:.1?}",
                started_at.elapsed()
            ),
            Err(e) => tracing::error!(
                run_dir = %run_dir.display(),
                "control plane failed to start (logs kept in {}/logs): {e}",
                run_dir.display()
            ),
        }
        result
    }

    async fn start_in(self, run_dir: &Path, temporary: bool, binaries: Binaries) -> Result<ControlPlane> {
        let apiserver_port = match self.apiserver_port {
            Some(port) => ensure_port_free(port, APISERVER)?,
            None => free_port()?,
        };
        let etcd_client_port = free_port()?;
        let etcd_peer_port = free_port()?;
        let controller_manager_port = free_port()?;

        // etcd creates its own data dir, with the 0700 it insists on.
        for sub in ["logs", "kubeconfigs"] {
            let dir = run_dir.join(sub);
            std::fs::create_dir_all(&dir).io_context(|| format!("creating {}", dir.display()))?;
        }
        let t = Instant::now();
        let pki = Pki::generate(&run_dir.join("pki"))?;
        tracing::debug!("certificates generated in {:.1?}", t.elapsed());

        let apiserver_url = format!("https://127.0.0.1:{apiserver_port}");
        let admin_kubeconfig = run_dir.join("kubeconfigs").join("admin.kubeconfig");
        kubeconfig::write(
            &admin_kubeconfig,
            &kubeconfig::render(
                &apiserver_url,
                &pki.ca.cert_pem,
                "kubernetes-admin",
                &Credentials::ClientCert { cert_pem: &pki.admin.cert_pem, key_pem: &pki.admin.key_pem },
            ),
        )?;
        let controller_manager_kubeconfig = run_dir.join("kubeconfigs").join("controller-manager.kubeconfig");
        kubeconfig::write(
            &controller_manager_kubeconfig,
            &kubeconfig::render(
                &apiserver_url,
                &pki.ca.cert_pem,
                "system:kube-controller-manager",
                &Credentials::ClientCert {
                    cert_pem: &pki.controller_manager.cert_pem,
                    key_pem: &pki.controller_manager.key_pem,
                },
            ),
        )?;

        let mut processes = Processes::new(run_dir)?;
        let timeout = self.ready_timeout;

        let etcd_url = format!("http://127.0.0.1:{etcd_client_port}");
        let etcd_args = etcd_args(run_dir, etcd_client_port, etcd_peer_port);
        processes.spawn(ETCD, &binaries.etcd, &etcd_args)?;
        wait_until(&mut processes, ETCD, timeout, || etcd_healthy(etcd_client_port)).await?;

        let mut apiserver_args = apiserver_args(&pki, &etcd_url, apiserver_port);
        apiserver_args.extend(self.apiserver_args.iter().cloned());
        processes.spawn(APISERVER, &binaries.kube_apiserver, &apiserver_args)?;

        let client = kubeconfig::client(&admin_kubeconfig).await?;
        wait_until(&mut processes, APISERVER, timeout, || get_ok(&client, "/readyz")).await?;

        // Started only once the apiserver is ready: before the RBAC bootstrap policy exists its
        // first leader-election attempt is forbidden and the retry costs ~4 s.
        let mut kcm_args = controller_manager_args(&pki, &controller_manager_kubeconfig, controller_manager_port);
        if let Some(grace) = self.node_monitor_grace_period {
            kcm_args.push(format!("--node-monitor-grace-period={}", go_duration(grace)));
        }
        if let Some(period) = self.node_monitor_period {
            kcm_args.push(format!("--node-monitor-period={}", go_duration(period)));
        }
        kcm_args.extend(self.controller_manager_args.iter().cloned());
        processes.spawn(CONTROLLER_MANAGER, &binaries.kube_controller_manager, &kcm_args)?;

        let kcm_client = anonymous_client(&format!("https://127.0.0.1:{controller_manager_port}"), &pki.ca_der)?;
        wait_until(&mut processes, CONTROLLER_MANAGER, timeout, || get_ok(&kcm_client, "/healthz")).await?;
        // Healthy is not yet working: its controllers start only once it leads.
        wait_until(&mut processes, CONTROLLER_MANAGER, timeout, || holds_lease(&client, CONTROLLER_MANAGER)).await?;

        Ok(ControlPlane {
            run_dir: run_dir.to_path_buf(),
            temporary,
            keep_run_dir: self.keep_run_dir,
            apiserver_url,
            admin_kubeconfig,
            ca_pem: pki.ca.cert_pem.clone(),
            pki,
            client,
            processes,
        })
    }
}

/// A running control plane. Dropping it stops exactly the processes it started.
pub struct ControlPlane {
    run_dir: PathBuf,
    temporary: bool,
    keep_run_dir: bool,
    apiserver_url: String,
    admin_kubeconfig: PathBuf,
    ca_pem: String,
    pki: Pki,
    client: kube::Client,
    processes: Processes,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("apiserver_url", &self.apiserver_url)
            .field("run_dir", &self.run_dir)
            .field("processes", &self.processes)
            .finish_non_exhaustive()
    }
}

impl ControlPlane {
    pub fn builder() -> ControlPlaneBuilder {
        ControlPlaneBuilder::default()
    }

    /// `https://127.0.0.1:<port>`
    pub fn apiserver_url(&self) -> &str {
        &self.apiserver_url
    }

    /// A cluster-admin (system:masters) kubeconfig.
    pub fn admin_kubeconfig(&self) -> &Path {
        &self.admin_kubeconfig
    }

    /// A cluster-admin client.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    pub fn log_dir(&self) -> PathBuf {
        self.run_dir.join("logs")
    }

    /// PEM of the cluster CA.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    pub fn pki(&self) -> &Pki {
        &self.pki
    }

    /// The Kubernetes version the binaries were built as.
    pub fn version(&self) -> &'static str {
        pinned_kubernetes_version()
    }

    /// PIDs of the components, by name.
    pub fn pids(&self) -> Vec<(&'static str, u32)> {
        self.processes.iter().map(|p| (p.name, p.record.pid)).collect()
    }

    /// PID of one component (`etcd`, `kube-apiserver`, `kube-controller-manager`).
    pub fn pid(&self, component: &str) -> Option<u32> {
        self.processes.get(component).map(|p| p.record.pid)
    }

    /// Fails with [`Error::ProcessDied`] if any component has exited.
    pub fn check_running(&mut self) -> Result<()> {
        match self.processes.first_exited() {
            Some((component, status, log, tail)) => Err(Error::ProcessDied { component, status, log, tail }),
            None => Ok(()),
        }
    }

    /// Writes a kubeconfig that authenticates as ServiceAccount `namespace/name` with a token
    /// from the TokenRequest API, and returns its path. The ServiceAccount must exist; the
    /// token carries only that account's RBAC (how a CCM runs with its manifest's ClusterRole).
    pub async fn service_account_kubeconfig(
        &self,
        namespace: &str,
        name: &str,
        expiration: Duration,
    ) -> Result<PathBuf> {
        let path = self.run_dir.join("kubeconfigs").join(format!("sa-{namespace}-{name}.kubeconfig"));
        let server = kubeconfig::Server { url: &self.apiserver_url, ca_pem: &self.ca_pem };
        kubeconfig::write_service_account(&self.client, &server, namespace, name, expiration, &path).await?;
        Ok(path)
    }

    /// Stops the components now (newest first). Dropping does the same.
    pub fn stop(mut self) {
        self.processes.stop_all();
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.processes.stop_all();
        if std::thread::panicking() {
            // Test failures: the logs are what explain them.
            eprintln!("control plane stopped; logs kept in {}", self.log_dir().display());
        } else if self.temporary
            && !self.keep_run_dir
            && let Err(e) = std::fs::remove_dir_all(&self.run_dir)
        {
            tracing::warn!(run_dir = %self.run_dir.display(), "could not remove run directory: {e}");
        }
    }
}

/// Stops whatever a run directory records as running and removes the directory (unless
/// `keep`). Refuses directories that are not ours. Returns the names of stopped processes.
pub fn down(run_dir: &Path, keep: bool) -> Result<Vec<String>> {
    if !run_dir.exists() {
        return Ok(Vec::new());
    }
    let state = RunState::read(run_dir)?.ok_or_else(|| Error::RunDirNotEmpty { run_dir: run_dir.to_path_buf() })?;
    let stopped = stop_recorded(&state);
    let still: Vec<String> = state
        .alive()
        .into_iter()
        .filter(|r| r.pid != std::process::id())
        .map(|r| format!("{} (pid {})", r.name, r.pid))
        .collect();
    if !still.is_empty() {
        return Err(Error::Invalid(format!(
            "could not stop {}; stop them by hand and run down again",
            still.join(", ")
        )));
    }
    if !keep {
        std::fs::remove_dir_all(run_dir).io_context(|| format!("removing {}", run_dir.display()))?;
    }
    Ok(stopped)
}

/// Creates or validates the run directory: returns (absolute path, created-as-temporary).
fn prepare_run_dir(requested: Option<&Path>, clean_stale: bool) -> Result<(PathBuf, bool)> {
    let Some(dir) = requested else {
        let dir = tempfile::Builder::new()
            .prefix("fakecloud-controlplane-")
            .tempdir()
            .io_context(|| "creating a temporary run directory".to_string())?
            .keep();
        return Ok((dir, true));
    };
    std::fs::create_dir_all(dir).io_context(|| format!("creating {}", dir.display()))?;
    let dir = std::fs::canonicalize(dir).io_context(|| format!("resolving {}", dir.display()))?;
    let empty = std::fs::read_dir(&dir).io_context(|| format!("reading {}", dir.display()))?.next().is_none();
    if empty {
        return Ok((dir, false));
    }
    let Some(state) = RunState::read(&dir)? else {
        return Err(Error::RunDirNotEmpty { run_dir: dir });
    };
    let alive = state.alive();
    if !alive.is_empty() {
        let running = alive.iter().map(|r| format!("{} pid {}", r.name, r.pid)).collect::<Vec<_>>().join(", ");
        return Err(Error::AlreadyRunning { run_dir: dir, running });
    }
    if !clean_stale {
        return Err(Error::StaleRunDir { run_dir: dir });
    }
    tracing::info!(run_dir = %dir.display(), "removing the stale run directory of a stopped control plane");
    std::fs::remove_dir_all(&dir).io_context(|| format!("removing {}", dir.display()))?;
    std::fs::create_dir_all(&dir).io_context(|| format!("creating {}", dir.display()))?;
    Ok((dir, false))
}

/// A free port on 127.0.0.1 ([`crate::ports`]). It is released before the component binds it; a collision in
/// that window surfaces as the component exiting with its log shown.
fn free_port() -> Result<u16> {
    crate::ports::free_port().io_context(|| "finding a free port on 127.0.0.1".to_string())
}

fn ensure_port_free(port: u16, component: &'static str) -> Result<u16> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port)).map(|_| port).map_err(|source| Error::PortInUse {
        component,
        port,
        source,
    })
}

/// Formats a duration as a Go duration flag value (`1500ms`, `40s`).
fn go_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 { format!("{}s", d.as_secs()) } else { format!("{}ms", d.as_millis()) }
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

fn etcd_args(run_dir: &Path, client_port: u16, peer_port: u16) -> Vec<String> {
    let client = format!("http://127.0.0.1:{client_port}");
    let peer = format!("http://127.0.0.1:{peer_port}");
    vec![
        "--name=fakecloud".into(),
        format!("--data-dir={}", path(&run_dir.join("etcd"))),
        format!("--listen-client-urls={client}"),
        format!("--advertise-client-urls={client}"),
        format!("--listen-peer-urls={peer}"),
        format!("--initial-advertise-peer-urls={peer}"),
        format!("--initial-cluster=fakecloud={peer}"),
        "--initial-cluster-state=new".into(),
        // A throwaway test cluster: skipping fsync keeps etcd fast on slow CI disks.
        "--unsafe-no-fsync=true".into(),
        "--log-level=warn".into(),
    ]
}

fn apiserver_args(pki: &Pki, etcd_url: &str, port: u16) -> Vec<String> {
    vec![
        format!("--etcd-servers={etcd_url}"),
        "--bind-address=127.0.0.1".into(),
        "--advertise-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        // With a loopback advertise address the default reconciler logs an invalid
        // Endpoints error every 10 s.
        "--endpoint-reconciler-type=none".into(),
        format!("--cert-dir={}", path(&pki.dir)),
        format!("--tls-cert-file={}", path(&pki.apiserver.cert)),
        format!("--tls-private-key-file={}", path(&pki.apiserver.key)),
        format!("--client-ca-file={}", path(&pki.ca.cert)),
        format!("--service-account-key-file={}", path(&pki.service_account_pub)),
        format!("--service-account-signing-key-file={}", path(&pki.service_account_key)),
        format!("--service-account-issuer={SERVICE_ACCOUNT_ISSUER}"),
        "--authorization-mode=RBAC".into(),
        format!("--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}"),
        // Front proxy: without it the controller manager loops on a missing CA bundle.
        format!("--requestheader-client-ca-file={}", path(&pki.front_proxy_ca.cert)),
        format!("--requestheader-allowed-names={FRONT_PROXY_CLIENT_CN}"),
        "--requestheader-username-headers=X-Remote-User".into(),
        "--requestheader-group-headers=X-Remote-Group".into(),
        "--requestheader-extra-headers-prefix=X-Remote-Extra-".into(),
        format!("--proxy-client-cert-file={}", path(&pki.front_proxy_client.cert)),
        format!("--proxy-client-key-file={}", path(&pki.front_proxy_client.key)),
        "--allow-privileged=true".into(),
        "--profiling=false".into(),
    ]
}

fn controller_manager_args(pki: &Pki, kubeconfig: &Path, port: u16) -> Vec<String> {
    let kubeconfig = path(kubeconfig);
    vec![
        format!("--kubeconfig={kubeconfig}"),
        format!("--authentication-kubeconfig={kubeconfig}"),
        format!("--authorization-kubeconfig={kubeconfig}"),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        format!("--cert-dir={}", path(&pki.dir)),
        format!("--tls-cert-file={}", path(&pki.controller_manager_serving.cert)),
        format!("--tls-private-key-file={}", path(&pki.controller_manager_serving.key)),
        format!("--client-ca-file={}", path(&pki.ca.cert)),
        format!("--requestheader-client-ca-file={}", path(&pki.front_proxy_ca.cert)),
        // As beside an external CCM: the KCM runs no cloud loops; node IPAM stays here.
        "--cloud-provider=external".into(),
        "--allocate-node-cidrs=true".into(),
        format!("--cluster-cidr={CLUSTER_CIDR}"),
        format!("--node-cidr-mask-size={NODE_CIDR_MASK_SIZE}"),
        format!("--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}"),
        "--use-service-account-credentials=true".into(),
        format!("--service-account-private-key-file={}", path(&pki.service_account_key)),
        format!("--root-ca-file={}", path(&pki.ca.cert)),
        format!("--cluster-signing-cert-file={}", path(&pki.ca.cert)),
        format!("--cluster-signing-key-file={}", path(&pki.ca.key)),
        "--leader-elect=true".into(),
        // The default client-side limit (20 qps) throttles its start-up discovery by seconds.
        "--kube-api-qps=200".into(),
        "--kube-api-burst=400".into(),
        "--profiling=false".into(),
    ]
}

/// Polls `check` until it succeeds, failing early if any started process exits.
async fn wait_until<F, Fut>(
    processes: &mut Processes,
    component: &'static str,
    timeout: Duration,
    mut check: F,
) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<(), String>>,
{
    let started = Instant::now();
    let mut last_error;
    loop {
        if let Some((name, status, log, tail)) = processes.first_exited() {
            return Err(Error::ProcessExited { component: name, status, log, tail });
        }
        match tokio::time::timeout(POLL * 20, check()).await {
            Ok(Ok(())) => {
                tracing::debug!(component, "ready after {:.1?}", started.elapsed());
                return Ok(());
            }
            Ok(Err(e)) => last_error = e,
            Err(_) => last_error = "check timed out".into(),
        }
        if started.elapsed() >= timeout {
            let (log, tail) = processes.get(component).map(|p| (p.log.clone(), p.log_tail(30))).unwrap_or_default();
            return Err(Error::NotReady { component, timeout, last_error, log, tail });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// etcd's `/health` over plain HTTP/1.0 on loopback (no HTTP client needed for one GET).
async fn etcd_healthy(port: u16) -> std::result::Result<(), String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = tokio::net::TcpStream::connect(addr).await.map_err(|e| format!("connecting to etcd: {e}"))?;
    stream.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").await.map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.map_err(|e| e.to_string())?;
    if response.contains("\"health\":\"true\"") {
        Ok(())
    } else {
        Err(format!("etcd /health: {}", response.lines().last().unwrap_or("")))
    }
}

async fn get_ok(client: &kube::Client, path: &str) -> std::result::Result<(), String> {
    let request = http::Request::get(path).body(Vec::new()).map_err(|e| e.to_string())?;
    client.request_text(request).await.map(|_| ()).map_err(|e| format!("GET {path}: {e}"))
}

/// True once someone holds the leader-election Lease `kube-system/<name>`.
async fn holds_lease(client: &kube::Client, name: &str) -> std::result::Result<(), String> {
    let leases = kube::Api::<Lease>::namespaced(client.clone(), "kube-system");
    let lease = leases.get_opt(name).await.map_err(|e| format!("reading Lease kube-system/{name}: {e}"))?;
    match lease.and_then(|l| l.spec).and_then(|s| s.holder_identity) {
        Some(holder) if !holder.is_empty() => Ok(()),
        _ => Err(format!("Lease kube-system/{name} not acquired yet")),
    }
}

/// A client with no credentials that trusts our CA (for the controller manager's `/healthz`,
/// which it serves to anyone).
fn anonymous_client(url: &str, ca_der: &[u8]) -> Result<kube::Client> {
    let uri = url.parse::<http::Uri>().map_err(|e| Error::Invalid(format!("bad URL {url}: {e}")))?;
    let mut config = kube::Config::new(uri);
    config.root_cert = Some(vec![ca_der.to_vec()]);
    Ok(kube::Client::try_from(config)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fleet_gets_pod_cidrs_that_fit_the_cluster_cidr() {
        for (count, mask) in [(1, 24), (3, 24), (256, 24), (257, 25), (1000, 26), (1024, 26), (5000, 29), (8192, 29)] {
            assert_eq!(node_cidr_mask_size(count), mask, "{count} Nodes");
            assert!(count <= 1 << (mask - cluster_prefix()), "{count} Nodes fit /{mask}s");
        }
    }

    #[test]
    fn go_durations() {
        assert_eq!(go_duration(Duration::from_secs(40)), "40s");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1500ms");
    }

    #[test]
    fn port_in_use_is_reported_with_the_component() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let err = ensure_port_free(port, APISERVER).expect_err("port is taken");
        let msg = err.to_string();
        assert!(msg.contains(&port.to_string()) && msg.contains(APISERVER), "{msg}");
    }

    #[test]
    fn run_dir_states() {
        let root = tempfile::tempdir().expect("tempdir");
        // New and empty directories are fine.
        let fresh = root.path().join("new");
        assert!(prepare_run_dir(Some(&fresh), false).is_ok());
        assert!(prepare_run_dir(Some(&fresh), false).is_ok());

        // Someone else's files: refuse.
        std::fs::write(fresh.join("notes.txt"), "x").expect("write");
        assert!(matches!(prepare_run_dir(Some(&fresh), false), Err(Error::RunDirNotEmpty { .. })));

        // A run dir whose processes are gone: stale, unless asked to clean.
        let stale = root.path().join("stale");
        std::fs::create_dir_all(&stale).expect("mkdir");
        RunState {
            owner: None,
            processes: vec![crate::process::ProcessRecord { name: "etcd".into(), pid: u32::MAX - 1, start_time: 1 }],
        }
        .write(&stale)
        .expect("write state");
        let err = prepare_run_dir(Some(&stale), false).expect_err("stale");
        assert!(err.to_string().contains("down --run-dir"), "{err}");
        assert!(prepare_run_dir(Some(&stale), true).is_ok());
        assert!(!RunState::path(&stale).exists());

        // A run dir whose owner is alive (this test process): already running.
        let live = root.path().join("live");
        std::fs::create_dir_all(&live).expect("mkdir");
        RunState { owner: crate::process::ProcessRecord::current("owner"), processes: vec![] }
            .write(&live)
            .expect("write state");
        assert!(matches!(prepare_run_dir(Some(&live), true), Err(Error::AlreadyRunning { .. })));
    }

    #[test]
    fn down_refuses_foreign_directories_and_ignores_missing_ones() {
        let root = tempfile::tempdir().expect("tempdir");
        assert!(down(&root.path().join("missing"), false).expect("ok").is_empty());
        std::fs::write(root.path().join("x"), "x").expect("write");
        assert!(matches!(down(root.path(), false), Err(Error::RunDirNotEmpty { .. })));
        assert!(root.path().join("x").exists());
    }
}

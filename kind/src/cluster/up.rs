//! `make kind-up`: the kind path, end to end, on this machine or a user's.
//!  1. a container engine: the user's Docker if one answers, else a private one built and started here
//!     (`crate::engine`: its own socket and data-root, an egress guard before any container runs);
//!  2. the kind node image of the local control plane's Kubernetes version, built offline, and the project's
//!     images;
//!  3. a kind cluster (kind-config/cluster.yaml, or KIND_CONFIG) whose kubelets wait for an external CCM;
//!  4. the emulator container on the kind network at a fixed address, the kind nodes adopted as its instances,
//!     the cloud's DNS zones forwarded to it from CoreDNS (`dns`);
//!  5. the VPC's routing (vpc-router/deploy/): every node's pod network from its podCIDR, the routes between
//!     nodes from the emulator's route table — so the CCM's route controller is what connects them;
//!  6. the CCM as its two-replica Deployment: fakecloud-ccm (ccm/deploy/), or with FAKECLOUD_KIND_CCM=upstream
//!     upstream's cloud-controller-manager with fakecloud's Go provider (ccm-upstream/deploy/), or with
//!     FAKECLOUD_KIND_CCM=aws cloud-provider-aws (ccm-aws/deploy/, once `aws` has set the cluster up for it); then
//!     a wait until every node is Ready and initialized (providerID, zone labels, no uninitialized taint) and
//!     CoreDNS runs.
//!
//! On a failure or an interrupt it deletes what it created, stops an engine it started, and says what went
//! wrong. `--prepare` stops after step 2 (engine and images, no cluster): make e2e-kind-both runs it once, so
//! its two kind-ups can go side by side, each finding everything built.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail};

use super::config::{self, Needs};
use super::tools::Tools;
use super::{aws, dns, network};
use crate::docker::Docker;
use crate::engine::Engine;
use crate::run::{cmd, step, wait_for};
use crate::settings::{Ccm, Settings};
use crate::{images, node_binaries, node_image};

/// Where the emulator's image keeps its credentials file: beside its database (docker/emulator.Dockerfile).
const EMULATOR_CREDENTIALS: &str = "/var/lib/fakecloud/fakecloud.credentials";

/// What this run created, removed again unless it succeeds.
struct Undo<'a> {
    s: &'a Settings,
    docker: Option<Docker>,
    cluster: bool,
    emulator: bool,
    started_engine: bool,
    done: bool,
}

impl Drop for Undo<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let c = &self.s.cluster;
        tracing::info!("failed: removing what this run created");
        if let Some(d) = &self.docker {
            if self.cluster {
                let tools = Tools::new(self.s, d.clone(), &[]);
                let _ = tools.kind(["delete", "cluster", "--name", &c.name]).succeeds();
            }
            if self.emulator {
                let _ = d.cmd(["rm", "-f", &c.emulator]).succeeds();
                let _ = d.cmd(["volume", "rm", &format!("{}-data", c.emulator)]).succeeds();
            }
        }
        if self.started_engine
            && let Err(e) = Engine::of(self.s).stop()
        {
            tracing::info!("stopping the private engine: {e:#}");
        }
        for f in [c.kubeconfig(), c.credentials(), c.ccm_file()] {
            let _ = std::fs::remove_file(f);
        }
        tracing::info!("logs of the engine, if it was ours: {}", self.s.engine_run_dir.join("dockerd.log").display());
    }
}

/// Refuse to go on once an interrupt (Ctrl-C, a CI's SIGTERM) came: the tools it interrupted fail too, and the
/// undo runs as the error returns.
fn check(interrupted: &AtomicBool) -> anyhow::Result<()> {
    if interrupted.load(Ordering::Relaxed) {
        bail!("interrupted");
    }
    Ok(())
}

pub fn up(s: &Settings, prepare: bool) -> anyhow::Result<()> {
    let interrupted = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&interrupted))?;
    }
    let kind_config = std::env::var("KIND_CONFIG")
        .ok()
        .filter(|c| !c.is_empty())
        .map_or_else(|| s.repo.join("kind-config/cluster.yaml"), PathBuf::from);
    let config_text = std::fs::read_to_string(&kind_config)
        .with_context(|| format!("no kind config at {}", kind_config.display()))?;
    let c = &s.cluster;

    // --- refuse early: the port, before anything starts or is written ---------------------------------------
    if !prepare && std::net::TcpStream::connect(("127.0.0.1", s.port)).is_ok() {
        bail!("port {} on 127.0.0.1 is taken (another emulator, or 'make up'?); free it or set FAKECLOUD_PORT", s.port);
    }
    std::fs::create_dir_all(&c.run_root)?;

    // --- 1. the engine --------------------------------------------------------------------------------------
    let engine = Engine::of(s);
    let mut undo = Undo { s, docker: None, cluster: false, emulator: false, started_engine: false, done: false };
    undo.started_engine = !Docker::from_env().answers();
    engine.start()?;
    let docker = engine.docker();
    undo.docker = Some(docker.clone());
    refuse_rootless_cgroup_v1(&docker)?;
    let node_image = std::env::var("KIND_NODE_IMAGE").ok().filter(|i| !i.is_empty()).unwrap_or(s.node_image.clone());
    ensure_disk(s, &docker, config::nodes(&config_text), &node_image)?;
    if !prepare && docker.cmd(["ps", "-a", "--format", "{{.Names}}"]).output()?.lines().any(|n| n == c.emulator) {
        bail!("a container named {} exists (an earlier make kind-up?): 'make kind-down' first", c.emulator);
    }
    check(&interrupted)?;

    // --- 2. binaries and images -----------------------------------------------------------------------------
    // kubectl of the cluster's version.
    let cp_bin = crate::go::build_script(s, "scripts/build-control-plane.sh", &[])?;
    node_binaries::build(s)?;
    let tools = Tools::new(s, docker.clone(), &[&cp_bin]);
    if !prepare && tools.cluster_exists(&c.name) {
        bail!(
            "a kind cluster named {} exists already (an earlier make kind-up?): use it, or 'make kind-down' first",
            c.name
        );
    }
    if node_image == s.node_image {
        node_image::ensure(s, &docker)?;
    }
    check_node_image_version(s, &docker, &node_image)?;
    images::build(s, &docker)?;
    check(&interrupted)?;
    if prepare {
        tracing::info!(
            "prepared: the engine answers ({}) and the node image and the project's images are built",
            docker.shown()
        );
        undo.done = true;
        return Ok(());
    }

    // --- 3. the cluster -------------------------------------------------------------------------------------
    let cgroup_v1 = cmd("stat", ["-fc", "%T", "/sys/fs/cgroup"]).output().is_ok_and(|t| t != "cgroup2fs");
    if cgroup_v1 {
        tracing::info!("this host has cgroup v1: the kubelets get failCgroupV1: false");
    }
    let augmented = config::augmented(&config_text, &Needs { preloaded_images: node_image == s.node_image, cgroup_v1 })
        .with_context(|| kind_config.display().to_string())?;
    std::fs::write(c.config_copy(), augmented)?;
    undo.cluster = true;
    let nodes = config::nodes(&config_text);
    step(&format!("creating kind cluster {} ({nodes} nodes, image {node_image})", c.name), || {
        tools
            .kind(["create", "cluster", "--name", &c.name, "--image", &node_image, "--config"])
            .arg(c.config_copy())
            .run_shown()
    })?;
    std::fs::write(c.kubeconfig(), tools.kind(["get", "kubeconfig", "--name", &c.name]).output()? + "\n")?;
    check(&interrupted)?;

    // --- 4. the emulator beside the cluster ----------------------------------------------------------------
    let endpoint = format!("http://127.0.0.1:{}", s.port);
    let subnets =
        docker.cmd(["network", "inspect", &c.network, "-f", "{{range .IPAM.Config}}{{.Subnet}} {{end}}"]).output()?;
    let at = network::on(&subnets)?;
    // The cloud's names answer at the emulator's address on the kind network, which the host reaches too.
    let dns = format!("{}:53", at.emulator);
    let adopt = at.adopt.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
    undo.emulator = true;
    // The emulator serves the load balancers' traffic and holds the pool's addresses in its container (a local
    // route, so it needs NET_ADMIN, as root there), so an EXTERNAL-IP answers from the host and from the pods. A
    // passthrough load balancer's packets it routes on to a node, out of the interface they came in by:
    // forwarding on, and no ICMP redirect telling the client to go to the node itself (both only in the
    // container's network namespace).
    step(
        &format!(
            "starting the emulator on the kind network at {}, load balancers in {} (container {}, host port {})",
            at.emulator, at.lb_pool, c.emulator, s.port
        ),
        || {
            docker
                .cmd(["run", "-d", "--name", &c.emulator, "--network", &c.network])
                .args(["--ip", &at.emulator.to_string(), "-p", &format!("127.0.0.1:{}:8787", s.port)])
                .args(["-v", &format!("{}-data:/var/lib/fakecloud", c.emulator), "--user", "0"])
                .args(["--cap-add", "NET_ADMIN", "--sysctl", "net.ipv4.ip_forward=1"])
                .args(["--sysctl", "net.ipv4.conf.all.send_redirects=0"])
                .args(["--sysctl", "net.ipv4.conf.default.send_redirects=0"])
                .args(["-e", "FAKECLOUD_SERVE_LOAD_BALANCERS=true", "-e", "FAKECLOUD_HOLD_PUBLIC_POOL=true"])
                // Its own address, not the wildcard: a UDP or TCP socket on 0.0.0.0:53 would take port 53 from
                // every load balancer address in the container, and a Service's port 53 would never answer.
                .args(["-e", &format!("FAKECLOUD_DNS_LISTEN={dns}")])
                .args(["-e", &format!("FAKECLOUD_PUBLIC_POOL={}", at.lb_pool)])
                .args(["-e", &format!("FAKECLOUD_ADOPT_NETWORKS={adopt}")])
                .arg("fakecloud/emulator:dev")
                .run()
        },
    )?;
    // Its tokens and AWS key pair, which it generates into its volume on a first start, as `fakecloud serve` does
    // beside any database: the CLI's and the CCM's, and the user's shell's (written to the run directory below).
    let generated = format!("docker exec {} cat {EMULATOR_CREDENTIALS}", c.emulator);
    let credentials = wait_for(Duration::from_secs(20), Duration::from_millis(200), || {
        docker.cmd(["exec", &c.emulator, "cat", EMULATOR_CREDENTIALS]).output().ok()
    })
    .with_context(|| format!("the emulator wrote no credentials file ({generated}; docker logs {})", c.emulator))?;
    let token = |key| {
        fakecloud_api::credential(&credentials, key).with_context(|| format!("no {key} in the output of {generated}"))
    };
    let (user, admin) = (token(fakecloud_api::ENV_USER_TOKEN)?, token(fakecloud_api::ENV_ADMIN_TOKEN)?);
    let cli = |args: &[&str]| {
        cmd(&s.image_target_dir.join("fakecloud").display().to_string(), args)
            .env("FAKECLOUD_ENDPOINT", &endpoint)
            .env("FAKECLOUD_USER_TOKEN", &user)
            .env("FAKECLOUD_ADMIN_TOKEN", &admin)
    };
    if wait_for(Duration::from_secs(20), Duration::from_millis(200), || cli(&["quota", "get"]).succeeds().then_some(()))
        .is_none()
    {
        bail!("the emulator does not answer on {endpoint} (docker logs {})", c.emulator);
    }
    let kubeconfig = c.kubeconfig().display().to_string();
    step("adopting the kind nodes as cloud instances", || cli(&["adopt", "--kubeconfig", &kubeconfig]).run())?;
    check(&interrupted)?;
    let in_cluster_url = format!("http://{}:8787", at.emulator);
    let aws = match s.ccm {
        Ccm::Aws => Some(step("setting the cluster up on the AWS face, as cloud-provider-aws expects", || {
            let aws_cli = crate::go::build_script(s, "scripts/aws-clients.sh", &[])?.join("bin/aws");
            aws::set_up(&tools, &endpoint, &in_cluster_url, &credentials, &aws_cli)
        })?),
        Ccm::Fakecloud | Ccm::Upstream => None,
    };
    // For the user's shell: the tokens and key pair, and with cloud-provider-aws the AWS CLI's and boto3's endpoint
    // and region too.
    let aws_lines = aws.as_ref().map_or_else(String::new, |aws| {
        format!("export AWS_ENDPOINT_URL={endpoint}\nexport AWS_DEFAULT_REGION={}\n", aws.region)
    });
    write_private(
        &c.credentials(),
        &format!("export FAKECLOUD_ENDPOINT={endpoint}\nexport FAKECLOUD_DNS={dns}\n{credentials}\n{aws_lines}"),
    )?;

    // --- 5 and 6. the VPC's routing and the CCM ------------------------------------------------------------
    // The emulator's image too: the suite's pod-network case runs it as a server and a client pod; agnhost is
    // the server its load balancer traffic cases send to.
    step("loading the images into the kind nodes", || {
        tools
            .kind(["load", "docker-image", "--name", &c.name])
            .arg(format!("{}:dev", s.ccm.image()))
            .args(["fakecloud/vpc-router:dev", "fakecloud/emulator:dev", "fakecloud/agnhost:dev"])
            .run()
    })?;
    // The real cloud config (the placeholder in ccm/deploy/cloud-config.yaml is not applied): the user token, as
    // a customer of the cloud has it; for cloud-provider-aws, its own cloud config and the account's key pair.
    // The VPC router is the cloud's fabric, not a customer: the admin token (never faulted, not the CCM's calls).
    let cloud_config = format!("endpoint: {in_cluster_url}\ntoken-file: /etc/fakecloud/token\n");
    let ccm_secret: Vec<(&str, &str)> = match &aws {
        Some(aws) => vec![
            ("cloud-config", &aws.cloud_config),
            ("aws-access-key-id", &aws.access_key_id),
            ("aws-secret-access-key", &aws.secret_access_key),
        ],
        None => vec![("cloud-config", &cloud_config), ("token", &user)],
    };
    let router_secret = vec![("cloud-config", cloud_config.as_str()), ("token", admin.as_str())];
    for (secret, entries) in [("fakecloud-cloud-config", ccm_secret), ("fakecloud-vpc-router-config", router_secret)] {
        let yaml = tools
            .kubectl(["-n", "kube-system", "create", "secret", "generic", secret])
            .args(entries.iter().map(|(k, v)| format!("--from-literal={k}={v}")))
            .args(["--dry-run=client", "-o", "yaml"])
            .output()?;
        tools.kubectl(["apply", "-f", "-"]).stdin(yaml).run()?;
    }
    step("forwarding the cloud's zones from CoreDNS to the emulator", || {
        let corefile = tools
            .kubectl(["-n", "kube-system", "get", "configmap", "coredns", "-o", "jsonpath={.data.Corefile}"])
            .output()?;
        let yaml = tools
            .kubectl(["-n", "kube-system", "create", "configmap", "coredns"])
            .arg(format!("--from-literal=Corefile={}", dns::with_cloud_zones(&corefile, at.emulator)))
            .args(["--dry-run=client", "-o", "yaml"])
            .output()?;
        tools.kubectl(["apply", "-f", "-"]).stdin(yaml).run()?;
        // Its reload plugin would notice within a minute; a restart makes the zones answer before the suite asks.
        tools.kubectl(["-n", "kube-system", "rollout", "restart", "deployment/coredns"]).run()
    })?;
    tools.kubectl(["apply", "-f"]).arg(s.repo.join("vpc-router/deploy/vpc-router.yaml")).run()?;
    tools.kubectl(["apply", "-f"]).arg(s.repo.join("ccm/deploy/rbac.yaml")).run()?;
    let manifest = match s.ccm.overlay() {
        None => std::fs::read_to_string(s.repo.join("ccm/deploy/deployment.yaml"))?,
        Some(overlay) => {
            tools.kubectl(["kustomize", "--load-restrictor=LoadRestrictionsNone"]).arg(s.repo.join(overlay)).output()?
        }
    };
    let manifest = config::with_cluster_cidr(&manifest, &config::pod_subnet(&config_text));
    tools.kubectl(["apply", "-f", "-"]).stdin(manifest).run()?;
    std::fs::write(c.ccm_file(), format!("{}\n", s.ccm.name()))?;

    let deployment = s.ccm.deployment();
    let columns = "custom-columns=N:.metadata.name,P:.spec.providerID,T:.spec.taints[*].key";
    let waits = [
        Wait {
            what: format!("every node to be initialized by {deployment}"),
            short: "nodes initialized",
            kubectl: vec!["get", "nodes", "--no-headers", "-o", columns],
            left: uninitialized,
        },
        Wait {
            what: "every node to be Ready (the VPC router wrote its pod network)".into(),
            short: "Ready nodes",
            kubectl: vec!["get", "nodes", "--no-headers"],
            left: not_ready,
        },
        Wait {
            what: "CoreDNS".into(),
            short: "CoreDNS running",
            kubectl: vec!["-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-dns", "--no-headers"],
            left: not_running,
        },
    ];
    for w in waits {
        step(&format!("waiting for {}", w.what), || {
            await_none(w.short, Duration::from_secs(300), &interrupted, || {
                tools.kubectl(&w.kubectl).output().map(|out| (w.left)(&out))
            })
            .with_context(|| {
                format!("kubectl --kubeconfig {kubeconfig} -n kube-system get pods -o wide; docker logs {}", c.emulator)
            })
        })?;
    }
    for deployment in [deployment, "coredns"] {
        tools
            .kubectl(["-n", "kube-system", "rollout", "status", &format!("deployment/{deployment}"), "--timeout=300s"])
            .run()?;
    }
    undo.done = true;

    let started = if undo.started_engine { ", private engine" } else { "" };
    let docker_line = engine.docker_host().map(|h| format!("  export DOCKER_HOST={h}\n")).unwrap_or_default();
    println!(
        "\nkind cluster {} is up, with the fakecloud emulator beside it and {deployment} in it.\n\n  \
         export KUBECONFIG={kubeconfig}\n  source {}    # FAKECLOUD_ENDPOINT, the emulator's tokens and its AWS key pair\n\
         {docker_line}\nA load balancer's DNS name resolves in the pods, and from here: dig @{} -p 53 <name>\n\
         The conformance suite against it: make e2e-kind\nStop (cluster, emulator{started}): make kind-down",
        c.name,
        c.credentials().display(),
        at.emulator
    );
    Ok(())
}

/// One wait of kind-up's end: a kubectl listing, and what in it is still awaited.
struct Wait<'a> {
    what: String,
    short: &'a str,
    kubectl: Vec<&'a str>,
    left: fn(&str) -> Vec<String>,
}

/// Wait until `left` (what is still awaited) is empty, for at most `bound`, saying every 15 s what it waits for.
fn await_none(
    what: &str,
    bound: Duration,
    interrupted: &AtomicBool,
    mut left: impl FnMut() -> anyhow::Result<Vec<String>>,
) -> anyhow::Result<()> {
    let start = std::time::Instant::now();
    let mut said = 0;
    let mut last = vec![];
    let done = wait_for(bound, Duration::from_secs(1), || {
        if interrupted.load(Ordering::Relaxed) {
            return Some(false);
        }
        // A failed kubectl (the apiserver restarting) is one more round, not the end.
        last = left().unwrap_or_else(|e| vec![format!("({e:#})")]);
        let secs = start.elapsed().as_secs() / 15;
        if !last.is_empty() && secs > said {
            said = secs;
            tracing::info!("waiting for {what}: {}", last.join(" "));
        }
        last.is_empty().then_some(true)
    });
    match done {
        Some(true) => Ok(()),
        Some(false) => bail!("interrupted"),
        None => bail!("{what} after {}s, still: {}", bound.as_secs(), last.join(" ")),
    }
}

/// Nodes (`kubectl get nodes --no-headers`) whose STATUS is not Ready.
fn not_ready(out: &str) -> Vec<String> {
    column_where(out, |w| w.get(1) != Some(&"Ready"))
}

/// Nodes (name, providerID, taint keys) without a providerID or still carrying the uninitialized taint.
fn uninitialized(out: &str) -> Vec<String> {
    column_where(out, |w| {
        w.get(1) == Some(&"<none>")
            || w.get(2).is_some_and(|t| t.contains("node.cloudprovider.kubernetes.io/uninitialized"))
    })
}

/// Pods (`kubectl get pods --no-headers`) whose STATUS is not Running.
fn not_running(out: &str) -> Vec<String> {
    column_where(out, |w| w.get(2) != Some(&"Running"))
}

fn column_where(out: &str, pick: impl Fn(&[&str]) -> bool) -> Vec<String> {
    out.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| !w.is_empty() && pick(w))
        .map(|w| w[0].to_string())
        .collect()
}

fn last_line(out: &str) -> &str {
    out.lines().last().unwrap_or_default()
}

/// A file only its owner reads: it holds tokens.
fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(text.as_bytes())?;
    Ok(())
}

/// kind runs rootless nodes only on cgroup v2 (its rootless guide): said before kind fails deep in its start.
fn refuse_rootless_cgroup_v1(docker: &Docker) -> anyhow::Result<()> {
    let security = docker.cmd(["info", "-f", "{{json .SecurityOptions}}"]).output().unwrap_or_default();
    let cgroup = docker.cmd(["info", "-f", "{{.CgroupVersion}}"]).output().unwrap_or_default();
    if security.contains("rootless") && cgroup != "2" {
        bail!(
            "the Docker engine that answers is rootless on cgroup v1, where kind cannot run its nodes: use a rootful engine (or unset DOCKER_HOST and stop it: make kind-up then starts a private one), or boot the host with cgroup v2"
        );
    }
    Ok(())
}

/// The node image (~1.3 GB) once, then per running node ~1.6 GB (its /var: the preloaded images and ours,
/// unpacked; measured on the 3-node config) with room to spare, plus the build caches on a first run.
fn ensure_disk(s: &Settings, docker: &Docker, nodes: usize, node_image: &str) -> anyhow::Result<()> {
    let mut need = nodes as u64 * 3 + 2;
    if !docker.image_exists(node_image) {
        need += 10;
    }
    std::fs::create_dir_all(&s.cache)?;
    let free = || -> anyhow::Result<u64> {
        let out = cmd("df", ["--output=avail", "-BG"]).arg(&s.cache).output()?;
        let digits: String = last_line(&out).chars().filter(char::is_ascii_digit).collect();
        digits.parse().with_context(|| format!("reading df's answer: {out}"))
    };
    let mut avail = free()?;
    if avail < need && docker.host.as_deref() == Some(s.private_docker_host().as_str()) {
        // Everything in the private engine is ours: what earlier runs left untagged, and the build cache, go first.
        tracing::info!(
            "only {avail} GB free of the {need} GB needed: pruning the private engine's untagged images and build cache"
        );
        let _ = docker.cmd(["image", "prune", "-f"]).succeeds();
        let _ = docker.cmd(["builder", "prune", "-af"]).succeeds();
        avail = free()?;
    }
    if avail < need {
        let largest = cmd("sh", ["-c", "du -xsh \"$0\"/*/* 2>/dev/null | sort -rh | head -n 6"])
            .arg(&s.cache)
            .output()
            .unwrap_or_default();
        bail!(
            "about {need} GB of free disk are needed under {} for {nodes} kind nodes (and the image builds), and only {avail} GB are free. What is largest there:\n{largest}",
            s.cache.display()
        );
    }
    Ok(())
}

/// A node image of another Kubernetes version would run kubelets that this checkout's control-plane tools,
/// CCMs and test images were not built for: refused before anything is created. kind's node images say their
/// version in /kind/version (ours too).
fn check_node_image_version(s: &Settings, docker: &Docker, image: &str) -> anyhow::Result<()> {
    let fix =
        format!("use kindest/node:{}, or unset KIND_NODE_IMAGE and make kind-up builds fakecloud's own", s.k8s_version);
    let version = docker.cmd(["run", "--rm", "--entrypoint", "cat", image, "/kind/version"]).output().with_context(|| {
        format!("cannot read /kind/version from node image {image} (not a kind node image, or not in the engine and not pullable)\n  {fix}")
    })?;
    if version.trim() != s.k8s_version {
        bail!(
            "node image {image} is Kubernetes {}, and this checkout's is {} (controlplane/upstream/go.mod): {fix}",
            version.trim(),
            s.k8s_version
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_waits_name_what_is_still_awaited() {
        let nodes = "kind-control-plane   Ready      control-plane   5m   v1.37.2\nkind-worker   NotReady   <none>   5m   v1.37.2\n";
        assert_eq!(not_ready(nodes), ["kind-worker"]);
        let init = "cp   fakecloud://i-1   node-role.kubernetes.io/control-plane\n\
                    w1   <none>   node.cloudprovider.kubernetes.io/uninitialized\n\
                    w2   fakecloud://i-3   node.cloudprovider.kubernetes.io/uninitialized,x\n\
                    w3   fakecloud://i-4   <none>\n";
        assert_eq!(uninitialized(init), ["w1", "w2"]);
        let pods = "coredns-1   1/1   Running   0   1m\ncoredns-2   0/1   ContainerCreating   0   1m\n";
        assert_eq!(not_running(pods), ["coredns-2"]);
        assert!(not_running("").is_empty());
    }

    #[test]
    fn a_wait_ends_with_what_it_still_awaited() {
        let never = AtomicBool::new(false);
        let err = await_none("Ready nodes", Duration::ZERO, &never, || Ok(vec!["w1".into()])).unwrap_err();
        assert_eq!(err.to_string(), "Ready nodes after 0s, still: w1");
        assert!(await_none("x", Duration::ZERO, &never, || Ok(vec![])).is_ok());
        let interrupted = AtomicBool::new(true);
        assert_eq!(
            await_none("x", Duration::from_secs(60), &interrupted, || Ok(vec!["y".into()])).unwrap_err().to_string(),
            "interrupted"
        );
    }
}

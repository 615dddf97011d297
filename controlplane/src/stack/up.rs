//! `stack up` in the foreground: checks, the supervisor started detached, its progress relayed, and the
//! message that says how to use the stack.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::Context as _;
use fakecloud_controlplane::process::RunState;
use fakecloud_controlplane::{Binaries, pinned_kubernetes_version};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::signal::unix::{SignalKind, signal};

use super::cli::{Options, StackCcm};
use super::down::{Logs, down};
use super::layout::{FILES, READY, RunDir, endpoint, node_names, sibling};

pub async fn up(options: Options) -> anyhow::Result<()> {
    let dir = RunDir::new(&options.run_dir.path)?;
    node_names(options.nodes)?;
    refuse_running(&dir)?;
    ensure_memory_for(options.nodes)?;
    if options.nodes >= SLOW_IN_DEBUG && cfg!(debug_assertions) {
        eprintln!(
            "[up] {} Nodes from a debug build: the emulator, the CCM and the kubelets take more CPU than \
             optimized builds, CPU the API server needs for a fleet this size; `make up NODES={} \
             PROFILE=release` builds them optimized",
            options.nodes, options.nodes
        );
    }
    if dir.controlplane().exists() || FILES.iter().any(|f| dir.file(f).exists()) {
        eprintln!("[up] removing what an earlier run left in {} (it no longer runs)", dir.root.display());
        down(&dir, Logs::Remove)
            .context("could not clean up after the earlier run; run `make down` and read what it says")?;
    }
    ensure_port_free(options.port, "another emulator?", "FAKECLOUD_PORT")?;
    ensure_port_free(options.ccm_port, "another CCM?", "FAKECLOUD_CCM_PORT")?;
    ensure_port_free(options.dns_port, "another emulator's DNS?", "FAKECLOUD_DNS_PORT")?;
    // Found now, so that a missing build fails before anything starts.
    let binaries = Binaries::locate(options.bin_dir.as_deref())?;
    fakecloud_controlplane::kwok()?;
    let fakecloud = sibling("fakecloud")?;
    match options.ccm {
        StackCcm::Fakecloud => drop(sibling("fakecloud-ccm")?),
        StackCcm::Aws => {
            drop(super::aws::binaries(options.aws_ccm.as_deref(), options.aws_cli.as_deref())?);
            if let Some(path) = &options.aws_cloud_config {
                super::aws::user_cloud_config(path, None)?;
            }
        }
    }

    std::fs::create_dir_all(&dir.root).with_context(|| format!("creating {}", dir.root.display()))?;
    let log_path = dir.file("stack.log");
    let log = std::fs::File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
    let mut command = tokio::process::Command::new(std::env::current_exe().context("locating this binary")?);
    command.args(["stack", "supervise", "--run-dir"]).arg(&dir.root).args([
        "--port",
        &options.port.to_string(),
        "--ccm-port",
        &options.ccm_port.to_string(),
        "--dns-port",
        &options.dns_port.to_string(),
        "--nodes",
        &options.nodes.to_string(),
    ]);
    if let Some(bin_dir) = &options.bin_dir {
        command.arg("--bin-dir").arg(bin_dir);
    }
    if options.ccm == StackCcm::Aws {
        command.args(["--ccm", "aws"]);
        let paths = [
            ("--aws-ccm", &options.aws_ccm),
            ("--aws-cli", &options.aws_cli),
            ("--aws-cloud-config", &options.aws_cloud_config),
        ];
        for (flag, path) in paths {
            command.arg(flag).args(path.iter());
        }
    }
    let mut supervisor = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .context("starting the stack's supervisor")?;
    let progress = supervisor.stdout.take().context("the supervisor's progress pipe")?;

    // Relay its progress until it is ready or gone. A Ctrl-C here stops it (it then stops what it started).
    let mut sigint = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut sigterm = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut lines = BufReader::new(progress).lines();
    let mut interrupted = false;
    let ready = loop {
        tokio::select! {
            line = lines.next_line() => match line.context("reading the supervisor's progress")? {
                Some(line) if line == READY => break !interrupted,
                Some(line) => eprintln!("{line}"),
                None => break false,
            },
            _ = sigint.recv(), if !interrupted => interrupted = stop(&supervisor),
            _ = sigterm.recv(), if !interrupted => interrupted = stop(&supervisor),
        }
    };
    if !ready {
        let status = supervisor.wait().await.context("waiting for the supervisor")?;
        eprintln!("[up] did not finish ({status}); stopping what was started (logs kept in {})", dir.root.display());
        down(&dir, Logs::Keep)?;
        anyhow::bail!(
            "the stack did not start; read {} and {}",
            log_path.display(),
            dir.controlplane().join("logs").display()
        );
    }
    print_usage(&dir, &options, &binaries, &fakecloud);
    Ok(())
}

/// SIGTERM to the supervisor; true once sent.
fn stop(supervisor: &tokio::process::Child) -> bool {
    eprintln!("[up] interrupted; stopping what was started");
    let pid = supervisor.id().and_then(|pid| i32::try_from(pid).ok()).map(nix::unistd::Pid::from_raw);
    if let Some(pid) = pid {
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    }
    true
}

/// Refuses a run directory whose stack (or control plane) still runs.
fn refuse_running(dir: &RunDir) -> anyhow::Result<()> {
    // By PID: the supervisor owns both records.
    let mut running = BTreeMap::new();
    for state_dir in [dir.root.clone(), dir.controlplane()] {
        if let Some(state) = RunState::read(&state_dir)? {
            running.extend(state.alive().iter().map(|r| (r.pid, format!("{} (pid {})", r.name, r.pid))));
        }
    }
    let running: Vec<String> = running.into_values().collect();
    anyhow::ensure!(
        running.is_empty(),
        "fakecloud is already up from {}: {}.\n  Use it as the last `make up` said (export KUBECONFIG={}), or stop it with `make down` first.",
        dir.root.display(),
        running.join(", "),
        dir.admin_kubeconfig().display()
    );
    Ok(())
}

/// A fleet this large is worth a release build (the book, docs/book/src/getting-started.md, "A larger fleet").
const SLOW_IN_DEBUG: u32 = 500;

/// What a stack takes in memory, measured here (BENCHMARKS.md, "A fleet of 5,000 on kwok"): the peak resident
/// memory of all its processes at 3 Nodes, and what each further Node added at 5,000 (mostly kube-apiserver's and
/// etcd's copies of the Nodes and Leases; kwok's, the CCM's and the kubelets' watches of them).
const STACK_MIB: u64 = 533;
const PER_NODE_KIB: u64 = 381;

/// Refuses a fleet the machine cannot hold, before anything starts: the estimate against `MemAvailable`.
fn ensure_memory_for(nodes: u32) -> anyhow::Result<()> {
    match available_mib() {
        Some(available) => fits(nodes, available),
        None => {
            eprintln!("[up] could not read MemAvailable from /proc/meminfo; not checking that {nodes} Nodes fit");
            Ok(())
        }
    }
}

/// With half as much again as measured: a stack grows after `up` (events, pods, the API server's watch caches).
fn fits(nodes: u32, available_mib: u64) -> anyhow::Result<()> {
    let estimate = STACK_MIB + u64::from(nodes) * PER_NODE_KIB / 1024;
    let needed = estimate * 3 / 2;
    anyhow::ensure!(
        needed <= available_mib,
        "--nodes {nodes}: the stack takes about {estimate} MiB ({STACK_MIB} MiB and {PER_NODE_KIB} KiB per Node, \
         measured in BENCHMARKS.md), {needed} MiB with room to grow, and this machine has {available_mib} MiB \
         available; ask for fewer Nodes or free memory"
    );
    Ok(())
}

/// `MemAvailable` in MiB: what can be used without swapping.
fn available_mib() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}

fn ensure_port_free(port: u16, guess: &str, variable: &str) -> anyhow::Result<()> {
    if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_err() {
        anyhow::bail!(
            "port {port} on 127.0.0.1 is taken ({guess}); stop what uses it (`ss -ltnp 'sport = :{port}'` shows it), or pick another port: {variable}={} make up",
            port.wrapping_add(1)
        );
    }
    Ok(())
}

fn print_usage(dir: &RunDir, options: &Options, binaries: &Binaries, fakecloud: &Path) {
    let kubeconfig = dir.admin_kubeconfig();
    let version = pinned_kubernetes_version();
    let kubectl = binaries.kubectl();
    if let Some(kubectl) = &kubectl {
        // As `kubectl get nodes -o wide` prints them; the message below is what matters if this fails.
        let _ = std::process::Command::new(kubectl)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["get", "nodes", "-o", "wide"])
            .stdout(std::io::stderr())
            .status();
    }
    let kubectl_hint = match &kubectl {
        Some(ours) if on_path("kubectl").as_ref() != Some(ours) => {
            format!("{} get nodes    # kubectl {version}, built with the control plane", ours.display())
        }
        _ => "kubectl get nodes".to_string(),
    };
    let url = endpoint(options.port);
    let credentials = dir.credentials();
    let root = dir.root.display();
    let (ccm, aws) = match options.ccm {
        StackCcm::Fakecloud => ("fakecloud-ccm", String::new()),
        StackCcm::Aws => (
            "cloud-provider-aws",
            format!(
                "
  source {env}    # the AWS CLI's and boto3's endpoint, region and keys for the emulator's AWS face
  aws ec2 describe-instances    # the cloud as cloud-provider-aws sees it (the AWS CLI: make aws-clients)
",
                env = dir.file(super::layout::AWS_ENV).display(),
            ),
        ),
    };
    println!(
        "
fakecloud is up: Kubernetes {version} on loopback, the emulator, {ccm} and {count} simulated nodes.

  export KUBECONFIG={kubeconfig}
  {kubectl_hint}
  kubectl create service loadbalancer web --tcp=80:8080 && kubectl get svc web -w    # EXTERNAL-IP from the CCM
  curl -sk https://127.0.0.1:{ccm_port}/healthz?verbose                              # the CCM's health checks

  export FAKECLOUD_ENDPOINT={url}
  source {credentials}    # the emulator's tokens (FAKECLOUD_USER_TOKEN, FAKECLOUD_ADMIN_TOKEN)
  {fakecloud} instance list

  Console: {url}/console    # sign in with a token from {credentials}
  dig @127.0.0.1 -p {dns_port} <name>    # the cloud's names: a load balancer's DNS name, an instance's private one
{aws}
Logs: {root}/{{stack,emulator,ccm,kubelets,kwok}}.log and {cp_logs}/
Stop everything: make down",
        count = options.nodes,
        kubeconfig = kubeconfig.display(),
        ccm_port = options.ccm_port,
        dns_port = options.dns_port,
        credentials = credentials.display(),
        fakecloud = fakecloud.display(),
        cp_logs = dir.controlplane().join("logs").display(),
    );
}

/// Where `name` resolves on PATH, if it does.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fleet_larger_than_the_memory_is_refused_with_the_estimate() {
        assert!(fits(3, 1024).is_ok());
        assert!(fits(5000, 24 * 1024).is_ok());
        let e = fits(5000, 2048).unwrap_err().to_string();
        assert!(e.contains("--nodes 5000") && e.contains("2393 MiB") && e.contains("2048 MiB available"), "{e}");
    }
}

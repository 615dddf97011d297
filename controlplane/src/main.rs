//! `fakecloud-controlplane up|down`: run the loopback control plane in the foreground and tear it down from
//! another shell; `kubelets`: the simulated kubelets; `stack up|down`: the whole local stack (`make up`).

mod stack;

use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use fakecloud_controlplane::{ControlPlane, down, pinned_kubernetes_version};
use tokio::signal::unix::{SignalKind, signal};

/// The variables (and credentials-file lines) holding the emulator's tokens, in order of preference: the
/// kubelets are the cloud's own machinery, not a customer of it, so they use the admin token when there is
/// one: never faulted, and their polling is not counted among the customer's (the CCM's) calls.
const TOKEN_VARS: [&str; 2] = ["FAKECLOUD_ADMIN_TOKEN", "FAKECLOUD_USER_TOKEN"];

/// Name of the pid file `up` writes into the run directory.
const PID_FILE: &str = "fakecloud-controlplane.pid";

#[derive(Debug, Parser)]
#[command(version, about = "Run an upstream Kubernetes control plane on 127.0.0.1")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start etcd, kube-apiserver and kube-controller-manager and keep them running until
    /// SIGTERM or SIGINT (Ctrl-C).
    Up {
        /// Directory for certificates, kubeconfigs, etcd data, logs and the pid file.
        #[arg(long, env = "FAKECLOUD_RUN_DIR")]
        run_dir: PathBuf,
        /// Directory holding the binaries (default: the build cache).
        #[arg(long, env = "FAKECLOUD_K8S_BIN")]
        bin_dir: Option<PathBuf>,
        /// Fixed apiserver port (default: any free port).
        #[arg(long)]
        apiserver_port: Option<u16>,
        /// Seconds without a kubelet heartbeat before a Node turns Unknown.
        #[arg(long, value_name = "SECONDS")]
        node_monitor_grace_period: Option<u64>,
        /// Wipe a stale run directory left by a control plane that is no longer running.
        #[arg(long)]
        clean: bool,
    },
    /// Run simulated kubelets: a Node for every running instance of the emulator, kept alive by kwok (`make
    /// kwok` builds it; FAKECLOUD_KWOK names another) while the instance runs, silent while it does not.
    Kubelets {
        /// Kubeconfig of the cluster.
        #[arg(long, env = "KUBECONFIG")]
        kubeconfig: PathBuf,
        /// The emulator's URL.
        #[arg(long, env = "FAKECLOUD_ENDPOINT", default_value = "http://127.0.0.1:8787")]
        emulator: String,
        /// A credentials file written by `fakecloud serve` (`export FAKECLOUD_ADMIN_TOKEN=...` lines), read when
        /// neither FAKECLOUD_ADMIN_TOKEN nor FAKECLOUD_USER_TOKEN is set.
        #[arg(long)]
        credentials: Option<PathBuf>,
        /// How often to read the emulator's instances (and which machines are hung: `fakecloud hang`).
        #[arg(long, value_name = "SECONDS", default_value = "1", value_parser = seconds)]
        poll: Duration,
        /// How long a started machine's Node reports Ready=False (network not ready) before Ready, as a kind
        /// node does until its CNI plugin is up (default: 10, as kind's nodes). 0: Ready at registration.
        #[arg(long, value_name = "SECONDS", value_parser = seconds)]
        not_ready_for: Option<Duration>,
        /// Only instances with this tag get a kubelet (`key=value`, or `key`); on a cluster whose other nodes
        /// have real kubelets (kind), tag the simulated machines and name the tag here.
        #[arg(long, value_name = "TAG")]
        instance_tag: Option<String>,
        /// Taints every simulated Node registers with, as the kubelet's flag takes them
        /// (`key[=value]:Effect`, comma-separated), e.g. one that keeps real pods off simulated machines.
        #[arg(long, value_name = "TAINTS", value_delimiter = ',', value_parser = fakecloud_controlplane::kubelets::parse_taint)]
        register_with_taints: Vec<k8s_openapi::api::core::v1::Taint>,
        /// The kwok binary, its pod stages beside it (default: where `make kwok` builds it).
        #[arg(long, value_name = "FILE", env = "FAKECLOUD_KWOK")]
        kwok: Option<PathBuf>,
        /// Where kwok's log goes (default: a file in a temporary directory, removed on exit).
        #[arg(long, value_name = "FILE")]
        kwok_log: Option<PathBuf>,
        /// What each Node is named: `instance` (the instance's name) or `private-dns` (its private DNS name, as a
        /// kubelet on EC2 names its Node; cloud-provider-aws finds the instance by it).
        #[arg(long, value_enum, default_value_t)]
        node_names: fakecloud_controlplane::kubelets::NodeNames,
    },
    /// The local stack in the background: control plane, emulator, CCM, simulated kubelets and three Nodes
    /// (`make up`, `make down`).
    Stack {
        #[command(subcommand)]
        command: stack::Command,
    },
    /// Stop the control plane recorded in a run directory and remove the directory.
    Down {
        #[arg(long, env = "FAKECLOUD_RUN_DIR")]
        run_dir: PathBuf,
        /// Keep the directory (logs, certificates) after stopping.
        #[arg(long)]
        keep: bool,
    },
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // make up sends the logs to files: no colour codes there.
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            // kube's client logs every failed readiness poll at ERROR; those are expected.
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube_client::client::builder=off".into()),
        )
        .init();
    // Print the error chain ourselves: a user needs the message, not a backtrace.
    match run(Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Up { run_dir, bin_dir, apiserver_port, node_monitor_grace_period, clean } => {
            up(&run_dir, bin_dir, apiserver_port, node_monitor_grace_period, clean).await
        }
        Command::Kubelets {
            kubeconfig,
            emulator,
            credentials,
            poll,
            not_ready_for,
            instance_tag,
            register_with_taints,
            kwok,
            kwok_log,
            node_names,
        } => {
            let defaults = fakecloud_controlplane::kubelets::Options::default();
            let opts = fakecloud_controlplane::kubelets::Options {
                poll,
                not_ready_for: not_ready_for.unwrap_or(defaults.not_ready_for),
                instance_tag,
                register_with_taints,
                kwok,
                kwok_log,
                node_names,
                ..defaults
            };
            kubelets(&kubeconfig, &emulator, credentials, opts).await
        }
        Command::Stack { command } => stack::run(command).await,
        Command::Down { run_dir, keep } => {
            let stopped = down(&run_dir, keep)?;
            if stopped.is_empty() {
                eprintln!("nothing was running in {}", run_dir.display());
            } else {
                eprintln!("stopped {}", stopped.join(", "));
            }
            if !keep {
                eprintln!("removed {}", run_dir.display());
            }
            Ok(())
        }
    }
}

async fn up(
    run_dir: &Path,
    bin_dir: Option<PathBuf>,
    apiserver_port: Option<u16>,
    grace: Option<u64>,
    clean: bool,
) -> anyhow::Result<()> {
    // Install the handlers before starting, so a signal during start still stops cleanly.
    let mut sigterm = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;

    let mut builder = ControlPlane::builder().run_dir(run_dir).clean_stale(clean);
    if let Some(dir) = bin_dir {
        builder = builder.bin_dir(dir);
    }
    if let Some(port) = apiserver_port {
        builder = builder.apiserver_port(port);
    }
    if let Some(seconds) = grace {
        builder = builder.node_monitor_grace_period(Duration::from_secs(seconds));
    }
    let mut cp = tokio::select! {
        result = builder.start() => result?,
        _ = sigterm.recv() => anyhow::bail!("interrupted by SIGTERM during start"),
        _ = sigint.recv() => anyhow::bail!("interrupted by SIGINT during start"),
    };

    let pid_file = cp.run_dir().join(PID_FILE);
    std::fs::write(&pid_file, format!("{}\n", std::process::id()))
        .with_context(|| format!("writing {}", pid_file.display()))?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "export KUBECONFIG={}", cp.admin_kubeconfig().display())?;
    stdout.flush()?;
    eprintln!(
        "Kubernetes {} is up at {} (logs in {}).\nStop it with Ctrl-C, `kill $(cat {})` or `fakecloud-controlplane down --run-dir {}`.",
        pinned_kubernetes_version(),
        cp.apiserver_url(),
        cp.log_dir().display(),
        pid_file.display(),
        cp.run_dir().display(),
    );

    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let outcome = loop {
        tokio::select! {
            _ = sigterm.recv() => break Ok("SIGTERM"),
            _ = sigint.recv() => break Ok("SIGINT"),
            _ = tick.tick() => {
                if let Err(e) = cp.check_running() {
                    break Err(e);
                }
            }
        }
    };
    let _ = std::fs::remove_file(&pid_file);
    match outcome {
        Ok(signal) => {
            tracing::info!("{signal} received; stopping the control plane");
            cp.stop();
            Ok(())
        }
        Err(e) => {
            cp.stop();
            Err(anyhow::Error::new(e).context("the control plane stopped working"))
        }
    }
}

async fn kubelets(
    kubeconfig: &Path,
    emulator: &str,
    credentials: Option<PathBuf>,
    opts: fakecloud_controlplane::kubelets::Options,
) -> anyhow::Result<()> {
    let token = emulator_token(credentials.as_deref())?;
    let poll = opts.poll.as_secs_f64();
    if !(poll.is_finite() && (0.05..=60.0).contains(&poll)) {
        anyhow::bail!("--poll must be between 0.05 and 60 seconds");
    }
    let cloud = fakecloud_api::Client::new(emulator, token)?;
    let sim = fakecloud_controlplane::kubelets::SimulatedKubelets::start(kubeconfig, cloud, opts)
        .await
        .with_context(|| format!("starting simulated kubelets against {emulator}"))?;
    eprintln!("simulated kubelets running against {emulator}; Ctrl-C to stop");
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    // Without kwok no Lease is renewed and every Node turns NotReady: better to stop and say why (`make up`
    // then fails with this process's log) than to run on half a kubelet.
    let mut check = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = sigterm.recv() => return Ok(()),
            _ = sigint.recv() => return Ok(()),
            _ = check.tick() => if let Some(how) = sim.kwok_exited() {
                anyhow::bail!("kwok exited ({how}); the simulated Nodes' Leases are no longer renewed, so stopping");
            },
        }
    }
}

/// A flag's seconds (fractions allowed) as a duration.
fn seconds(s: &str) -> Result<Duration, String> {
    let n: f64 = s.parse().map_err(|_| format!("{s:?} is not a number of seconds"))?;
    Duration::try_from_secs_f64(n).map_err(|_| format!("{s}: seconds must be zero or more (and finite)"))
}

/// The emulator token: from the environment, else from the credentials file `fakecloud serve` wrote.
fn emulator_token(credentials: Option<&Path>) -> anyhow::Result<String> {
    for var in TOKEN_VARS {
        if let Some(t) = std::env::var(var).ok().filter(|t| !t.trim().is_empty()) {
            return Ok(t.trim().to_string());
        }
    }
    let file = credentials.context(
        "no emulator token: set FAKECLOUD_ADMIN_TOKEN (or FAKECLOUD_USER_TOKEN), or pass --credentials FILE (the file `fakecloud serve` wrote)",
    )?;
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    token_from_credentials(&text)
        .with_context(|| format!("{} has no FAKECLOUD_ADMIN_TOKEN= or FAKECLOUD_USER_TOKEN= line", file.display()))
}

/// The first of [`TOKEN_VARS`] in a credentials file.
fn token_from_credentials(text: &str) -> Option<String> {
    TOKEN_VARS.iter().find_map(|v| fakecloud_api::credential(text, v))
}

#[cfg(test)]
mod tests {
    use super::token_from_credentials;

    #[test]
    fn reads_the_token_from_a_credentials_file() {
        let file = "# fakecloud credentials\nexport FAKECLOUD_USER_TOKEN=u-123\nexport FAKECLOUD_ADMIN_TOKEN=a-456\n";
        assert_eq!(token_from_credentials(file).as_deref(), Some("a-456"), "the admin token first");
        assert_eq!(token_from_credentials("FAKECLOUD_USER_TOKEN='u-123'\n").as_deref(), Some("u-123"));
        assert_eq!(token_from_credentials("export FAKECLOUD_ADMIN_TOKEN_OLD=x\n"), None);
        assert_eq!(token_from_credentials("export FAKECLOUD_ADMIN_TOKEN=\n"), None);
    }
}

//! `fakecloud-kind`: the kind path's steps, typed and tested where bash once held them (issue #48). `make
//! kind-up` and `make kind-down` run it; the scripts that remain (the suites on kind) read its settings through
//! `fakecloud-kind env`.

mod cluster;
mod docker;
mod engine;
mod go;
mod host;
mod images;
mod inputs;
mod node_binaries;
mod node_image;
mod pipe;
mod postgres;
mod rootfs;
mod run;
mod settings;

use std::process::ExitCode;

use std::time::Instant;

use clap::{Parser, Subcommand};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use crate::docker::Docker;
use crate::settings::{Settings, shell_quote};

#[derive(Debug, Parser)]
#[command(
    version,
    about = "The kind path: a container engine, offline images, a kind cluster with the emulator beside it",
    long_about = "The kind path: a container engine (the user's Docker, or a private one with an egress guard), \
    the offline kind node image and the project's images, and kind clusters with the fakecloud emulator beside \
    them and a CCM in them. Settings come from the environment: KIND_CLUSTER_NAME, FAKECLOUD_KIND_CCM \
    (fakecloud|upstream|aws), FAKECLOUD_PORT, FAKECLOUD_CACHE, FAKECLOUD_RUN_DIR, FAKECLOUD_IMAGE_PROFILE \
    (release|dev), KIND_CONFIG, KIND_NODE_IMAGE, DOCKER_HOST."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the settings as shell assignments (for `eval`), and `export DOCKER_HOST=…` when the private engine
    /// is the one to use.
    Env,
    /// The container engine: the user's Docker when one answers, else a private one (built once from the Go
    /// module proxy) whose containers reach nothing outside this machine.
    Engine {
        #[command(subcommand)]
        action: EngineAction,
    },
    /// Make a kind cluster (KIND_CLUSTER_NAME, default fakecloud) with the emulator beside it and the CCM in it:
    /// engine, offline images, cluster, emulator, VPC router, CCM; then wait until every node is initialized and
    /// Ready. On a failure it removes what it created.
    Up {
        /// Only the engine and the images, no cluster (so that two kind-ups can then run side by side).
        #[arg(long)]
        prepare: bool,
    },
    /// Delete the cluster, its emulator container and network; without KIND_CLUSTER_NAME every cluster made from
    /// this checkout. The private engine stops with the last container in it.
    Down,
    /// Make sure the engine has debian:bookworm-slim, the base of the project's Dockerfiles: pulled where a
    /// registry answers (not on the private engine, not with FAKECLOUD_OFFLINE=1; at most
    /// FAKECLOUD_PULL_TIMEOUT seconds), else made with debootstrap from this machine's apt mirror
    /// (FAKECLOUD_DEBIAN_MIRROR overrides it). Needs root for debootstrap.
    BaseImage,
    /// Build what a kind node needs beyond the control plane (kubelet, kubeadm, kube-proxy, kube-scheduler,
    /// agnhost, crictl, coredns, kind, CNI plugins) from the Go module proxy; print their directory on the last
    /// line. KIND_VERSION and CRICTL_VERSION pin other releases.
    NodeBinaries,
    /// Build the offline kind node image fakecloud/kind-node:<k8s version>, unless it is current. Needs root.
    NodeImage,
    /// Build the project's images (emulator, ccm, vpc-router, agnhost; upstream-ccm with
    /// FAKECLOUD_KIND_CCM=upstream, aws-ccm with FAKECLOUD_KIND_CCM=aws), tagged FAKECLOUD_IMAGE_TAG (dev). FAKECLOUD_IMAGE_PREBUILT=1 uses the
    /// workspace's binaries as built.
    Images,
    /// Make sure the engine has fakecloud/postgres:dev, the farm's database on kind (make farm-kind). Needs root.
    PostgresImage,
}

#[derive(Debug, Subcommand)]
enum EngineAction {
    /// Use the engine that answers, or build and start the private one with its egress guard (needs root).
    Start,
    /// Stop the private engine and put back the rules, sysctls and bridges it changed.
    Stop,
    /// Say which engine is used and, for the private one, show its egress guard.
    Status,
    /// Exit 0 only if the private engine runs with its egress guard in place.
    Guard,
}

/// Progress lines as the kind path's scripts print theirs: `[kind-up   42s] message`, on standard error.
struct Line {
    name: &'static str,
    start: Instant,
}

impl<S, N> FormatEvent<S, N> for Line
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut w: Writer<'_>, event: &Event<'_>) -> std::fmt::Result {
        write!(w, "[{} {:>4}s] ", self.name, self.start.elapsed().as_secs())?;
        ctx.field_format().format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .event_format(Line { name: name(&cli.command), start: Instant::now() })
        .init();
    let command_name = name(&cli.command);
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("[{}] error: {e:#}", command_name);
            ExitCode::FAILURE
        }
    }
}

/// How the logs name the command.
fn name(command: &Command) -> &'static str {
    match command {
        Command::Env => "env",
        Command::Engine { .. } => "engine",
        Command::Up { .. } => "kind-up",
        Command::Down => "kind-down",
        Command::BaseImage => "base-image",
        Command::NodeBinaries => "node-binaries",
        Command::NodeImage => "node-image",
        Command::Images => "images",
        Command::PostgresImage => "postgres-image",
    }
}

fn run(command: Command) -> anyhow::Result<()> {
    let s = Settings::from_env()?;
    match command {
        Command::Env => {
            for (name, value) in s.shell_assignments() {
                println!("{name}={}", shell_quote(&value));
            }
            if let Some(host) = engine::Engine::of(&s).docker_host() {
                println!("export DOCKER_HOST={}", shell_quote(&host));
            }
        }
        Command::Engine { action } => {
            let e = engine::Engine::of(&s);
            match action {
                EngineAction::Start => e.start()?,
                EngineAction::Stop => e.stop()?,
                EngineAction::Status => println!("{}", e.status()),
                EngineAction::Guard => {
                    if !e.guarded() {
                        anyhow::bail!("the private engine does not run with its egress guard in place");
                    }
                }
            }
        }
        Command::Up { prepare } => cluster::up(&s, prepare)?,
        Command::Down => cluster::down(&s, std::env::var_os("KIND_CLUSTER_NAME").is_none())?,
        Command::BaseImage => rootfs::base_image(&s, &image_engine(&s)?)?,
        Command::NodeBinaries => println!("{}", node_binaries::build(&s)?.display()),
        Command::NodeImage => node_image::ensure(&s, &image_engine(&s)?)?,
        Command::Images => images::build(&s, &image_engine(&s)?)?,
        Command::PostgresImage => postgres::image(&s, &image_engine(&s)?)?,
    }
    Ok(())
}

/// The engine an image command builds into (DOCKER_HOST, else the private engine when it runs), or an error
/// saying how to get one.
fn image_engine(s: &Settings) -> anyhow::Result<Docker> {
    let d = Docker::require(s)?;
    let version = d.cmd(["version", "-f", "{{.Server.Version}}"]).output().unwrap_or_default();
    tracing::info!("using the Docker engine at {} ({version})", d.shown());
    Ok(d)
}

//! `fakecloud-kind`: the kind path's steps, typed and tested where bash once held them (issue #48). `make
//! kind-up` and `make kind-down` run it; the scripts that remain (the suites on kind) read its settings through
//! `fakecloud-kind env`.

mod cluster;
mod docker;
mod engine;
mod images;
mod node_binaries;
mod node_image;
mod run;
mod settings;

use std::process::ExitCode;

use std::time::Instant;

use clap::{Parser, Subcommand};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use crate::settings::{Settings, shell_quote};

#[derive(Debug, Parser)]
#[command(
    version,
    about = "The kind path: a container engine, offline images, a kind cluster with the emulator beside it",
    long_about = "The kind path: a container engine (the user's Docker, or a private one with an egress guard), \
    the offline kind node image and the project's images, and kind clusters with the fakecloud emulator beside \
    them and a CCM in them. Settings come from the environment: KIND_CLUSTER_NAME, FAKECLOUD_KIND_CCM \
    (fakecloud|upstream), FAKECLOUD_PORT, FAKECLOUD_CACHE, FAKECLOUD_RUN_DIR, FAKECLOUD_IMAGE_PROFILE \
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
    }
    Ok(())
}

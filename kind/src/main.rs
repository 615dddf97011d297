//! `fakecloud-kind`: the kind path's steps, typed and tested where bash once held them (issue #48). `make
//! kind-up` and `make kind-down` run it; the scripts that remain (the suites on kind) read its settings through
//! `fakecloud-kind env`.

mod docker;
mod run;
mod settings;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tracing_subscriber::fmt::time::Uptime;

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
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_timer(Uptime::default())
        .with_target(false)
        .with_level(false)
        .init();
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> anyhow::Result<()> {
    let s = Settings::from_env()?;
    match command {
        Command::Env => {
            for (name, value) in s.shell_assignments() {
                println!("{name}={}", shell_quote(&value));
            }
        }
    }
    Ok(())
}

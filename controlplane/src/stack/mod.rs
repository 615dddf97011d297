//! `fakecloud-controlplane stack up|down` (what `make up` and `make down` run): the whole local stack — the
//! control plane of this crate, the emulator, fakecloud-ccm and the simulated kubelets — in a run directory,
//! kept running in the background after `up` returns. Part of the binary, not of the library.
//!
//! - [`up`]: the foreground command. It refuses a running stack and taken ports, cleans a stale run directory,
//!   starts the [`supervisor`] detached and relays its progress until the Nodes are ready, then says how to use
//!   the stack.
//! - [`supervisor`]: the detached process that owns every component (so they die with it: see
//!   [`crate::process`] in the library) and stops them in order on SIGTERM.
//! - [`down`]: stops what a run directory records, removes the files the stack made and reports any process of
//!   that run directory still alive.

mod aws;
mod cli;
mod down;
mod layout;
mod supervisor;
mod up;

pub use cli::Command;
use layout::RunDir;

pub async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Up(options) => up::up(options).await,
        Command::Down { run_dir } => down::down(&RunDir::new(&run_dir.path)?, down::Logs::Remove),
        Command::Supervise(options) => supervisor::supervise(options).await,
    }
}

//! The `fakecloud` binary's integration tests, in one binary: the CLI as a process (this crate's own build)
//! against a real emulator, served from the test process over real HTTP on a SQLite file.
#![allow(clippy::unwrap_used)]

mod commands;
mod help;
mod scenarios;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use fakecloud_emulator::auth::Tokens;
use fakecloud_emulator::config::{Config, DbLocation, Timings};
use fakecloud_emulator::server::Server;

pub const USER: &str = "user-token-0123456789abcdef";
pub const ADMIN: &str = "admin-token-0123456789abcdef";

/// How long a test waits for something that must happen before it calls it a hang: a hang detector on a busy
/// CI machine, never a speed claim.
pub const HANG: Duration = Duration::from_secs(60);

/// An emulator on `dir/fc.db` as `fakecloud serve --boot-delay 0s` runs it, and its URL.
pub async fn emulator(dir: &Path) -> (Server, String) {
    let timings = Timings { boot_delay: Duration::ZERO, ..Timings::default() };
    let tokens = Tokens { user: USER.into(), admin: ADMIN.into() };
    let db = DbLocation::File(dir.join("fc.db"));
    let server = Server::start("127.0.0.1:0", &db, Config { timings, ..Config::default() }, tokens).await.unwrap();
    let url = server.url();
    (server, url)
}

/// The `fakecloud` binary, pointed at `url` with both tokens.
pub fn cli(url: &str) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_fakecloud"));
    c.env("FAKECLOUD_ENDPOINT", url).env("FAKECLOUD_USER_TOKEN", USER).env("FAKECLOUD_ADMIN_TOKEN", ADMIN);
    c
}

/// What a command that must succeed printed (stdout, then stderr).
pub fn ok(out: &Output, what: &str) -> String {
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what} failed: {text}");
    text
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Poll `f` until it returns `Some`, failing after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

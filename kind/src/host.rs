//! The machine the images are built on: whether we are root, which tools it has, and the apt-get installs
//! that give it the missing ones (debootstrap, gcc). Only root installs anything.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

use crate::run::cmd;

/// A setting from the environment; unset and empty are the same.
pub fn env_setting(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// `what needs root` as an error when we are not root.
pub fn require_root(what: &str) -> anyhow::Result<()> {
    if !is_root() {
        bail!("{what} needs root: run this as root");
    }
    Ok(())
}

/// Whether `path` is a file (or directory) someone may execute, as the shell's `test -x` sees it.
pub fn is_executable(path: &Path) -> bool {
    path.metadata().is_ok_and(|m| m.permissions().mode() & 0o111 != 0)
}

/// Where `program` is on PATH, as `command -v` finds it.
pub fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|p| p.is_file() && is_executable(p))
}

/// Installs Debian `packages` with apt-get, for `why` (a message names it when we may not or cannot).
pub fn apt_install(packages: &[&str], why: &str) -> anyhow::Result<()> {
    let list = packages.join(" ");
    if !is_root() {
        bail!("{why} needs {list}: install them (apt-get install {list}) or run this as root");
    }
    if on_path("apt-get").is_none() {
        bail!("{why} needs {list}, and there is no apt-get to install them with: install {list}");
    }
    tracing::info!("installing {list} with apt-get ({why})");
    cmd("apt-get", ["update", "-qq"]).run_shown().context("apt-get update failed; check this machine's apt sources")?;
    cmd("apt-get", ["install", "-y", "-qq", "--no-install-recommends"])
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .run_shown()
        .with_context(|| format!("apt-get install {list} failed; install them and run this again"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_found_on_path_as_command_v_finds_them() {
        assert!(on_path("sh").is_some_and(|p| p.ends_with("sh")));
        assert_eq!(on_path("no-such-program-anywhere"), None);
        assert!(is_executable(Path::new("/bin/sh")));
        assert!(!is_executable(Path::new("/etc/hostname-of-nothing")));
    }
}

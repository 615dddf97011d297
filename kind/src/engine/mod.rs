//! A container engine for the kind path.
//!
//! - `start`: use the Docker engine that answers (DOCKER_HOST or the default socket) unchanged; where none does,
//!   build (once, cached by version) and start a private one, guarded.
//! - `stop`: stop the private engine by its PID and put back what it changed (never touches a user's engine).
//! - `status`, `guard`: which engine is used; whether the private one runs with its egress guard.
//!
//! Why Docker 29 (moby v2 from the Go module proxy) with runc 1.5 and Debian's containerd, and not Debian's
//! docker.io 20.10: this machine's capability bounding set lacks CAP_SYS_RESOURCE, so runc 1.1 cannot start a
//! privileged container (kind's nodes are privileged) without a wrapper that edits every OCI spec; Docker 29
//! grants only the capabilities it has itself, and its API is the one testcontainers (bollard) asks for.
//!
//! The private engine has its own socket, exec-root and pid file under the run directory and its own data-root
//! (images are kept between runs), so it never meets a user's engine. Its egress guard ([`guard`]) is in place
//! before dockerd starts, and its daemon `dns` is a loopback address where nothing listens, so a lookup of an
//! outside name fails here instead of leaving. A port published without an address binds every interface, as
//! on a user's Docker: testcontainers run from inside a container (a /.dockerenv, as on CI here) reaches it
//! through the bridge's gateway, not loopback. The host's rules, sysctls and bridges are saved before it starts
//! and put back after it stops ([`host`]).

mod guard;
mod host;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::docker::Docker;
use crate::host::{apt_install, on_path};
use crate::run::{cmd, step, wait_for};
use crate::settings::Settings;

/// Docker Engine 29 (the 29.x line is tagged v2.0.0-beta.N in the Go module).
const MOBY_VERSION: &str = "v2.0.0-beta.24";
const RUNC_VERSION: &str = "v1.5.2";
/// Nothing listens here: a lookup of an outside name fails on this machine instead of leaving it.
const NO_DNS: &str = "127.0.0.254";

/// The private engine's files.
pub struct Engine<'a> {
    s: &'a Settings,
    bin_dir: PathBuf,
    pid_file: PathBuf,
    daemon_json: PathBuf,
    /// The host's state before the engine started, put back by stop.
    saved: PathBuf,
    log: PathBuf,
}

impl<'a> Engine<'a> {
    pub fn of(s: &'a Settings) -> Self {
        let run = &s.engine_run_dir;
        Engine {
            s,
            bin_dir: s.engine_root.join(format!("moby-{MOBY_VERSION}-runc-{RUNC_VERSION}/bin")),
            pid_file: run.join("dockerd.pid"),
            daemon_json: run.join("daemon.json"),
            saved: run.join("saved"),
            log: run.join("dockerd.log"),
        }
    }

    /// The engine a user already has: DOCKER_HOST, or the default socket. Ours is not theirs.
    /// FAKECLOUD_PRIVATE_ENGINE=1 uses the private engine even where a user's answers (its tests do).
    pub fn users_engine(&self) -> bool {
        let host = std::env::var("DOCKER_HOST").unwrap_or_default();
        if host == self.s.private_docker_host() || std::env::var("FAKECLOUD_PRIVATE_ENGINE").as_deref() == Ok("1") {
            return false;
        }
        Docker::from_env().answers()
    }

    /// The pid of our dockerd, if it runs (a reused pid is not ours: its command line must name our config).
    pub fn pid(&self) -> Option<i32> {
        let pid: i32 = std::fs::read_to_string(&self.pid_file).ok()?.trim().parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        names_config(&cmdline, &self.daemon_json).then_some(pid)
    }

    /// The DOCKER_HOST a client of the kind path should use: the private engine's when it is the one in use.
    pub fn docker_host(&self) -> Option<String> {
        (!self.users_engine() && self.pid().is_some()).then(|| self.s.private_docker_host())
    }

    /// A client of the engine the kind path uses: the private one when it is that, else DOCKER_HOST's.
    pub fn docker(&self) -> Docker {
        self.docker_host().map_or_else(Docker::from_env, Docker::at)
    }

    /// Whether the private engine runs with its egress guard in place.
    pub fn guarded(&self) -> bool {
        self.pid().is_some() && guard::in_place()
    }

    pub fn start(&self) -> anyhow::Result<()> {
        if self.users_engine() {
            let context = cmd("docker", ["context", "show"]).output().unwrap_or_else(|_| "default".into());
            tracing::info!("using the Docker engine that answers ({context}); nothing to start");
            return Ok(());
        }
        if let Some(pid) = self.pid() {
            if !guard::in_place() {
                bail!(
                    "the private engine (pid {pid}) runs without its egress guard; stop it: fakecloud-kind engine stop"
                );
            }
            tracing::info!("the private engine already runs (pid {pid}, {})", self.s.engine_socket.display());
            return Ok(());
        }
        if !crate::host::is_root() {
            bail!(
                "starting a private Docker engine needs root (it manages iptables and bridges); run as root, or start your own Docker"
            );
        }
        ensure_packages()?;
        self.build()?;
        // An engine that died without `stop`: put the host back first, then start clean.
        host::restore(&self.saved)?;
        let data_root = self.s.engine_root.join("data");
        std::fs::create_dir_all(&self.s.engine_run_dir)?;
        std::fs::create_dir_all(&data_root)?;
        let _ = std::fs::remove_file(&self.s.engine_socket);
        let _ = std::fs::remove_file(&self.pid_file);
        std::fs::write(&self.daemon_json, self.daemon_config(&data_root).to_string())
            .with_context(|| format!("writing {}", self.daemon_json.display()))?;
        host::save(&self.saved)?;
        guard::install()?;
        tracing::info!(
            "starting the private engine (dockerd from {}, log {})",
            self.bin_dir.display(),
            self.log.display()
        );
        let log = std::fs::File::create(&self.log).with_context(|| format!("creating {}", self.log.display()))?;
        // Our runc and docker-proxy first on its PATH; Debian's containerd is the one it manages. setsid: it
        // outlives this command, in a session of its own.
        let path = format!("{}:{}", self.bin_dir.display(), std::env::var("PATH").unwrap_or_default());
        let mut child = std::process::Command::new("setsid")
            .arg(self.bin_dir.join("dockerd"))
            .arg("--config-file")
            .arg(&self.daemon_json)
            .env("PATH", path)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting dockerd")?;
        let private = Docker::at(self.s.private_docker_host());
        let up = wait_for(Duration::from_secs(60), Duration::from_millis(500), || {
            if matches!(child.try_wait(), Ok(Some(_))) {
                return Some(false);
            }
            cmd("timeout", ["5", "docker", "version"])
                .envs(private.host.as_deref().map(|h| ("DOCKER_HOST", h)))
                .succeeds()
                .then_some(true)
        });
        match up {
            Some(true) => {}
            Some(false) => {
                host::restore(&self.saved)?;
                bail!("dockerd exited at start; its last lines:\n{}", last_lines(&self.log, 15));
            }
            None => {
                let _ = child.kill();
                host::restore(&self.saved)?;
                bail!(
                    "dockerd did not answer on {} within 60 s (log: {})",
                    self.s.engine_socket.display(),
                    self.log.display()
                );
            }
        }
        if !guard::in_place() {
            self.stop()?;
            bail!(
                "the egress guard is not in place after dockerd started (iptables -S DOCKER-USER); stopped the engine"
            );
        }
        tracing::info!(
            "private engine up: DOCKER_HOST={} (egress guard on {})",
            self.s.private_docker_host(),
            guard::external_interfaces().join(" ")
        );
        Ok(())
    }

    fn daemon_config(&self, data_root: &Path) -> serde_json::Value {
        let run = &self.s.engine_run_dir;
        serde_json::json!({
            "hosts": [self.s.private_docker_host()],
            "data-root": data_root,
            "exec-root": run.join("exec"),
            "pidfile": self.pid_file,
            "storage-driver": "overlay2",
            "exec-opts": ["native.cgroupdriver=cgroupfs"],
            "dns": [NO_DNS],
            "default-runtime": "runc",
            "userland-proxy-path": self.bin_dir.join("docker-proxy"),
            "features": {"containerd-snapshotter": false},
        })
    }

    fn build(&self) -> anyhow::Result<()> {
        if ["dockerd", "docker-proxy", "runc"].iter().all(|b| self.bin_dir.join(b).is_file()) {
            return Ok(());
        }
        if on_path("go").is_none() {
            bail!(
                "no Docker engine answers here and there is no Go toolchain to build one with; install Go (or start Docker) and run this again"
            );
        }
        std::fs::create_dir_all(&self.s.engine_root)?;
        let tmp = tempfile::Builder::new().prefix(".build.").tempdir_in(&self.s.engine_root)?;
        let gobin = tmp.path().display().to_string();
        let version_flag = format!("-s -w -X github.com/moby/moby/v2/dockerversion.Version={MOBY_VERSION}");
        step(&format!("building dockerd and docker-proxy {MOBY_VERSION} (Docker 29; ~2-4 min on 2 cores)"), || {
            cmd("go", ["install", "-trimpath", "-ldflags", &version_flag])
                .args(["-tags", "exclude_graphdriver_btrfs exclude_disk_quota"])
                .arg(format!("github.com/moby/moby/v2/cmd/dockerd@{MOBY_VERSION}"))
                .arg(format!("github.com/moby/moby/v2/cmd/docker-proxy@{MOBY_VERSION}"))
                .env("CGO_ENABLED", "0")
                .env("GOBIN", &gobin)
                .run_shown()
        })?;
        step(&format!("building runc {RUNC_VERSION} with seccomp"), || {
            cmd("go", ["install", "-trimpath", "-tags", "seccomp"])
                .arg(format!("github.com/opencontainers/runc@{RUNC_VERSION}"))
                .env("CGO_ENABLED", "1")
                .env("GOBIN", &gobin)
                .run_shown()
        })?;
        std::fs::create_dir_all(&self.bin_dir)?;
        for b in ["dockerd", "docker-proxy", "runc"] {
            std::fs::rename(tmp.path().join(b), self.bin_dir.join(b))?;
        }
        tracing::info!("engine binaries in {}", self.bin_dir.display());
        Ok(())
    }

    pub fn stop(&self) -> anyhow::Result<()> {
        let run = &self.s.engine_run_dir;
        if self.pid().is_none() && !self.saved.is_dir() && !self.s.engine_socket.exists() {
            tracing::info!("no private engine runs");
            return Ok(());
        }
        if let Some(pid) = self.pid() {
            tracing::info!("stopping the private engine (pid {pid})");
            let pid = Pid::from_raw(pid);
            let _ = kill(pid, Signal::SIGTERM);
            // A dockerd this very process started (kind-up, undoing its run) stays a zombie until reaped: gone.
            let gone = || (!alive(pid)).then_some(());
            if wait_for(Duration::from_secs(30), Duration::from_millis(500), gone).is_none() {
                tracing::info!("dockerd did not stop within 30 s: killing it");
                let _ = kill(pid, Signal::SIGKILL);
                let _ = wait_for(Duration::from_secs(10), Duration::from_millis(200), gone);
            }
        }
        // The containerd it managed and the shims of its containers must go with it.
        let exec_root = run.join("exec").display().to_string();
        let leftover: Vec<Pid> = cmd("pgrep", ["-f", "--", &exec_root])
            .output()
            .unwrap_or_default()
            .lines()
            .filter_map(|p| p.trim().parse().ok().map(Pid::from_raw))
            .collect();
        if !leftover.is_empty() {
            for p in &leftover {
                let _ = kill(*p, Signal::SIGTERM);
            }
            std::thread::sleep(Duration::from_secs(2));
            for p in &leftover {
                let _ = kill(*p, Signal::SIGKILL);
            }
        }
        // Mounts of its containers (overlay layers, shm, netns files) under the data-root and exec-root.
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
        for m in mounts_below(&mounts, &[&self.s.engine_root.join("data"), run]) {
            let _ = cmd("umount", ["-l", &m]).succeeds();
        }
        host::restore(&self.saved)?;
        let _ = std::fs::remove_file(&self.s.engine_socket);
        let _ = std::fs::remove_file(&self.pid_file);
        tracing::info!("private engine stopped; iptables, sysctls and bridges are as they were before it started");
        Ok(())
    }

    pub fn status(&self) -> String {
        if self.users_engine() {
            let v = cmd("docker", ["version", "-f", "{{.Server.Version}}"]).output().unwrap_or_default();
            format!("engine: the user's own ({v})")
        } else if let Some(pid) = self.pid() {
            let guard = if guard::in_place() { "in place" } else { "MISSING" };
            format!(
                "engine: private, pid {pid}, DOCKER_HOST={}\negress guard: {guard}\n{}",
                self.s.private_docker_host(),
                guard::listing()
            )
        } else {
            "engine: none runs".into()
        }
    }
}

/// Whether process `pid` runs: it exists and is not a zombie.
fn alive(pid: Pid) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| !is_zombie(&stat))
}

/// `/proc/PID/stat`'s state field (after the command name in parentheses, which may hold spaces) is Z.
fn is_zombie(stat: &str) -> bool {
    stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
}

/// Whether a /proc cmdline (NUL-separated) names `config`: our dockerd, not a process that reused its pid.
fn names_config(cmdline: &[u8], config: &Path) -> bool {
    let config = config.as_os_str().as_encoded_bytes();
    cmdline.split(|b| *b == 0).any(|arg| arg == config)
}

/// Mount points below any of `dirs`, deepest first (`/proc/mounts`' second field).
fn mounts_below(mounts: &str, dirs: &[&Path]) -> Vec<String> {
    let mut out: Vec<String> = mounts
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter(|m| dirs.iter().any(|d| Path::new(m).starts_with(d)))
        .map(str::to_string)
        .collect();
    out.sort_by(|a, b| b.cmp(a));
    out
}

fn last_lines(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// What the engine needs from Debian at run time (containerd, iptables, nft) and to build runc (libseccomp).
fn ensure_packages() -> anyhow::Result<()> {
    let mut need: Vec<&str> = [
        ("containerd", "containerd"),
        ("iptables", "iptables"),
        ("nft", "nftables"),
        ("ip", "iproute2"),
        ("pkg-config", "pkg-config"),
    ]
    .into_iter()
    .filter(|(command, _)| on_path(command).is_none())
    .map(|(_, package)| package)
    .collect();
    if !cmd("dpkg", ["-s", "libseccomp-dev"]).succeeds() {
        need.push("libseccomp-dev");
    }
    if need.is_empty() {
        return Ok(());
    }
    apt_install(&need, "the private engine")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pid_is_ours_only_if_its_command_line_names_our_config() {
        let config = Path::new("/c/engine/run/daemon.json");
        assert!(names_config(b"/c/bin/dockerd\0--config-file\0/c/engine/run/daemon.json\0", config));
        assert!(!names_config(b"/usr/bin/dockerd\0--config-file\0/etc/docker/daemon.json\0", config));
        assert!(!names_config(b"sleep\0/c/engine/run/daemon.json.bak\0", config));
    }

    #[test]
    fn a_zombie_is_not_alive() {
        assert!(is_zombie("26158 (dockerd) Z 1 26158 26158 0 -1"));
        assert!(!is_zombie("26158 (docker d) S 1 26158 26158 0 -1"));
        assert!(!is_zombie("garbage"));
        assert!(alive(nix::unistd::getpid()));
    }

    #[test]
    fn mounts_under_the_engine_go_deepest_first_and_no_others() {
        let mounts = "overlay /e/data/overlay2/a/merged overlay rw 0 0\n\
                      shm /e/run/exec/x/shm tmpfs rw 0 0\n\
                      nsfs /e/run/netns/y nsfs rw 0 0\n\
                      /dev/vda / ext4 rw 0 0\n\
                      tmpfs /e/database tmpfs rw 0 0\n";
        let got = mounts_below(mounts, &[Path::new("/e/data"), Path::new("/e/run")]);
        assert_eq!(got, ["/e/run/netns/y", "/e/run/exec/x/shm", "/e/data/overlay2/a/merged"]);
    }

    #[test]
    fn the_daemon_is_confined_to_our_files_and_has_no_dns() {
        let mut s = Settings::from_env().unwrap();
        s.engine_root = PathBuf::from("/c/engine");
        s.engine_run_dir = PathBuf::from("/c/engine/run");
        s.engine_socket = PathBuf::from("/c/engine/run/docker.sock");
        let e = Engine::of(&s);
        let cfg = e.daemon_config(Path::new("/c/engine/data"));
        assert_eq!(cfg["hosts"], serde_json::json!(["unix:///c/engine/run/docker.sock"]));
        assert_eq!(cfg["data-root"], "/c/engine/data");
        assert_eq!(cfg["exec-root"], "/c/engine/run/exec");
        assert_eq!(cfg["pidfile"], "/c/engine/run/dockerd.pid");
        assert_eq!(cfg["dns"], serde_json::json!([NO_DNS]));
        assert!(cfg["userland-proxy-path"].as_str().is_some_and(|p| p.starts_with("/c/engine/moby-")));
    }
}

//! Starting and stopping the component processes, and proving a PID is still ours.
//!
//! Three layers keep orphans from surviving us:
//! 1. [`Processes`] stops what it started when dropped (normal return, `?`, test panics).
//! 2. Each child runs under `setpriv --pdeathsig KILL`, so the kernel kills it if our process
//!    dies without unwinding (SIGKILL, `process::exit`, a `static` control plane shared by tests).
//!    The death signal fires when the *thread* that forked exits, so all children are forked by
//!    one dedicated thread that lives as long as the process.
//! 3. `processes.json` in the run directory records PID + kernel start time, so `down` from
//!    another process can stop them without ever signalling a recycled PID.

use std::fs::File;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use crate::error::{Error, IoContext, Result};

/// File in the run directory that records what runs there.
pub const STATE_FILE: &str = "processes.json";

/// How long a component gets between SIGTERM and SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// One recorded process: a PID is only "ours" while its kernel start time still matches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessRecord {
    pub name: String,
    pub pid: u32,
    /// Field 22 of /proc/<pid>/stat (clock ticks since boot); changes when a PID is reused.
    pub start_time: u64,
}

impl ProcessRecord {
    /// The record of the current process.
    pub fn current(name: &str) -> Option<Self> {
        let pid = std::process::id();
        Some(Self { name: name.to_string(), pid, start_time: proc_stat(pid)?.start_time })
    }

    /// True while the PID exists, is not a zombie, and is the same process we recorded.
    pub fn is_alive(&self) -> bool {
        proc_stat(self.pid).is_some_and(|s| s.start_time == self.start_time && !matches!(s.state, 'Z' | 'X'))
    }
}

/// What `processes.json` holds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunState {
    /// The process that started the components (the `up` command or a test binary).
    pub owner: Option<ProcessRecord>,
    pub processes: Vec<ProcessRecord>,
}

impl RunState {
    pub fn path(run_dir: &Path) -> PathBuf {
        run_dir.join(STATE_FILE)
    }

    /// Reads the state file; `Ok(None)` when there is none.
    pub fn read(run_dir: &Path) -> Result<Option<Self>> {
        let path = Self::path(run_dir);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).io_context(|| format!("reading {}", path.display())),
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| Error::StateFile { path, message: format!("not a control-plane state file ({e})") })
    }

    /// Writes atomically (temp file + rename) so a reader never sees half a file.
    pub fn write(&self, run_dir: &Path) -> Result<()> {
        let path = Self::path(run_dir);
        let tmp = run_dir.join(format!(".{STATE_FILE}.tmp"));
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| Error::StateFile { path: path.clone(), message: e.to_string() })?;
        std::fs::write(&tmp, text).io_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &path).io_context(|| format!("writing {}", path.display()))
    }

    /// Records that are still running (owner first).
    pub fn alive(&self) -> Vec<&ProcessRecord> {
        self.owner.iter().chain(self.processes.iter()).filter(|r| r.is_alive()).collect()
    }
}

struct ProcStat {
    state: char,
    start_time: u64,
}

fn proc_stat(pid: u32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_proc_stat(&text)
}

/// Parses state (field 3) and starttime (field 22). The command name (field 2) is in
/// parentheses and may itself contain spaces or ')', so split after the last ')'.
fn parse_proc_stat(text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // `rest` starts at field 3, so field 22 is 19 further on.
    let start_time = fields.nth(18)?.parse().ok()?;
    Some(ProcStat { state, start_time })
}

fn pid_of(pid: u32) -> Option<Pid> {
    i32::try_from(pid).ok().map(Pid::from_raw)
}

/// Sends `signal` only if `record` still names the process we started.
fn signal_if_ours(record: &ProcessRecord, signal: Signal) -> bool {
    if !record.is_alive() {
        return false;
    }
    match pid_of(record.pid) {
        Some(pid) => kill(pid, signal).is_ok(),
        None => false,
    }
}

/// Stops processes recorded by another (possibly dead) launcher, newest first.
///
/// If the owner is still alive it is asked to stop first (it then stops its children in
/// order); anything left is signalled directly. Returns the names of processes that were
/// running.
pub fn stop_recorded(state: &RunState) -> Vec<String> {
    let mut stopped = Vec::new();
    let me = std::process::id();
    if let Some(owner) = state.owner.as_ref().filter(|o| o.pid != me)
        && signal_if_ours(owner, Signal::SIGTERM)
    {
        stopped.push(owner.name.clone());
        // The owner needs one grace period per component to stop them in order.
        let budget = STOP_GRACE * (state.processes.len() as u32 + 1);
        wait_gone(owner, budget);
    }
    for record in state.processes.iter().rev() {
        if signal_if_ours(record, Signal::SIGTERM) {
            stopped.push(record.name.clone());
            if !wait_gone(record, STOP_GRACE) {
                tracing::warn!(name = %record.name, pid = record.pid, "did not stop after SIGTERM; sending SIGKILL");
                signal_if_ours(record, Signal::SIGKILL);
                wait_gone(record, STOP_GRACE);
            }
        }
    }
    stopped
}

fn wait_gone(record: &ProcessRecord, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while record.is_alive() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

/// Forks `command` on the long-lived spawner thread (see the module docs for why).
fn spawn_on_spawner_thread(mut command: Command) -> std::io::Result<Child> {
    static SPAWNER: OnceLock<Option<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("controlplane-spawner".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    // The requester may have gone away; then the child is dropped and
                    // its death signal still covers it.
                    let _ = reply.send(command.spawn());
                }
            })
            .map_err(|e| tracing::warn!("cannot start the spawner thread ({e}); forking directly"))
            .ok()
            .map(|_| tx)
    });
    let Some(spawner) = spawner else {
        return command.spawn();
    };
    let (reply_tx, reply_rx) = mpsc::channel();
    if let Err(mpsc::SendError((cmd, _))) = spawner.send((command, reply_tx)) {
        command = cmd;
        return command.spawn();
    }
    reply_rx.recv().unwrap_or_else(|_| Err(std::io::Error::other("the spawner thread stopped before answering")))
}

/// `setpriv` from util-linux (essential on Debian) sets the parent-death signal and then
/// execs the binary, so the child keeps its PID and needs no unsafe `pre_exec` here.
fn setpriv() -> Option<&'static Path> {
    static SETPRIV: OnceLock<Option<PathBuf>> = OnceLock::new();
    SETPRIV
        .get_or_init(|| {
            let found = ["/usr/bin/setpriv", "/bin/setpriv"]
                .into_iter()
                .map(PathBuf::from)
                .find(|p| p.is_file());
            if found.is_none() {
                tracing::warn!(
                    "setpriv not found (apt-get install util-linux); components will outlive this process if it is SIGKILLed"
                );
            }
            found
        })
        .as_deref()
}

/// A component process we started, with its log file.
#[derive(Debug)]
pub struct ManagedProcess {
    pub name: &'static str,
    pub record: ProcessRecord,
    pub log: PathBuf,
    child: Child,
}

impl ManagedProcess {
    /// Starts `binary args` with a clean environment (no ETCD_*, KUBECONFIG, proxies leaking
    /// in), in its own process group (a terminal's Ctrl-C reaches only us, and we stop the
    /// components in order), with stdout and stderr appended to `log`.
    pub fn spawn(name: &'static str, binary: &Path, args: &[String], log: &Path, cwd: &Path) -> Result<Self> {
        Self::spawn_with_env(name, binary, args, &[], log, cwd)
    }

    /// As [`ManagedProcess::spawn`], with `env` set beside `PATH`.
    pub fn spawn_with_env(
        name: &'static str,
        binary: &Path,
        args: &[String],
        env: &[(&str, &std::ffi::OsStr)],
        log: &Path,
        cwd: &Path,
    ) -> Result<Self> {
        let out =
            File::options().create(true).append(true).open(log).io_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone().io_context(|| format!("opening {}", log.display()))?;
        let mut command = match setpriv() {
            Some(setpriv) => {
                let mut c = Command::new(setpriv);
                c.args(["--pdeathsig", "KILL", "--"]).arg(binary);
                c
            }
            None => Command::new(binary),
        };
        command
            .args(args)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .envs(env.iter().copied())
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        let child = spawn_on_spawner_thread(command).map_err(|source| Error::Spawn {
            component: name,
            binary: binary.to_path_buf(),
            source,
        })?;
        let pid = child.id();
        // Unreaped, the child (even if it already exited) keeps its /proc entry, so this
        // cannot fail for a process we just forked; 0 only if /proc is unavailable.
        let start_time = proc_stat(pid).map(|s| s.start_time).unwrap_or(0);
        tracing::debug!(name, pid, log = %log.display(), "started");
        Ok(Self {
            name,
            record: ProcessRecord { name: name.to_string(), pid, start_time },
            log: log.to_path_buf(),
            child,
        })
    }

    /// `Some(description)` if the process has exited.
    pub fn exit_status(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(format!("unknown status: {e}")),
        }
    }

    /// SIGTERM, then SIGKILL after `grace`, and reap.
    pub fn stop(&mut self, grace: Duration) {
        if self.exit_status().is_some() {
            return;
        }
        // We hold the unreaped child, so its PID cannot have been reused; the check guards
        // against our own bookkeeping being wrong rather than against the kernel.
        if !signal_if_ours(&self.record, Signal::SIGTERM) {
            tracing::warn!(
                name = self.name,
                pid = self.record.pid,
                "not signalling: PID no longer matches the process we started"
            );
            return;
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if self.exit_status().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        tracing::warn!(name = self.name, pid = self.record.pid, "did not stop within {grace:?} of SIGTERM; killing");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The last `lines` lines of the log, for error messages.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }
}

/// The last `lines` lines of a file (empty if unreadable).
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The processes of one control plane, stopped newest-first when dropped.
#[derive(Debug)]
pub struct Processes {
    run_dir: PathBuf,
    log_dir: PathBuf,
    owner: Option<ProcessRecord>,
    started: Vec<ManagedProcess>,
}

impl Processes {
    /// Logs in `<run_dir>/logs/<name>.log`.
    pub fn new(run_dir: &Path) -> Result<Self> {
        Self::logging_to(run_dir, &run_dir.join("logs"))
    }

    /// Logs in `<log_dir>/<name>.log` (`make up` keeps its services' logs at the top of its run directory).
    pub fn logging_to(run_dir: &Path, log_dir: &Path) -> Result<Self> {
        let processes = Self {
            run_dir: run_dir.to_path_buf(),
            log_dir: log_dir.to_path_buf(),
            owner: ProcessRecord::current("launcher"),
            started: Vec::new(),
        };
        processes.record()?;
        Ok(processes)
    }

    /// Starts a component and records it before doing anything else.
    pub fn spawn(&mut self, name: &'static str, binary: &Path, args: &[String]) -> Result<&mut ManagedProcess> {
        self.spawn_with_env(name, binary, args, &[])
    }

    /// As [`Processes::spawn`], with `env` set beside `PATH`.
    pub fn spawn_with_env(
        &mut self,
        name: &'static str,
        binary: &Path,
        args: &[String],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Result<&mut ManagedProcess> {
        let log = self.log_dir.join(format!("{name}.log"));
        let process = ManagedProcess::spawn_with_env(name, binary, args, env, &log, &self.run_dir)?;
        self.started.push(process);
        self.record()?;
        let last = self.started.len() - 1;
        Ok(&mut self.started[last])
    }

    fn record(&self) -> Result<()> {
        RunState { owner: self.owner.clone(), processes: self.started.iter().map(|p| p.record.clone()).collect() }
            .write(&self.run_dir)
    }

    /// The first component that has exited, as (name, status, log, tail).
    pub fn first_exited(&mut self) -> Option<(&'static str, String, PathBuf, String)> {
        self.started.iter_mut().find_map(|p| {
            let status = p.exit_status()?;
            Some((p.name, status, p.log.clone(), p.log_tail(30)))
        })
    }

    pub fn get(&self, name: &str) -> Option<&ManagedProcess> {
        self.started.iter().find(|p| p.name == name)
    }

    pub fn iter(&self) -> impl Iterator<Item = &ManagedProcess> {
        self.started.iter()
    }

    /// Stops everything, newest first (controller manager, apiserver, etcd), so no component
    /// spends its last seconds logging errors about one already gone.
    pub fn stop_all(&mut self) {
        while let Some(mut process) = self.started.pop() {
            process.stop(STOP_GRACE);
            tracing::debug!(name = process.name, "stopped");
        }
        // No owner and no processes marks a clean stop, so the directory reads as stopped
        // even while this process lives on; a failure to write is harmless here.
        self.owner = None;
        let _ = self.record();
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        self.stop_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_stat_with_awkward_command_names() {
        let line =
            "1234 (a b) c)) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 18446744073709551615";
        let stat = parse_proc_stat(line).expect("parse");
        assert_eq!(stat.state, 'S');
        assert_eq!(stat.start_time, 987654);
    }

    #[test]
    fn current_process_record_is_alive_and_a_changed_start_time_is_not() {
        let me = ProcessRecord::current("me").expect("/proc is mounted");
        assert!(me.is_alive());
        let recycled = ProcessRecord { start_time: me.start_time + 1, ..me };
        assert!(!recycled.is_alive(), "a different start time means a different process");
    }

    #[test]
    fn stop_recorded_terminates_only_matching_processes() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("logs")).expect("logs");
        let mut sleeper = ManagedProcess::spawn(
            "sleeper",
            Path::new("/bin/sleep"),
            &["30".to_string()],
            &dir.path().join("logs/sleeper.log"),
            dir.path(),
        )
        .expect("spawn sleep");
        let wrong = ProcessRecord { start_time: sleeper.record.start_time + 1, ..sleeper.record.clone() };
        let stopped = stop_recorded(&RunState { owner: None, processes: vec![wrong] });
        assert!(stopped.is_empty());
        assert!(sleeper.exit_status().is_none(), "must not signal a mismatched PID");

        let stopped = stop_recorded(&RunState { owner: None, processes: vec![sleeper.record.clone()] });
        assert_eq!(stopped, vec!["sleeper".to_string()]);
        assert!(sleeper.exit_status().is_some());
    }

    #[test]
    fn dropping_processes_stops_them_and_marks_a_clean_stop() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("logs")).expect("logs");
        let record = {
            let mut processes = Processes::new(dir.path()).expect("new");
            let p = processes.spawn("sleeper", Path::new("/bin/sleep"), &["30".to_string()]).expect("spawn");
            let record = p.record.clone();
            let state = RunState::read(dir.path()).expect("read").expect("state");
            assert_eq!(state.processes, vec![record.clone()]);
            record
        };
        assert!(!record.is_alive());
        let state = RunState::read(dir.path()).expect("read").expect("state");
        assert!(state.processes.is_empty());
    }
}

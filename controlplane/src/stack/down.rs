//! Stopping a stack from its run directory, and proving nothing of it is left.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context as _;
use fakecloud_controlplane::process::{RunState, stop_recorded};

use super::layout::{FILES, RunDir};

/// What `down` does with the logs: a failed `up` keeps them to explain itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logs {
    Keep,
    Remove,
}

/// The programs a stack runs, by executable name: a process of one of these naming the run directory on its
/// command line is the stack's.
const PROGRAMS: [&str; 6] =
    ["etcd", "kube-apiserver", "kube-controller-manager", "fakecloud", "fakecloud-ccm", "fakecloud-controlplane"];

pub fn down(dir: &RunDir, logs: Logs) -> anyhow::Result<()> {
    if !dir.root.exists() {
        eprintln!("[down] nothing to stop: {} does not exist", dir.root.display());
        return Ok(());
    }
    let stack = RunState::read(&dir.root)?;
    let control_plane = RunState::read(&dir.controlplane())?;
    // Named before stopping, by PID (the supervisor owns both records).
    let running: BTreeMap<u32, String> = stack
        .iter()
        .chain(control_plane.iter())
        .flat_map(|state| state.alive())
        .map(|r| (r.pid, r.name.clone()))
        .collect();

    // The supervisor first: on SIGTERM it stops its services and the control plane in order. Whatever it
    // leaves (it was SIGKILLed, say) is signalled directly.
    if let Some(state) = &stack {
        stop_recorded(state);
    }
    if control_plane.is_some() {
        fakecloud_controlplane::down(&dir.controlplane(), logs == Logs::Keep)?;
    } else if logs == Logs::Remove && dir.controlplane().exists() {
        // A start that failed before the control plane recorded any process.
        std::fs::remove_dir_all(dir.controlplane())
            .with_context(|| format!("removing {}", dir.controlplane().display()))?;
    }

    let left = leftovers(&dir.root);
    anyhow::ensure!(
        left.is_empty(),
        "still running for {}: {}; stop them with kill <pid>",
        dir.root.display(),
        left.join(", ")
    );
    if !running.is_empty() {
        let list: Vec<String> = running.iter().map(|(pid, name)| format!("{name} (pid {pid})")).collect();
        eprintln!("[down] stopped {}", list.join(", "));
    }

    match logs {
        Logs::Keep => {
            for name in FILES.iter().filter(|f| f.ends_with(".pid")) {
                remove_if_there(&dir.file(name))?;
            }
            eprintln!("[down] stopped; logs kept in {}", dir.root.display());
        }
        Logs::Remove => {
            for name in FILES {
                remove_if_there(&dir.file(name))?;
            }
            // `make kind-up` keeps files here too: the directory goes only when nothing else is in it.
            if std::fs::remove_dir(&dir.root).is_err() {
                eprintln!("[down] left {} in place: it holds files make up did not create", dir.root.display());
            }
            eprintln!("[down] stopped");
        }
    }
    Ok(())
}

fn remove_if_there(file: &Path) -> anyhow::Result<()> {
    match std::fs::remove_file(file) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing {}", file.display()))
        }
        _ => Ok(()),
    }
}

/// Processes of the stack's programs that name `root` on their command line (every component does: a path
/// under it is among its flags), as `<pid> (<program>)`; this process aside.
fn leftovers(root: &Path) -> Vec<String> {
    let root = root.to_string_lossy();
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            if pid == me {
                return None;
            }
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            if !String::from_utf8_lossy(&cmdline).contains(&*root) {
                return None;
            }
            let exe = std::fs::read_link(entry.path().join("exe")).ok()?;
            // A binary rebuilt while it runs shows as "<name> (deleted)".
            let name = exe.file_name()?.to_str()?.trim_end_matches(" (deleted)").to_string();
            PROGRAMS.contains(&name.as_str()).then(|| format!("{pid} ({name})"))
        })
        .collect()
}

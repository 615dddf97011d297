//! `fakecloud-controlplane stack up|down` (what `make up` and `make down` run), end to end: a fleet too large
//! for the cluster CIDR refused, up with 4 Nodes in a fresh run directory on free ports (each stage's time
//! said), a second up refused, down, and no process of the run directory left.
//!
//! Needs the control-plane binaries and `fakecloud` and `fakecloud-ccm` beside the launcher (`make test` builds
//! them first); without them it is skipped outside CI, as the other tests here, and fails under CI.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use fakecloud_controlplane::Binaries;

const LAUNCHER: &str = env!("CARGO_BIN_EXE_fakecloud-controlplane");

fn free_port() -> u16 {
    fakecloud_controlplane::ports::free_port().expect("a free port")
}

fn stack(args: &[&str], run_dir: &Path) -> Output {
    Command::new(LAUNCHER).arg("stack").args(args).arg("--run-dir").arg(run_dir).output().expect("the launcher runs")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// PIDs of processes naming `dir` on their command line.
fn processes_naming(dir: &Path) -> Vec<u32> {
    let dir = dir.to_string_lossy();
    let entries = std::fs::read_dir("/proc").expect("/proc");
    entries
        .filter_map(|e| {
            let e = e.ok()?;
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            String::from_utf8_lossy(&cmdline).contains(&*dir).then_some(pid)
        })
        .collect()
}

#[test]
fn up_refuses_a_second_up_and_down_leaves_nothing() {
    if Binaries::for_tests("stack up/down").is_none() {
        return;
    }
    let beside: PathBuf = Path::new(LAUNCHER).parent().expect("the launcher's directory").to_path_buf();
    if let Some(missing) = ["fakecloud", "fakecloud-ccm"].into_iter().find(|b| !beside.join(b).is_file()) {
        let why = format!("no {missing} in {} (cargo build --bin {missing})", beside.display());
        // As the control plane's binaries: under CI (`make test` builds them first) missing is a failure.
        assert!(std::env::var_os("CI").is_none(), "stack up/down: {why}");
        eprintln!("skipping stack up/down: {why}");
        return;
    }
    let parent = tempfile::tempdir().expect("a temporary directory");
    let run_dir = parent.path().join("run");
    let (port, ccm_port) = (free_port().to_string(), free_port().to_string());

    // More Nodes than the cluster CIDR holds: refused before anything starts.
    let too_many = stack(&["up", "--port", &port, "--ccm-port", &ccm_port, "--nodes", "9000"], &run_dir);
    assert!(!too_many.status.success() && text(&too_many).contains("between 1 and 8192"), "{}", text(&too_many));
    assert!(!run_dir.exists(), "a refused up makes nothing");

    let up = stack(&["up", "--port", &port, "--ccm-port", &ccm_port, "--nodes", "4"], &run_dir);
    assert!(up.status.success(), "stack up failed:\n{}", text(&up));
    for says in [
        "fakecloud is up",
        "up: 4 Nodes Ready, initialized and routed",
        "stages: the control plane",
        "node-1, node-2, node-3, node-4",
    ] {
        assert!(text(&up).contains(says), "up does not say {says:?}: {}", text(&up));
    }
    for file in ["fakecloud.credentials", "ccm.log", "emulator.log", "kubelets.log", "ccm.pid"] {
        assert!(run_dir.join(file).is_file(), "{file} missing from {}", run_dir.display());
    }
    assert!(run_dir.join("controlplane/kubeconfigs/admin.kubeconfig").is_file());
    assert!(!processes_naming(&run_dir).is_empty(), "the stack runs on after up returned");

    let again = stack(&["up", "--port", &port, "--ccm-port", &ccm_port], &run_dir);
    assert!(!again.status.success(), "a second up must refuse");
    assert!(text(&again).contains("already up"), "{}", text(&again));

    let down = stack(&["down"], &run_dir);
    assert!(down.status.success(), "stack down failed:\n{}", text(&down));
    assert!(!run_dir.exists(), "down removes the run directory it made");
    assert_eq!(processes_naming(&run_dir), Vec::<u32>::new(), "processes of the run directory left");
}

//! The kwok process of one simulation: started on the cluster's kubeconfig, managing the Nodes annotated as this
//! simulation's, with kwok's pod stages (a pod bound to such a Node runs, with an IP from its pod CIDR) and a
//! Node stage of ours that matches no Node (see [`super::schedule`] for why the Node status is reported here,
//! and the stage file for why it exists). Stopped when dropped.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::process::ManagedProcess;

/// Written beside kwok and given to it with its pod stages.
const NODE_STAGE: &str = include_str!("kwok-node-stage.yaml");
const CONFIG: &str = include_str!("kwok-config.yaml");

/// How long kwok has to stop after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(2);

pub struct KwokProcess {
    process: Arc<Mutex<ManagedProcess>>,
    // Holds kwok's working directory (and its log unless the caller names one).
    _dir: tempfile::TempDir,
}

impl KwokProcess {
    /// kwok on `kubeconfig`, managing the Nodes annotated `managed_by`, their Leases of `lease_seconds`; its
    /// output to `log`, else to a file in its directory.
    pub fn start(
        kwok: &crate::Kwok,
        kubeconfig: &Path,
        managed_by: (&str, &str),
        lease_seconds: u32,
        log: Option<&Path>,
    ) -> crate::Result<Self> {
        use crate::error::IoContext as _;
        let dir = tempfile::Builder::new()
            .prefix("fakecloud-kwok-")
            .tempdir()
            .io_context(|| "creating kwok's directory".into())?;
        let kubeconfig =
            std::path::absolute(kubeconfig).io_context(|| format!("resolving {}", kubeconfig.display()))?;
        let log = log.map_or_else(|| dir.path().join("kwok.log"), Path::to_path_buf);
        let mut args = vec![
            "--kubeconfig".to_string(),
            kubeconfig.display().to_string(),
            format!("--manage-nodes-with-annotation-selector={}={}", managed_by.0, managed_by.1),
            format!("--node-lease-duration-seconds={lease_seconds}"),
            // Its metrics and debug endpoints: on loopback, on a port of the kernel's choosing.
            "--server-address=127.0.0.1:0".to_string(),
            // At INFO it writes a line per Lease renewal: 500 a second for 5,000 Nodes.
            "--v=WARN".to_string(),
        ];
        let node_stage = dir.path().join("node-stage.yaml");
        std::fs::write(&node_stage, NODE_STAGE).io_context(|| format!("writing {}", node_stage.display()))?;
        // Where kwok looks for its configuration anyway (`$KWOK_WORKDIR/kwok.yaml`, else one under $HOME or
        // /tmp): ours, not a user's.
        let config = dir.path().join("kwok.yaml");
        std::fs::write(&config, CONFIG).io_context(|| format!("writing {}", config.display()))?;
        for file in [&config].into_iter().chain(&kwok.stages).chain([&node_stage]) {
            args.extend(["--config".to_string(), file.display().to_string()]);
        }
        let env = [("KWOK_WORKDIR", dir.path().as_os_str())];
        let process = ManagedProcess::spawn_with_env("kwok", &kwok.binary, &args, &env, &log, dir.path())?;
        tracing::info!(pid = process.record.pid, log = %log.display(), "kwok started");
        Ok(Self { process: Arc::new(Mutex::new(process)), _dir: dir })
    }

    /// Its exit status and the end of its log, once it has exited.
    pub fn exited(&self) -> Option<String> {
        exit_report(&self.process)
    }

    /// A handle that reports, once, that kwok has exited.
    pub fn watch(&self) -> Watch {
        Watch { process: self.process.clone(), reported: AtomicBool::new(false) }
    }
}

impl Drop for KwokProcess {
    fn drop(&mut self) {
        if let Ok(mut p) = self.process.lock() {
            p.stop(STOP_GRACE);
        }
    }
}

pub struct Watch {
    process: Arc<Mutex<ManagedProcess>>,
    reported: AtomicBool,
}

impl Watch {
    /// Log an error, once, if kwok has exited: the Nodes' Leases then lapse, and the log says why.
    pub fn check(&self) {
        if self.reported.load(Ordering::Relaxed) {
            return;
        }
        if let Some(how) = exit_report(&self.process) {
            self.reported.store(true, Ordering::Relaxed);
            tracing::error!("kwok exited ({how}): the simulated Nodes' Leases are no longer renewed");
        }
    }
}

/// kwok's exit status and the end of its log, once it has exited.
fn exit_report(process: &Mutex<ManagedProcess>) -> Option<String> {
    let mut p = process.lock().ok()?;
    let status = p.exit_status()?;
    Some(format!("{status}; {} ends:\n{}", p.log.display(), p.log_tail(20)))
}

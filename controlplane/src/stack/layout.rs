//! What a stack is and where its parts are: its Nodes, its run directory's files, the binaries it runs, and the
//! line that says it is ready.

use std::path::{Path, PathBuf};

/// The instances `up` creates, spread over the region's zones; their Nodes are what it waits for.
pub const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];

/// The line the supervisor prints once the stack is ready; `up` returns to the shell when it sees it.
pub const READY: &str = "fakecloud stack ready";

/// The run directory's layout. The names are the ones the README gives (`.run/ccm.log`, ...).
#[derive(Debug, Clone)]
pub struct RunDir {
    /// Absolute: the leftover check looks for it on the components' command lines.
    pub root: PathBuf,
}

/// Every file the stack writes at the top of its run directory (besides `controlplane/`); `down` removes these
/// and no others, as the directory is shared (`make kind-up` keeps its files there too).
pub const FILES: [&str; 14] = [
    fakecloud_controlplane::process::STATE_FILE,
    "stack.log",
    "emulator.log",
    "ccm.log",
    "kubelets.log",
    "emulator.pid",
    "ccm.pid",
    "kubelets.pid",
    "ccm-token",
    "cloud-config.yaml",
    "fakecloud.db",
    "fakecloud.db-wal",
    "fakecloud.db-shm",
    "fakecloud.credentials",
];

impl RunDir {
    pub fn new(path: &Path) -> anyhow::Result<Self> {
        let root = std::path::absolute(path)
            .map_err(|e| anyhow::anyhow!("resolving the run directory {}: {e}", path.display()))?;
        Ok(Self { root })
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    pub fn controlplane(&self) -> PathBuf {
        self.root.join("controlplane")
    }

    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.controlplane().join("kubeconfigs").join("admin.kubeconfig")
    }

    pub fn credentials(&self) -> PathBuf {
        self.file("fakecloud.credentials")
    }
}

/// `fakecloud` and `fakecloud-ccm` sit beside this binary: cargo builds every binary of the workspace into one
/// directory, whichever crate owns it.
pub fn sibling(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().map_err(|e| anyhow::anyhow!("locating this binary: {e}"))?;
    let dir = exe.parent().ok_or_else(|| anyhow::anyhow!("{} has no parent directory", exe.display()))?;
    let path = dir.join(name);
    anyhow::ensure!(
        path.is_file(),
        "{name} is not beside this binary ({}); build it first: cargo build --locked --bin {name}",
        path.display()
    );
    Ok(path)
}

/// The emulator's URL.
pub fn endpoint(port: u16) -> String {
    format!("http://127.0.0.1:{port}")
}

//! What a stack is and where its parts are: its Nodes, its run directory's files, the binaries it runs, and the
//! line that says it is ready.

use std::path::{Path, PathBuf};

use fakecloud_controlplane::{CLUSTER_CIDR, SMALLEST_NODE_CIDR, max_nodes};

/// How many instances `up` creates when not told: node-a, node-b and node-c.
pub const DEFAULT_NODES: u32 = 3;

/// The instances `up` creates, spread over the region's zones; their Nodes are what it waits for. Up to three are
/// named `node-a`, `node-b`, `node-c` (the names the book's examples use); a larger fleet is numbered from 1,
/// zero-padded to the width of the count (`node-01` ... `node-12`, `node-001` ... `node-256`).
pub fn node_names(count: u32) -> anyhow::Result<Vec<String>> {
    let max = max_nodes();
    anyhow::ensure!(
        (1..=max).contains(&count),
        "--nodes {count}: between 1 and {max}: the cluster CIDR {CLUSTER_CIDR} holds {max} node pod CIDRs of \
         /{SMALLEST_NODE_CIDR} (8 addresses), the smallest a Node is given, one per Node"
    );
    if count <= DEFAULT_NODES {
        return Ok(["node-a", "node-b", "node-c"].iter().take(count as usize).map(|n| n.to_string()).collect());
    }
    let width = count.to_string().len();
    Ok((1..=count).map(|i| format!("node-{i:0width$}")).collect())
}

/// The line the supervisor prints once the stack is ready; `up` returns to the shell when it sees it.
pub const READY: &str = "fakecloud stack ready";

/// The run directory's layout. The names are the ones the book gives (`.run/ccm.log`, ...).
#[derive(Debug, Clone)]
pub struct RunDir {
    /// Absolute: the leftover check looks for it on the components' command lines.
    pub root: PathBuf,
}

/// With cloud-provider-aws (`stack up --ccm aws`): its cloud config, and the AWS face's settings for a user's
/// shell (`source` it).
pub const AWS_CLOUD_CONFIG: &str = "aws-cloud-config.ini";
pub const AWS_ENV: &str = "aws.env";

/// Every file the stack writes at the top of its run directory (besides `controlplane/`); `down` removes these
/// and no others, as the directory is shared (`make kind-up` keeps its files there too).
pub const FILES: [&str; 17] = [
    fakecloud_controlplane::process::STATE_FILE,
    "stack.log",
    "emulator.log",
    "ccm.log",
    "kubelets.log",
    "kwok.log",
    "emulator.pid",
    "ccm.pid",
    "kubelets.pid",
    "ccm-token",
    "cloud-config.yaml",
    AWS_CLOUD_CONFIG,
    AWS_ENV,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_keep_the_readmes_three_and_refuse_what_the_cluster_cidr_cannot_hold() -> anyhow::Result<()> {
        assert_eq!(node_names(3)?, ["node-a", "node-b", "node-c"]);
        assert_eq!(node_names(1)?, ["node-a"]);
        let names = node_names(12)?;
        assert_eq!((names.len(), names[0].as_str(), names[11].as_str()), (12, "node-01", "node-12"));
        assert_eq!(max_nodes(), 8192);
        assert_eq!(node_names(5000)?[4999], "node-5000");
        for bad in [0, 8193] {
            let e = node_names(bad).unwrap_err().to_string();
            assert!(e.contains("10.244.0.0/16") && e.contains("8192"), "{e}");
        }
        Ok(())
    }
}

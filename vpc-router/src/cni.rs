//! The node's CNI config, as the kubelet's kubenet made it from the node's pod CIDR. It uses the
//! standard plugins: `bridge` (`cni0`, the pods' gateway, masquerading off-node traffic), `host-local`
//! IPAM with one range per pod CIDR (both families on a dual-stack node), and `portmap` for
//! `hostPort`s.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::IpNet;
use serde_json::json;
use tokio::sync::watch;

use crate::node::NodeInfo;

/// The network's name in the config (containerd shows it in pod sandbox status).
pub const NETWORK_NAME: &str = "fakecloud";
/// The bridge the pods hang off. kubenet called it `cbr0`. Here it is the bridge plugin's usual name.
pub const BRIDGE: &str = "cni0";
/// Debian bookworm's containernetworking-plugins (1.1.x) speaks CNI spec 1.0.0.
pub const CNI_VERSION: &str = "1.0.0";

#[derive(Debug, thiserror::Error)]
#[error("CNI config {path}: {what}: {source}")]
pub struct CniError {
    pub path: PathBuf,
    pub what: &'static str,
    #[source]
    pub source: std::io::Error,
}

/// The conflist for a node with these pod CIDRs (in the Node's order: the first is the primary family).
pub fn render(pod_cidrs: &[IpNet]) -> String {
    let ranges: Vec<_> = pod_cidrs.iter().map(|c| json!([{ "subnet": c.to_string() }])).collect();
    // A default route per family the pods have an address of. The bridge, as gateway, is the next hop.
    let mut routes = Vec::new();
    if pod_cidrs.iter().any(|c| matches!(c, IpNet::V4(_))) {
        routes.push(json!({ "dst": "0.0.0.0/0" }));
    }
    if pod_cidrs.iter().any(|c| matches!(c, IpNet::V6(_))) {
        routes.push(json!({ "dst": "::/0" }));
    }
    let conf = json!({
        "cniVersion": CNI_VERSION,
        "name": NETWORK_NAME,
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": true,
                "ipMasq": true,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": ranges,
                    "routes": routes,
                },
            },
            {
                "type": "portmap",
                "capabilities": { "portMappings": true },
            },
        ],
    });
    let mut text = serde_json::to_string_pretty(&conf).unwrap_or_default();
    text.push('\n');
    text
}

/// Write `content` to `path` unless the file already holds exactly that. Returns whether it wrote.
///
/// The content goes to a temporary file in the same directory, is synced, then renamed over `path`.
/// The container runtime rereads the directory at any moment, so it must never see a half-written
/// file. The temporary name starts with a dot and ends in `.tmp`, which the runtime's loader skips (it
/// reads `*.conf`, `*.conflist` and `*.json`).
pub fn write_if_changed(path: &Path, content: &str) -> Result<bool, CniError> {
    let err = |what, source| CniError { path: path.to_path_buf(), what, source };
    match std::fs::read_to_string(path) {
        Ok(old) if old == content => return Ok(false),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err("cannot read it", e)),
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp"));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(content.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        err("cannot write it", e)
    })?;
    Ok(true)
}

/// Keep the config at `path` written for this node's pod CIDRs, from the first time the Node has
/// them until the watch ends. The file is also checked every `recheck`, so a deleted or edited file
/// comes back without waiting for the Node to change (pod CIDRs never do). A failed write is retried
/// at the next check.
pub async fn keep_written(path: PathBuf, mut node: watch::Receiver<Option<NodeInfo>>, recheck: Duration) {
    let mut waiting_logged = false;
    loop {
        let cidrs = node.borrow_and_update().as_ref().map(|n| (n.name.clone(), n.pod_cidrs.clone()));
        match cidrs {
            Some((name, cidrs)) if !cidrs.is_empty() => match write_if_changed(&path, &render(&cidrs)) {
                Ok(true) => {
                    tracing::info!(node = %name, pod_cidrs = ?cidrs, path = %path.display(), "CNI config written")
                }
                Ok(false) => tracing::debug!(path = %path.display(), "CNI config up to date"),
                Err(e) => tracing::error!(error = %e, "cannot write the CNI config; retrying"),
            },
            Some((name, _)) if !waiting_logged => {
                waiting_logged = true;
                tracing::info!(node = %name, "waiting for the node's spec.podCIDRs (allocated by kube-controller-manager)");
            }
            _ => {}
        }
        tokio::select! {
            changed = node.changed() => if changed.is_err() { return },
            () = tokio::time::sleep(recheck) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn single_stack_config_is_kubenets_bridge_with_one_range() {
        let text = render(&["10.244.1.0/24".parse().unwrap()]);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["cniVersion"], CNI_VERSION);
        assert_eq!(v["name"], "fakecloud");
        let bridge = &v["plugins"][0];
        assert_eq!(bridge["type"], "bridge");
        assert_eq!(bridge["bridge"], "cni0");
        assert_eq!(
            (&bridge["isGateway"], &bridge["ipMasq"], &bridge["hairpinMode"]),
            (&json!(true), &json!(true), &json!(true))
        );
        assert_eq!(bridge["ipam"]["type"], "host-local");
        assert_eq!(bridge["ipam"]["ranges"], json!([[{ "subnet": "10.244.1.0/24" }]]));
        assert_eq!(bridge["ipam"]["routes"], json!([{ "dst": "0.0.0.0/0" }]));
        assert_eq!(v["plugins"][1], json!({ "type": "portmap", "capabilities": { "portMappings": true } }));
        assert_eq!(v["plugins"].as_array().map(Vec::len), Some(2));
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn dual_stack_config_has_a_range_and_a_default_route_per_family() {
        let cidrs = ["10.244.1.0/24".parse().unwrap(), "fd00:10:244:1::/64".parse().unwrap()];
        let v: Value = serde_json::from_str(&render(&cidrs)).unwrap();
        let ipam = &v["plugins"][0]["ipam"];
        assert_eq!(ipam["ranges"], json!([[{ "subnet": "10.244.1.0/24" }], [{ "subnet": "fd00:10:244:1::/64" }]]));
        assert_eq!(ipam["routes"], json!([{ "dst": "0.0.0.0/0" }, { "dst": "::/0" }]));
    }

    #[test]
    fn the_file_is_written_once_and_rewritten_only_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("10-fakecloud.conflist");
        let a = render(&["10.244.1.0/24".parse().unwrap()]);
        assert!(write_if_changed(&path, &a).unwrap());
        let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
        assert!(!write_if_changed(&path, &a).unwrap(), "same content: not rewritten");
        assert_eq!(std::fs::metadata(&path).unwrap().modified().unwrap(), mtime);
        let b = render(&["10.244.2.0/24".parse().unwrap()]);
        assert!(write_if_changed(&path, &b).unwrap());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), b);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["10-fakecloud.conflist"], "no temporary file left behind");
    }

    #[test]
    fn an_unwritable_directory_is_an_error_naming_the_file() {
        let e = write_if_changed(Path::new("/nonexistent/dir/10-fakecloud.conflist"), "x").unwrap_err();
        assert!(e.to_string().contains("/nonexistent/dir/10-fakecloud.conflist: cannot write it"), "{e}");
    }
}

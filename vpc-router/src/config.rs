//! Flags. Each one can also be set from the environment, which is how the DaemonSet passes
//! `NODE_NAME`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

const ABOUT: &str = "The pod network of a kind cluster, made the way a cloud with kubenet-style routing makes it";

const LONG_ABOUT: &str = "\
The pod network of a kind cluster, made the way a cloud with kubenet-style routing makes it. It runs on
every node as a hostNetwork DaemonSet and needs CAP_NET_ADMIN.

1. CNI config. It waits until the node's spec.podCIDRs are allocated. Then it writes --cni-config for the
   standard plugins in /opt/cni/bin: bridge (cni0, the pods' gateway, masquerading traffic that leaves the
   pod network) with host-local IPAM (one range per pod CIDR, so both families on a dual-stack node) and
   portmap (hostPort). The file is written atomically, and only when its content changes. The image carries
   these plugins; the DaemonSet's init container copies those a node lacks into its /opt/cni/bin.

2. Routes. Every --sync-period it lists the emulator's route table (--route-table) with the endpoint and
   token of --cloud-config (the same file as fakecloud-ccm's). For each route to another node's
   instance, it programs `<destination> via <that instance's private IP>` in the host's main table, in the
   route's IP family. A route whose target has no address of that family is skipped with a warning.
   Routes that leave the cloud's table leave the host. Its routes carry routing protocol 211
   (`ip route show proto 211`), and it never touches a route without that mark. This node's instance is
   the one its providerID names, else the one whose private IP is one of its InternalIPs.

While the emulator cannot be reached or throttles (429/503), the installed routes stay. It retries after
the Retry-After the emulator sent, else after a backoff of up to 30s.

The Kubernetes API is reached with the in-cluster config (or KUBECONFIG when run by hand). RBAC needs
get/list/watch on nodes, nothing else. Logs go to stderr; RUST_LOG sets the level (default info).";

#[derive(Debug, Clone, Parser)]
#[command(name = "fakecloud-vpc-router", version, about = ABOUT, long_about = LONG_ABOUT)]
pub struct Args {
    /// This node's name: its Node object in the Kubernetes API (the DaemonSet sets it from the downward
    /// API's spec.nodeName).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: String,
    /// The cloud config (YAML: endpoint, and token or token-file; the file format of fakecloud-ccm's
    /// --cloud-config).
    #[arg(long, env = "FAKECLOUD_CLOUD_CONFIG", default_value = "/etc/fakecloud/cloud-config")]
    pub cloud_config: PathBuf,
    /// The cloud route table whose routes are programmed on this host (`main` names the main table).
    #[arg(long, env = "VPC_ROUTER_ROUTE_TABLE", default_value = "main")]
    pub route_table: String,
    /// How often the cloud's route table is read and the host brought in line with it (e.g. 2s, 500ms).
    #[arg(long, env = "VPC_ROUTER_SYNC_PERIOD", default_value = "2s", value_parser = parse_period)]
    pub sync_period: Duration,
    /// Timeout of each call to the emulator.
    #[arg(long, env = "VPC_ROUTER_API_TIMEOUT", default_value = "10s", value_parser = parse_period)]
    pub api_timeout: Duration,
    /// Where the node's CNI config goes (the directory is the container runtime's CNI conf dir).
    #[arg(long, env = "VPC_ROUTER_CNI_CONFIG", default_value = "/etc/cni/net.d/10-fakecloud.conflist")]
    pub cni_config: PathBuf,
}

/// A positive duration in humantime's syntax (`2s`, `500ms`, `1m`).
fn parse_period(s: &str) -> Result<Duration, String> {
    match humantime::parse_duration(s) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err("must be above zero".into()),
        Err(e) => Err(format!("{e} (expected e.g. 2s, 500ms or 1m)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_environment() {
        let a = Args::try_parse_from(["x", "--node-name", "kind-worker"]).unwrap();
        assert_eq!(a.sync_period, Duration::from_secs(2));
        assert_eq!(a.route_table, "main");
        assert_eq!(a.cloud_config, PathBuf::from("/etc/fakecloud/cloud-config"));
        assert_eq!(a.cni_config, PathBuf::from("/etc/cni/net.d/10-fakecloud.conflist"));
        assert_eq!(a.api_timeout, Duration::from_secs(10));
        let a = Args::try_parse_from(["x", "--node-name=n", "--sync-period=500ms"]).unwrap();
        assert_eq!(a.sync_period, Duration::from_millis(500));
        for bad in ["0s", "fast", "-1s"] {
            assert!(Args::try_parse_from(["x", "--node-name=n", &format!("--sync-period={bad}")]).is_err(), "{bad}");
        }
    }
}

//! The kind configs say what the local cluster does (external cloud provider everywhere, the same pod CIDR, the
//! pod network left to the VPC router). The kind path itself (kind/) runs in `make test-kind`.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn config(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(repo().join("kind-config").join(name)).unwrap();
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn kind_configs_run_every_node_with_an_external_cloud_provider() {
    for name in ["cluster.yaml", "cluster-dual-stack.yaml"] {
        let c = config(name);
        assert_eq!(c["kind"], "Cluster", "{name}");
        let pods = c["networking"]["podSubnet"].as_str().unwrap();
        assert!(
            pods.starts_with(fakecloud_controlplane::CLUSTER_CIDR),
            "{name}: pod subnet {pods} matches the local cluster"
        );
        // No kindnetd: the VPC router (vpc-router/deploy/) is the pod network, from the cloud's route table.
        assert_eq!(c["networking"]["disableDefaultCNI"], true, "{name}");
        let nodes = c["nodes"].as_array().unwrap();
        assert_eq!(nodes.iter().filter(|n| n["role"] == "worker").count(), 2, "{name}");
        for n in nodes {
            let patches: Vec<serde_json::Value> = n["kubeadmConfigPatches"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| serde_saphyr::from_str(p.as_str().unwrap()).unwrap())
                .collect();
            let kubelet_external =
                patches.iter().any(|p| p["nodeRegistration"]["kubeletExtraArgs"]["cloud-provider"] == "external");
            assert!(kubelet_external, "{name}: every kubelet runs with --cloud-provider=external");
            // kind's own --provider-id=kind://... would stand for good (a providerID is set once).
            let no_kind_provider_id =
                patches.iter().any(|p| p["nodeRegistration"]["kubeletExtraArgs"]["provider-id"] == "");
            assert!(no_kind_provider_id, "{name}: kind's kubelet --provider-id is overridden with an empty one");
            if n["role"] == "control-plane" {
                let cm = patches.iter().find(|p| p["kind"] == "ClusterConfiguration").unwrap();
                assert_eq!(cm["controllerManager"]["extraArgs"]["cloud-provider"], "external");
                assert_eq!(cm["controllerManager"]["extraArgs"]["configure-cloud-routes"], "false");
                // One control plane: leader election could only make them exit on a loaded host.
                assert_eq!(cm["controllerManager"]["extraArgs"]["leader-elect"], "false", "{name}");
                assert_eq!(cm["scheduler"]["extraArgs"]["leader-elect"], "false", "{name}");
            }
        }
    }
    assert_eq!(config("cluster-dual-stack.yaml")["networking"]["ipFamily"], "dual");
}

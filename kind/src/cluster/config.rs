//! The kind config kind-up gives kind: the user's (kind-config/cluster.yaml, or KIND_CONFIG), plus what this
//! node image and this host need on every node; and what kind-up reads from it.

use anyhow::bail;

use crate::settings::IMAGE_REPOSITORY;

/// What the config needs added.
pub struct Needs {
    /// The node image is fakecloud's own: the kubeadm images are preloaded in it under [`IMAGE_REPOSITORY`];
    /// there is no registry behind that name.
    pub preloaded_images: bool,
    /// The host has cgroup v1: kubelet 1.35+ refuses it unless told otherwise.
    pub cgroup_v1: bool,
}

/// `config` with kind-up's top-level kubeadmConfigPatches; refused if it has its own at the top level.
pub fn augmented(config: &str, needs: &Needs) -> anyhow::Result<String> {
    if config.lines().any(|l| l.starts_with("kubeadmConfigPatches:")) {
        bail!(
            "the kind config has a top-level kubeadmConfigPatches; put them on the nodes (kind-up adds its own at the top level)"
        );
    }
    let mut out = config.to_string();
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str("kubeadmConfigPatches:\n");
    if needs.preloaded_images {
        out.push_str(&format!("  - |\n    kind: ClusterConfiguration\n    imageRepository: {IMAGE_REPOSITORY}\n"));
    }
    if needs.cgroup_v1 {
        out.push_str("  - |\n    kind: KubeletConfiguration\n    failCgroupV1: false\n");
    }
    Ok(out)
}

/// How many nodes the config makes (`- role:` entries).
pub fn nodes(config: &str) -> usize {
    config.lines().filter(|l| l.trim_start().starts_with("- role:")).count()
}

/// The cluster's pod range: the config's podSubnet (both families on a dual-stack cluster), kind's own default
/// when it names none. The CCM manages routes inside it.
pub fn pod_subnet(config: &str) -> String {
    config
        .lines()
        .find_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some("podSubnet:")).then(|| words.next().map(|v| v.replace('"', "")))?
        })
        .unwrap_or_else(|| "10.244.0.0/16".into())
}

/// The CCM's Deployment with its `--cluster-cidr=` set to `cidr` (the rest of that line replaced).
pub fn with_cluster_cidr(manifest: &str, cidr: &str) -> String {
    manifest
        .lines()
        .map(|l| match l.find("--cluster-cidr=") {
            Some(i) => format!("{}--cluster-cidr={cidr}\n", &l[..i]),
            None => format!("{l}\n"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnetworking:\n  podSubnet: \"10.244.0.0/16,fd00:10:244::/56\"\nnodes:\n  - role: control-plane\n    kubeadmConfigPatches:\n      - |\n        kind: InitConfiguration\n  - role: worker\n  -   role: worker\n";

    #[test]
    fn the_patches_are_added_at_the_top_level_for_what_is_needed() {
        let both = augmented(CONFIG, &Needs { preloaded_images: true, cgroup_v1: true }).unwrap();
        assert!(both.starts_with(CONFIG));
        assert!(both.ends_with(
            "kubeadmConfigPatches:\n  - |\n    kind: ClusterConfiguration\n    imageRepository: fakecloud.local\n  - |\n    kind: KubeletConfiguration\n    failCgroupV1: false\n"
        ));
        let none = augmented("kind: Cluster", &Needs { preloaded_images: false, cgroup_v1: false }).unwrap();
        assert_eq!(none, "kind: Cluster\nkubeadmConfigPatches:\n");
        // The nodes' own patches are theirs; a top-level one would be shadowed by ours.
        let err = augmented("kubeadmConfigPatches:\n  - x\n", &Needs { preloaded_images: true, cgroup_v1: false });
        assert!(err.unwrap_err().to_string().contains("put them on the nodes"));
    }

    #[test]
    fn nodes_and_pod_subnet_are_read_from_the_config() {
        assert_eq!(nodes(CONFIG), 2, "`-   role:` is not a `- role:` entry");
        assert_eq!(pod_subnet(CONFIG), "10.244.0.0/16,fd00:10:244::/56");
        assert_eq!(pod_subnet("kind: Cluster\n"), "10.244.0.0/16");
    }

    #[test]
    fn the_cluster_cidr_flag_is_set_and_nothing_else_changes() {
        let m =
            "        - --cloud-provider=fakecloud\n        - --cluster-cidr=10.0.0.0/8 # placeholder\n        - --v=2";
        assert_eq!(
            with_cluster_cidr(m, "10.244.0.0/16"),
            "        - --cloud-provider=fakecloud\n        - --cluster-cidr=10.244.0.0/16\n        - --v=2\n"
        );
    }
}

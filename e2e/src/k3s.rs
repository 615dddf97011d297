//! The k3s backend (cargo feature `k3s`, `FAKECLOUD_E2E_BACKEND=k3s`): a K3s container, started through
//! testcontainers, serves the Kubernetes API in place of the upstream binaries; the emulator, the simulated
//! kubelets and the CCM processes are the local backend's ([`crate::local`]). K3s runs with its own cloud
//! controller off and its kubelet on `--cloud-provider=external`, the local backend's pod range and grace
//! period; its node is adopted as an instance so the CCM initializes it like any other.
//!
//! Needs a Docker engine (and pulls `rancher/k3s`); where none answers it stops at once, saying so.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use testcontainers_modules::k3s::{K3s, KUBE_SECURE_PORT};
use testcontainers_modules::testcontainers::runners::AsyncRunner;
use testcontainers_modules::testcontainers::{ContainerAsync, ImageExt};

use crate::local::ClusterOptions;

/// The `rancher/k3s` tag: a Kubernetes release kube-rs 5 supports (1.33 or newer).
pub const DEFAULT_TAG: &str = "v1.33.5-k3s1";

/// A running K3s server and how to reach it from the host.
pub struct K3sCluster {
    _container: ContainerAsync<K3s>,
    pub client: kube::Client,
    /// The admin kubeconfig, pointing at the container's mapped port.
    pub admin_kubeconfig: PathBuf,
    pub url: String,
    pub ca_pem: String,
}

impl K3sCluster {
    pub async fn start(dir: &Path, options: &ClusterOptions) -> Self {
        if let Err(why) = crate::backend::docker_engine() {
            panic!(
                "the k3s backend runs K3s in a container and needs a Docker engine: {why}. Use the local backend: make e2e"
            );
        }
        let conf = dir.join("k3s");
        std::fs::create_dir_all(&conf).expect("the K3s configuration directory");
        let grace = options.rates.node_monitor_grace_period.as_secs();
        let mut cmd = vec![
            "server".to_string(),
            "--snapshotter=native".into(),
            "--disable-cloud-controller".into(),
            "--kubelet-arg=cloud-provider=external".into(),
            "--disable=traefik,servicelb,metrics-server,local-storage".into(),
            format!("--cluster-cidr={}", fakecloud_controlplane::CLUSTER_CIDR),
            format!("--kube-controller-manager-arg=node-monitor-grace-period={grace}s"),
            "--kube-controller-manager-arg=node-monitor-period=1s".into(),
        ];
        if let Some(size) = options.node_cidr_mask_size {
            cmd.push(format!("--kube-controller-manager-arg=node-cidr-mask-size={size}"));
        }
        let tag = std::env::var("FAKECLOUD_E2E_K3S_TAG").unwrap_or_else(|_| DEFAULT_TAG.into());
        let container = K3s::default()
            .with_conf_mount(&conf)
            .with_tag(tag.clone())
            .with_cmd(cmd)
            .with_privileged(true)
            .with_userns_mode("host")
            .start()
            .await
            .unwrap_or_else(|e| panic!("the rancher/k3s:{tag} container starts: {e}"));
        let port = container.get_host_port_ipv4(KUBE_SECURE_PORT).await.expect("K3s's API port is mapped");
        let text = container.image().read_kube_config().expect("K3s wrote its kubeconfig");
        let mut kubeconfig = kube::config::Kubeconfig::from_yaml(&text).expect("K3s's kubeconfig parses");
        let url = format!("https://127.0.0.1:{port}");
        let mut ca_pem = String::new();
        for cluster in kubeconfig.clusters.iter_mut().filter_map(|c| c.cluster.as_mut()) {
            cluster.server = Some(url.clone());
            if let Some(data) = &cluster.certificate_authority_data {
                let pem = base64::engine::general_purpose::STANDARD.decode(data).expect("K3s's CA is base64");
                ca_pem = String::from_utf8(pem).expect("K3s's CA is PEM");
            }
        }
        // kubectl reads JSON kubeconfigs as well as YAML ones.
        let admin_kubeconfig = dir.join("k3s-admin.kubeconfig");
        let json = serde_json::to_string(&kubeconfig).expect("a kubeconfig serializes");
        fakecloud_controlplane::kubeconfig::write(&admin_kubeconfig, &json).expect("the admin kubeconfig is written");
        let client = fakecloud_controlplane::kubeconfig::client(&admin_kubeconfig).await.expect("a client for K3s");
        Self { _container: container, client, admin_kubeconfig, url, ca_pem }
    }
}

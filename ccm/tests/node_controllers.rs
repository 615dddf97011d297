//! The node controllers against the real control plane, the real emulator and the simulated kubelets, with the
//! CCM as a real process authenticated as the deploy manifest's ServiceAccount (so the shipped RBAC is what is
//! exercised).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fakecloud_api::{AuditQuery, Client, CreateInstanceRequest, Instance};
use fakecloud_controlplane::kubelets::{Options, SimulatedKubelets};
use fakecloud_controlplane::{Binaries, ControlPlane};
use fakecloud_emulator::config::{Config, DbLocation, Timings};
use fakecloud_emulator::http::auth::Tokens;
use fakecloud_emulator::server::Server;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, PostParams};

const USER: &str = "ccm-test-user-token-0123456789";
/// The CCM runs with the admin token so its calls are told apart from the kubelets' in the audit log.
const ADMIN: &str = "ccm-test-admin-token-0123456789";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl on PATH");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "kubectl {args:?}: {text}");
    text
}

fn taint_keys(n: &Node) -> Vec<String> {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|t| t.iter().map(|t| t.key.clone()).collect())
        .unwrap_or_default()
}

async fn until<T>(timeout: Duration, what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn events_for(client: &kube::Client, node: &str) -> Vec<Event> {
    let all = Api::<Event>::namespaced(client.clone(), "default").list(&Default::default()).await.unwrap().items;
    all.into_iter().filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(node)).collect()
}

/// Cloud calls the CCM made to look instances up (its role is admin; the kubelets are users).
async fn ccm_lookups(cloud: &Client) -> usize {
    let audit = cloud.audit(&AuditQuery { limit: Some(10_000), ..Default::default() }).await.unwrap().items;
    audit
        .iter()
        .filter(|e| e.role == "admin" && (e.operation == "GetInstance" || e.operation == "ListInstances"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_are_initialized_and_follow_their_instances() {
    if Binaries::for_tests("CCM node controllers test").is_none() {
        return;
    }
    let cp = ControlPlane::builder()
        .node_monitor_grace_period(Duration::from_secs(8))
        .node_monitor_period(Duration::from_secs(1))
        .start()
        .await
        .unwrap();
    let admin_kc = cp.admin_kubeconfig().to_path_buf();
    // The manifests pass the apiserver's own validation, then the RBAC is applied for real.
    kubectl(&admin_kc, &["apply", "--dry-run=server", "-f", repo().join("ccm/deploy").to_str().unwrap()]);
    kubectl(&admin_kc, &["apply", "-f", repo().join("ccm/deploy/rbac.yaml").to_str().unwrap()]);
    let sa_kc = cp
        .service_account_kubeconfig("kube-system", "cloud-controller-manager", Duration::from_secs(3600))
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let timings = Timings {
        stop_delay: Duration::from_millis(200),
        terminate_delay: Duration::from_millis(200),
        ..Timings::instant()
    };
    let server = Server::start(
        "127.0.0.1:0",
        &DbLocation::File(dir.path().join("fc.db")),
        Config { timings, ..Config::default() },
        Tokens { user: USER.into(), admin: ADMIN.into() },
    )
    .await
    .unwrap();
    let cloud = Client::new(&server.url(), USER).unwrap();
    let cloud_admin = Client::new(&server.url(), ADMIN).unwrap();
    let opts = Options {
        poll: Duration::from_millis(200),
        lease_renew: Duration::from_secs(2),
        status_every: Duration::from_secs(5),
        ..Options::default()
    };
    let _kubelets = SimulatedKubelets::start(cp.client(), cloud.clone(), opts).await.unwrap();

    let cloud_config = dir.path().join("cloud-config.yaml");
    std::fs::write(&cloud_config, format!("endpoint: {}\ntoken: {ADMIN}\nregion: local-1\n", server.url())).unwrap();
    let log = std::fs::File::create(dir.path().join("ccm.log")).unwrap();
    let _ccm = tokio::process::Command::new(env!("CARGO_BIN_EXE_fakecloud-ccm"))
        .args(["--cloud-provider", "fakecloud", "--node-monitor-period", "1s", "--kubeconfig"])
        .arg(&sa_kc)
        .arg("--cloud-config")
        .arg(&cloud_config)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Nodes join a cluster whose CCM is already running.
    let ccm_log = dir.path().join("ccm.log");
    until(Duration::from_secs(20), "the CCM to start", async || {
        std::fs::read_to_string(&ccm_log).ok().filter(|l| l.contains("starting")).map(|_| ())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let client = cp.client();
    let nodes = Api::<Node>::all(client.clone());
    let create = |name: &str, zone: &str| {
        let (c, req) =
            (cloud.clone(), CreateInstanceRequest { name: name.into(), zone: Some(zone.into()), ..Default::default() });
        async move { c.create_instance(&req, None).await.unwrap() }
    };
    let initialized = |name: &'static str| {
        let nodes = nodes.clone();
        async move || {
            let n = nodes.get_opt(name).await.unwrap()?;
            (!taint_keys(&n).iter().any(|k| k == "node.cloudprovider.kubernetes.io/uninitialized")
                && n.spec.as_ref()?.provider_id.is_some())
            .then_some(n)
        }
    };

    // 1. Init: providerID, the upstream label set, addresses in order, taint gone, Synced; one lookup per node.
    let a: Instance = create("node-a", "local-1b").await;
    let c: Instance = create("node-c", "local-1c").await;
    let na = until(Duration::from_secs(30), "node-a initialized", initialized("node-a")).await;
    until(Duration::from_secs(30), "node-c initialized", initialized("node-c")).await;
    assert_eq!(na.spec.as_ref().unwrap().provider_id.as_deref(), Some(a.provider_id.as_str()));
    let labels: BTreeMap<String, String> = na.metadata.labels.clone().unwrap();
    for (k, v) in [
        ("node.kubernetes.io/instance-type", "fc.small"),
        ("beta.kubernetes.io/instance-type", "fc.small"),
        ("topology.kubernetes.io/zone", "local-1b"),
        ("failure-domain.beta.kubernetes.io/zone", "local-1b"),
        ("topology.kubernetes.io/region", "local-1"),
        ("failure-domain.beta.kubernetes.io/region", "local-1"),
    ] {
        assert_eq!(labels.get(k).map(String::as_str), Some(v), "label {k}");
    }
    let addrs: Vec<(String, String)> = na
        .status
        .as_ref()
        .unwrap()
        .addresses
        .as_ref()
        .unwrap()
        .iter()
        .map(|a| (a.type_.clone(), a.address.clone()))
        .collect();
    assert_eq!(
        addrs,
        [("InternalIP".to_string(), a.private_ip.to_string()), ("Hostname".to_string(), "node-a".to_string())]
    );
    let synced = until(Duration::from_secs(10), "the Synced event", async || {
        let ev = events_for(&client, "node-a").await;
        ev.into_iter().find(|e| e.reason.as_deref() == Some("Synced"))
    })
    .await;
    assert_eq!(synced.note.as_deref(), Some("Node synced successfully"));
    assert_eq!(synced.reporting_controller.as_deref(), Some("cloud-node-controller"));
    let lookups = ccm_lookups(&cloud_admin).await;
    if lookups != 2 {
        let audit = cloud_admin.audit(&AuditQuery { limit: Some(10_000), ..Default::default() }).await.unwrap().items;
        for e in audit.iter().filter(|e| e.role == "admin") {
            eprintln!("{} {} {} {:?} {}", e.time, e.operation, e.path, e.resource_id, e.status);
        }
        eprintln!("{}", std::fs::read_to_string(dir.path().join("ccm.log")).unwrap_or_default());
    }
    assert_eq!(lookups, 2, "exactly one metadata call per node initialization");

    // 2. An instance missing at init: the node stays tainted and is retried until the instance appears.
    let ghost: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "ghost"},
        "spec": {"taints": [{"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}]}
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &ghost).await.unwrap();
    // Ready, as a node whose kubelet runs: the lifecycle controller leaves Ready nodes alone.
    let ready = serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "up"}]}});
    nodes.patch_status("ghost", &kube::api::PatchParams::default(), &kube::api::Patch::Strategic(ready)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        taint_keys(&nodes.get("ghost").await.unwrap()).iter().any(|k| k.ends_with("/uninitialized")),
        "still tainted"
    );
    let g = create("ghost", "local-1a").await;
    let ng = until(Duration::from_secs(30), "ghost initialized once its instance exists", initialized("ghost")).await;
    assert_eq!(ng.spec.unwrap().provider_id.as_deref(), Some(g.provider_id.as_str()));

    // 3. A terminated instance: the node goes NotReady, then is deleted with a DeletingNode event.
    cloud.terminate_instance(&a.id).await.unwrap();
    until(Duration::from_secs(40), "node-a deleted", async || {
        nodes.get_opt("node-a").await.unwrap().is_none().then_some(())
    })
    .await;
    let deleting = events_for(&client, "node-a")
        .await
        .into_iter()
        .find(|e| e.reason.as_deref() == Some("DeletingNode"))
        .expect("a DeletingNode event");
    assert_eq!(deleting.note.as_deref(), Some("Deleting node node-a because it does not exist in the cloud provider"));

    // 4. A stopped instance: shutdown taint while NotReady, removed once Ready again.
    cloud.stop_instance(&c.id).await.unwrap();
    until(Duration::from_secs(40), "node-c shutdown taint", async || {
        taint_keys(&nodes.get("node-c").await.unwrap())
            .iter()
            .any(|k| k == "node.cloudprovider.kubernetes.io/shutdown")
            .then_some(())
    })
    .await;
    cloud.start_instance(&c.id).await.unwrap();
    until(Duration::from_secs(40), "node-c's shutdown taint removed", async || {
        (!taint_keys(&nodes.get("node-c").await.unwrap())
            .iter()
            .any(|k| k == "node.cloudprovider.kubernetes.io/shutdown"))
        .then_some(())
    })
    .await;
    drop(server);
}

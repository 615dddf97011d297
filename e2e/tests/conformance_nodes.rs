//! The cloud-node and cloud-node-lifecycle controllers as upstream's, on the real control plane and emulator,
//! with one CCM process run as the deploy manifests run it (leader election on, HTTPS serving), authenticated
//! as the manifests' ServiceAccount. Also: the manifests pass a server-side dry run, and the ServiceAccount has
//! what the controllers need and not more.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fakecloud_api::{CreateInstanceRequest, Instance};
use fakecloud_e2e::{Cluster, SHUTDOWN_TAINT, UNINITIALIZED_TAINT, repo, taint_keys, until};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");
const METADATA_CALLS: [&str; 2] = ["GetInstance", "ListInstances"];

fn addresses(n: &Node) -> Vec<(String, String)> {
    let list = n.status.as_ref().and_then(|s| s.addresses.clone()).unwrap_or_default();
    list.into_iter().map(|a| (a.type_, a.address)).collect()
}

fn initialized(n: &Node) -> bool {
    !taint_keys(n).iter().any(|k| k == UNINITIALIZED_TAINT) && n.spec.as_ref().is_some_and(|s| s.provider_id.is_some())
}

async fn wait_initialized(cluster: &Cluster, name: &str, timeout: Duration) -> Node {
    until(timeout, &format!("{name} initialized"), async || cluster.node(name).await.filter(initialized)).await
}

/// A kubelet's heartbeat for a Node no simulated kubelet owns yet: Ready, every 2 s, so the controller
/// manager does not mark it NotReady (and the lifecycle controller delete it) however slow the test runs.
fn heartbeat(nodes: Api<Node>, name: &'static str) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            let status = serde_json::json!({"status": {
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "up",
                                "lastHeartbeatTime": now, "lastTransitionTime": now}],
                "addresses": [{"type": "Hostname", "address": "ghost.kubelet"}, {"type": "ExternalIP", "address": "198.51.100.7"}],
            }});
            let _ = nodes.patch_status(name, &PatchParams::default(), &Patch::Strategic(status)).await;
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_are_initialized_and_follow_their_instances() {
    let Some(cluster) = Cluster::start("CCM node controllers e2e test").await else {
        return;
    };
    // The shipped manifests pass the apiserver's validation and admission.
    let deploy = repo().join("ccm/deploy");
    cluster.kubectl_ok(&["apply", "--dry-run=server", "-f", &deploy.to_string_lossy()]);
    // Least privilege: what the controllers (and the next ones) do, and nothing else.
    let sa = "--as=system:serviceaccount:kube-system:cloud-controller-manager";
    for (verb, resource, subresource, allowed) in [
        ("update", "nodes", "", true),
        ("patch", "nodes", "", true),
        ("delete", "nodes", "", true),
        ("watch", "nodes", "", true),
        ("patch", "nodes", "status", true),
        ("patch", "services", "status", true),
        ("create", "events", "", true),
        ("create", "nodes", "", false),
        ("update", "nodes", "status", false),
        ("delete", "services", "", false),
        ("get", "secrets", "", false),
        ("list", "pods", "", false),
    ] {
        let (ok, out) =
            cluster.kubectl(&["auth", "can-i", verb, resource, &format!("--subresource={subresource}"), sa]);
        assert_eq!(ok, allowed, "can-i {verb} {resource}/{subresource}: {out}");
    }
    for (verb, lease, allowed) in [
        ("update", "leases/cloud-controller-manager", true),
        ("update", "leases/kube-controller-manager", false),
        ("create", "leases", true),
    ] {
        let (ok, out) = cluster.kubectl(&["auth", "can-i", verb, lease, "-n", "kube-system", sa]);
        assert_eq!(ok, allowed, "can-i {verb} {lease} in kube-system: {out}");
    }

    let ccm = cluster.ccm(CCM, &[]);
    ccm.wait_log("starting controllers", Duration::from_secs(30)).await;
    let nodes = cluster.nodes();
    let create = |name: &str, zone: &str| {
        let req = CreateInstanceRequest { name: name.into(), zone: Some(zone.into()), ..Default::default() };
        let cloud = cluster.cloud.clone();
        async move { cloud.create_instance(&req, None).await.unwrap() }
    };

    // 1. New nodes: providerID, exactly the upstream label set, addresses in order, taint gone, Synced, and
    //    exactly one metadata call each.
    let started = Instant::now();
    let a: Instance = create("node-a", "local-1b").await;
    let c: Instance = create("node-c", "local-1c").await;
    let na = wait_initialized(&cluster, "node-a", Duration::from_secs(30)).await;
    wait_initialized(&cluster, "node-c", Duration::from_secs(30)).await;
    eprintln!("2 nodes registered and initialized {:.1?} after their instances were created", started.elapsed());
    assert_eq!(na.spec.as_ref().unwrap().provider_id.as_deref(), Some(a.provider_id.as_str()));
    // (The controller manager may add its own not-ready taint for a moment; the CCM's is what matters.)
    assert!(!taint_keys(&na).iter().any(|k| k == UNINITIALIZED_TAINT));
    let labels: BTreeMap<String, String> = na.metadata.labels.clone().unwrap();
    let expected: BTreeMap<String, String> = [
        // The kubelet's own.
        ("kubernetes.io/hostname", "node-a"),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("beta.kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", "amd64"),
        // The CCM's: GA and the deprecated beta ones.
        ("node.kubernetes.io/instance-type", "fc.small"),
        ("beta.kubernetes.io/instance-type", "fc.small"),
        ("topology.kubernetes.io/zone", "local-1b"),
        ("failure-domain.beta.kubernetes.io/zone", "local-1b"),
        ("topology.kubernetes.io/region", "local-1"),
        ("failure-domain.beta.kubernetes.io/region", "local-1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(labels, expected);
    // The provided node IP first (the kubelet's annotation), then the Hostname.
    let want =
        vec![("InternalIP".to_string(), a.private_ip.to_string()), ("Hostname".to_string(), "node-a".to_string())];
    assert_eq!(addresses(&na), want);
    let synced = until(Duration::from_secs(10), "the Synced event", async || {
        cluster.events_for("node-a").await.into_iter().find(|e| e.reason.as_deref() == Some("Synced"))
    })
    .await;
    assert_eq!(synced.message.as_deref(), Some("Node synced successfully"));
    assert_eq!(synced.type_.as_deref(), Some("Normal"));
    assert_eq!(synced.source.as_ref().and_then(|s| s.component.as_deref()), Some("cloud-node-controller"));
    assert_eq!(synced.involved_object.kind.as_deref(), Some("Node"));
    assert_eq!(synced.involved_object.uid, na.metadata.uid);
    let calls = cluster.ccm_calls(&METADATA_CALLS).await;
    assert_eq!(calls.len(), 2, "exactly one metadata call per node initialization: {calls:#?}\n{}", ccm.log());

    // Served: the health checks upstream has, and the metrics.
    let (status, body) = ccm.get("/healthz?verbose").unwrap();
    assert_eq!(status, 200, "{body}");
    for check in ["leaderElection", "cloud-node-controller", "cloud-node-lifecycle-controller"] {
        assert!(body.contains(&format!("[+]{check} ok\n")), "{check} in {body}");
    }
    assert_eq!(ccm.get("/healthz"), Some((200, "ok".into())));
    assert_eq!(ccm.get("/healthz/leaderElection").map(|r| r.0), Some(404));
    for (series, at_least) in [
        ("workqueue_adds_total{name=\"Nodes\"}", 2.0),
        ("workqueue_work_duration_seconds_count{name=\"Nodes\"}", 2.0),
        ("node_controller_initial_node_sync_delay_seconds_count", 2.0),
        ("node_controller_cloud_provider_taint_removal_delay_seconds_count", 2.0),
        ("cloudprovider_fakecloud_api_request_duration_seconds_count{request=\"ListInstances\"}", 2.0),
        ("running_managed_controllers{manager=\"cloud-controller-manager\",name=\"cloud-node\"}", 1.0),
        ("running_managed_controllers{manager=\"cloud-controller-manager\",name=\"cloud-node-lifecycle\"}", 1.0),
        ("leader_election_master_status{name=\"cloud-controller-manager\"}", 1.0),
    ] {
        let v = ccm.metric(series).unwrap_or_else(|| panic!("{series} not served"));
        assert!(v >= at_least, "{series} = {v}, expected at least {at_least}");
    }

    // 2. An instance missing at init: the node keeps the taint, the CCM retries with backoff (several tries,
    //    not a hot loop), and initializes it once the instance appears. Ready, so the lifecycle controller
    //    leaves it be; its stale kubelet addresses (no provided IP) are replaced by the cloud's.
    let before = cluster.ccm_calls(&METADATA_CALLS).await.len();
    let ghost: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "ghost"},
        "spec": {"taints": [{"key": UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}]},
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &ghost).await.unwrap();
    let beating = heartbeat(nodes.clone(), "ghost");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let tries = cluster.ccm_calls(&METADATA_CALLS).await.len() - before;
    assert!(taint_keys(&nodes.get("ghost").await.unwrap()).iter().any(|k| k == UNINITIALIZED_TAINT), "still tainted");
    // 5 ms doubling: about 10 tries in 3 s (a hot loop would make hundreds).
    assert!((3..=25).contains(&tries), "{tries} lookups of the missing instance in 3 s");
    let g = create("ghost", "local-1a").await;
    let ng = wait_initialized(&cluster, "ghost", Duration::from_secs(60)).await;
    beating.abort();
    assert_eq!(ng.spec.as_ref().unwrap().provider_id.as_deref(), Some(g.provider_id.as_str()));
    let ng = until(Duration::from_secs(10), "ghost's addresses", async || {
        cluster.node("ghost").await.filter(|n| addresses(n).first().is_some_and(|a| a.0 == "InternalIP"))
    })
    .await;
    assert_eq!(
        addresses(&ng),
        [("InternalIP".to_string(), g.private_ip.to_string()), ("Hostname".to_string(), "ghost".to_string())],
        "the cloud's list replaces the kubelet's (its own Hostname wins, the stale ExternalIP goes)"
    );

    // 3. A terminated instance: the node goes NotReady, then is deleted with a DeletingNode event.
    cluster.cloud.terminate_instance(&a.id).await.unwrap();
    let t = Instant::now();
    until(Duration::from_secs(40), "node-a deleted", async || cluster.node_gone("node-a").await.then_some(())).await;
    eprintln!("node-a deleted {:.1?} after its instance was terminated", t.elapsed());
    // Events are written in the background, as client-go's broadcaster does.
    let deleting = until(Duration::from_secs(10), "the DeletingNode event", async || {
        cluster.events_for("node-a").await.into_iter().find(|e| e.reason.as_deref() == Some("DeletingNode"))
    })
    .await;
    assert_eq!(
        deleting.message.as_deref(),
        Some("Deleting node node-a because it does not exist in the cloud provider")
    );
    assert_eq!(deleting.source.as_ref().and_then(|s| s.component.as_deref()), Some("cloud-node-lifecycle-controller"));

    // 4. A stopped instance: the shutdown taint while NotReady, removed once Ready again.
    let has_shutdown_taint = |n: &Node| {
        n.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some_and(|ts| {
            ts.iter().any(|t| t.key == SHUTDOWN_TAINT && t.effect == "NoSchedule" && t.value.is_none())
        })
    };
    cluster.cloud.stop_instance(&c.id).await.unwrap();
    until(Duration::from_secs(40), "node-c's shutdown taint", async || {
        cluster.node("node-c").await.filter(has_shutdown_taint).map(|_| ())
    })
    .await;
    assert!(nodes.get_opt("node-c").await.unwrap().is_some(), "a stopped instance's node is not deleted");
    cluster.cloud.start_instance(&c.id).await.unwrap();
    until(Duration::from_secs(40), "node-c's shutdown taint removed", async || {
        cluster.node("node-c").await.filter(|n| !has_shutdown_taint(n)).map(|_| ())
    })
    .await;
    assert_eq!(ccm.get("/healthz").map(|r| r.0), Some(200));
}

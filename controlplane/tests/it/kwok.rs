//! kwok (sigs.k8s.io/kwok, built by scripts/build-kwok.sh) against the real control plane: what issue #27's fleet
//! needs of it. A Node registered with kwok's annotation turns Ready; its Lease is renewed at a kubelet's cadence
//! (every quarter of the lease's 40 s, not faster); a pod bound to it runs with an IP from the Node's pod CIDR;
//! with its Lease held by another holder kwok falls silent (no renewal), which is how a stopped machine must
//! look, and with the Lease gone it takes the Node up again.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use fakecloud_controlplane::{ControlPlane, kwok_for_tests};
use ipnet::IpNet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};

use crate::common::HANG;

const ANNOTATION: &str = "kwok.x-k8s.io/node";
const LEASE_SECONDS: u64 = 40;

fn node(name: &str) -> Node {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "annotations": {ANNOTATION: "fake"}, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                   "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
    }))
    .unwrap()
}

fn pod(name: &str, node: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.invalid/none:1"}]},
    }))
    .unwrap()
}

/// Poll `f` until it returns `Some`, failing after [`HANG`] with `what` and the end of kwok's log.
async fn until<T>(log: &Path, what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if start.elapsed() > HANG {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(30).collect();
            panic!("timed out after {HANG:?} waiting for {what}; kwok's log ends:\n{}", tail.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn renewed(leases: &Api<Lease>, name: &str) -> Option<k8s_openapi::jiff::Timestamp> {
    leases.get_opt(name).await.ok()??.spec?.renew_time.map(|t| t.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kwok_keeps_an_annotated_node_as_a_kubelet_would_and_falls_silent_when_its_lease_is_taken() {
    let Some(kwok) = kwok_for_tests("kwok test") else { return };
    let cp = ControlPlane::builder().start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("kwok.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut command = tokio::process::Command::new(&kwok.binary);
    for stage in &kwok.stages {
        command.arg("--config").arg(stage);
    }
    let _kwok = command
        .arg("--kubeconfig")
        .arg(cp.admin_kubeconfig())
        .arg(format!("--manage-nodes-with-annotation-selector={ANNOTATION}=fake"))
        .arg(format!("--node-lease-duration-seconds={LEASE_SECONDS}"))
        .arg("--server-address=127.0.0.1:0")
        // Its default config file is under $HOME: a user's must not change what this test sees.
        .env("HOME", dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let nodes = Api::<Node>::all(cp.client());
    let leases = Api::<Lease>::namespaced(cp.client(), "kube-node-lease");
    let pods = Api::<Pod>::namespaced(cp.client(), "default");
    nodes.create(&PostParams::default(), &node("kwok-0")).await.unwrap();

    let cidr: IpNet = until(&log_path, "kwok-0 Ready with a pod CIDR", async || {
        let n = nodes.get("kwok-0").await.ok()?;
        let ready = n.status.as_ref()?.conditions.as_ref()?.iter().any(|c| c.type_ == "Ready" && c.status == "True");
        let cidr = n.spec?.pod_cidr?;
        ready.then(|| cidr.parse().unwrap())
    })
    .await;

    // The Lease at a kubelet's cadence: renewed, and not again within a quarter of its duration (less a
    // second of slack for where in the interval the first look fell).
    let first = until(&log_path, "kwok-0's Lease", async || renewed(&leases, "kwok-0").await).await;
    let second =
        until(&log_path, "kwok-0's Lease renewed", async || renewed(&leases, "kwok-0").await.filter(|t| *t > first))
            .await;
    let interval = second.duration_since(first).as_secs_f64();
    assert!(interval >= (LEASE_SECONDS / 4) as f64 - 1.0, "renewed {interval} s after the last: faster than a kubelet");

    // Its pods run, with IPs from the Node's pod CIDR.
    pods.create(&PostParams::default(), &pod("p", "kwok-0")).await.unwrap();
    let ip = until(&log_path, "pod p Running with an IP", async || {
        let status = pods.get("p").await.ok()?.status?;
        (status.phase.as_deref() == Some("Running")).then_some(status.pod_ip?)
    })
    .await;
    assert!(cidr.contains(&ip.parse::<std::net::IpAddr>().unwrap()), "pod IP {ip} outside the Node's {cidr}");

    // A machine that stops must fall silent: kwok renews only a lease it holds (or one expired), so the lease
    // held by another holder for a long time stops it; the Node is left to the node lifecycle controller, as a
    // dead kubelet's is. (kwok lets a Node go only when it is deleted: dropping the annotation does not.)
    let silenced = serde_json::json!({"spec": {"holderIdentity": "fakecloud: machine stopped", "leaseDurationSeconds": 31_536_000}});
    leases.patch("kwok-0", &PatchParams::default(), &Patch::Merge(&silenced)).await.unwrap();
    let last = renewed(&leases, "kwok-0").await.unwrap();
    tokio::time::sleep(Duration::from_secs(LEASE_SECONDS / 4 * 2)).await;
    let lease = leases.get("kwok-0").await.unwrap().spec.unwrap();
    assert_eq!(lease.renew_time.map(|t| t.0), Some(last), "kwok renewed a lease it does not hold");
    assert_eq!(lease.holder_identity.as_deref(), Some("fakecloud: machine stopped"));

    // The machine back: the lease deleted, kwok makes a new one and renews it again.
    leases.delete("kwok-0", &Default::default()).await.unwrap();
    let back = until(&log_path, "kwok-0's Lease made again", async || renewed(&leases, "kwok-0").await).await;
    until(&log_path, "kwok-0's new Lease renewed", async || renewed(&leases, "kwok-0").await.filter(|t| *t > back))
        .await;
}

//! Simulated kubelets (with kwok, built by `make kwok`) against the real control plane and a real (in-process)
//! emulator: Nodes appear as a kubelet with `--cloud-provider=external` registers them, get a pod CIDR from the
//! controller manager, have their Leases renewed at a kubelet's cadence and their pods run, turn NotReady when
//! their instance dies (the Lease taken from kwok, its last renewal kept), come back when it runs again, and
//! stay Ready while only the cloud's API is down.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fakecloud_api::{Client, CreateInstanceRequest, Instance, OutageScope, Service, StartOutageRequest};
use fakecloud_controlplane::kubelets::{
    LEASE_NAMESPACE, Options, PROVIDED_NODE_IP, SILENCING_HOLDER, SimulatedKubelets, UNINITIALIZED_TAINT,
};
use fakecloud_controlplane::{Binaries, ControlPlane, kwok_for_tests};
use fakecloud_emulator::auth::Tokens;
use fakecloud_emulator::config::{Config, DbLocation, Timings};
use fakecloud_emulator::server::Server;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, PostParams};

use crate::common::HANG;

const TOKEN: &str = "kubelet-test-token-0123456789";

async fn emulator(dir: &std::path::Path) -> (Server, Client) {
    let timings = Timings {
        stop_delay: Duration::from_millis(200),
        terminate_delay: Duration::from_millis(200),
        ..Timings::instant()
    };
    let cfg = Config { timings, ..Config::default() };
    let tokens = Tokens { user: TOKEN.into(), admin: TOKEN.into() };
    let server = Server::start("127.0.0.1:0", &DbLocation::File(dir.join("fc.db")), cfg, tokens).await.unwrap();
    let client = Client::new(&server.url(), TOKEN).unwrap();
    (server, client)
}

/// Leases of 8 s, renewed every 2 s, for the controller manager's 8 s grace period below.
fn fast() -> Options {
    Options { poll: Duration::from_millis(200), lease_seconds: 8, not_ready_for: Duration::ZERO, ..Options::default() }
}

/// The control plane and kwok, or `None` (skip, saying why) outside CI when either is not built.
fn built(test: &str) -> bool {
    Binaries::for_tests(test).is_some() && kwok_for_tests(test).is_some()
}

async fn renewed(leases: &Api<Lease>, name: &str) -> Option<k8s_openapi::jiff::Timestamp> {
    leases.get_opt(name).await.ok()??.spec?.renew_time.map(|t| t.0)
}

/// Poll `f` until it returns `Some`, failing after [`HANG`] with `what`.
async fn eventually<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(start.elapsed() < HANG, "timed out after {HANG:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn ready(n: &Node) -> Option<String> {
    n.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready").map(|c| c.status.clone())
}

fn has_taint(n: &Node, key: &str) -> bool {
    n.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some_and(|t| t.iter().any(|t| t.key == key))
}

/// Wait until `check` holds for the nodes, or fail with what was last seen.
async fn until(
    nodes: &Api<Node>,
    timeout: Duration,
    what: &str,
    check: impl Fn(&BTreeMap<String, Node>) -> bool,
) -> BTreeMap<String, Node> {
    let start = Instant::now();
    loop {
        let all: BTreeMap<String, Node> = nodes
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|n| (n.metadata.name.clone().unwrap(), n))
            .collect();
        if check(&all) {
            return all;
        }
        if start.elapsed() > timeout {
            let seen: Vec<(String, Option<String>)> = all.iter().map(|(k, n)| (k.clone(), ready(n))).collect();
            panic!("timed out after {timeout:?} waiting for {what}; nodes and Ready: {seen:?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A binary-suffixed memory quantity in MiB (the API server writes 4096Mi back as 4Gi).
fn mib(q: &Quantity) -> u64 {
    let (digits, unit): (String, String) = q.0.chars().partition(char::is_ascii_digit);
    let n: u64 = digits.parse().unwrap();
    match unit.as_str() {
        "Mi" => n,
        "Gi" => n * 1024,
        "Ti" => n * 1024 * 1024,
        other => panic!("unexpected memory unit {other:?} in {q:?}"),
    }
}

/// Assert that `check` holds for the nodes throughout `period`.
async fn stays(nodes: &Api<Node>, period: Duration, what: &str, check: impl Fn(&BTreeMap<String, Node>) -> bool) {
    let start = Instant::now();
    while start.elapsed() < period {
        let all = until(nodes, HANG, "a Node listing", |_| true).await;
        if !check(&all) {
            let seen: Vec<(String, Option<String>)> = all.iter().map(|(k, n)| (k.clone(), ready(n))).collect();
            panic!("after {:?}, no longer {what}; nodes and Ready: {seen:?}", start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn create(c: &Client, name: &str, zone: &str) -> Instance {
    c.create_instance(&CreateInstanceRequest { name: name.into(), zone: Some(zone.into()), ..Default::default() }, None)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_follow_their_instances() {
    if !built("simulated kubelets test") {
        return;
    }
    let cp = ControlPlane::builder()
        .node_monitor_grace_period(Duration::from_secs(8))
        .node_monitor_period(Duration::from_secs(1))
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (_server, cloud) = emulator(dir.path()).await;
    let _kubelets = SimulatedKubelets::start(cp.admin_kubeconfig(), cloud.clone(), fast()).await.unwrap();
    let a = create(&cloud, "node-a", "local-1a").await;
    let b = create(&cloud, "node-b", "local-1b").await;
    let c = create(&cloud, "node-c", "local-1c").await;
    let nodes = Api::<Node>::all(cp.client());
    let leases = Api::<Lease>::namespaced(cp.client(), LEASE_NAMESPACE);
    let region = cloud.region().await.unwrap();

    let all = until(&nodes, HANG, "3 Ready nodes with pod CIDRs", |all| {
        all.len() == 3
            && all
                .values()
                .all(|n| ready(n).as_deref() == Some("True") && n.spec.as_ref().is_some_and(|s| s.pod_cidr.is_some()))
    })
    .await;
    for inst in [&a, &b, &c] {
        let n = &all[&inst.name];
        assert!(has_taint(n, UNINITIALIZED_TAINT), "{} registers with the uninitialized taint", inst.name);
        let spec = n.spec.as_ref().unwrap();
        assert_eq!(spec.provider_id, None, "the kubelet sets no providerID; the CCM does");
        assert!(spec.pod_cidr.as_deref().unwrap().starts_with("10.244."));
        assert_eq!(n.metadata.annotations.as_ref().unwrap()[PROVIDED_NODE_IP], inst.private_ip.to_string());
        let addrs: Vec<(String, String)> = n
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
            [("InternalIP".to_string(), inst.private_ip.to_string()), ("Hostname".to_string(), inst.name.clone())]
        );
        let labels = n.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["kubernetes.io/hostname"], inst.name);
        assert!(!labels.contains_key("topology.kubernetes.io/zone"), "zone labels are the CCM's job");
        assert_eq!(labels["kubernetes.io/os"], "linux");
        assert_eq!(labels["kubernetes.io/arch"], "amd64");
        let status = n.status.as_ref().unwrap();
        let info = status.node_info.as_ref().unwrap();
        assert_eq!(info.kubelet_version, cp.version());
        // Capacity from the region's instance-type catalog.
        let shape = region.instance_types.iter().find(|t| t.name == inst.instance_type).unwrap();
        let capacity = status.capacity.as_ref().unwrap();
        assert_eq!(capacity["cpu"], Quantity(shape.vcpus.to_string()));
        assert_eq!(mib(&capacity["memory"]), u64::from(shape.memory_mib), "{:?}", capacity["memory"]);
        assert_eq!(capacity["pods"], Quantity("110".into()));
        assert_eq!(status.allocatable.as_ref(), Some(capacity));
        let conditions: BTreeMap<&str, (&str, Option<&str>)> = status
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .map(|c| (c.type_.as_str(), (c.status.as_str(), c.reason.as_deref())))
            .collect();
        assert_eq!(conditions["Ready"], ("True", Some("KubeletReady")));
        for pressure in ["MemoryPressure", "DiskPressure", "PIDPressure"] {
            assert_eq!(conditions[pressure].0, "False", "{pressure}");
        }
        // The Lease, kept by kwok: the configured duration, owned by the Node so that it goes with it.
        let lease = eventually("the Lease", async || leases.get_opt(&inst.name).await.unwrap()).await;
        let spec = lease.spec.as_ref().unwrap();
        assert_eq!(spec.lease_duration_seconds, Some(8));
        assert!(!spec.holder_identity.as_deref().unwrap_or_default().starts_with(SILENCING_HOLDER));
        assert_eq!(lease.metadata.owner_references.as_ref().unwrap()[0].uid, n.metadata.uid.clone().unwrap());
    }

    // Renewed at a kubelet's cadence (a quarter of the duration, less a second's slack for where the first
    // look fell), not faster.
    let first = eventually("node-c's Lease renewed", async || renewed(&leases, "node-c").await).await;
    let second =
        eventually("node-c's Lease renewed again", async || renewed(&leases, "node-c").await.filter(|t| *t > first))
            .await;
    let interval = second.duration_since(first).as_secs_f64();
    assert!(interval >= 1.0, "renewed {interval} s after the last: faster than a kubelet");

    // A pod bound to a Node runs, with an IP from the Node's pod CIDR.
    let pods = Api::<Pod>::namespaced(cp.client(), "default");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p"},
        "spec": {"nodeName": "node-c", "containers": [{"name": "c", "image": "registry.invalid/none:1"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let ip = eventually("pod p Running with an IP", async || {
        let status = pods.get("p").await.ok()?.status?;
        (status.phase.as_deref() == Some("Running")).then_some(status.pod_ip?)
    })
    .await;
    let cidr: ipnet::IpNet = all["node-c"].spec.as_ref().unwrap().pod_cidr.as_deref().unwrap().parse().unwrap();
    assert!(cidr.contains(&ip.parse::<std::net::IpAddr>().unwrap()), "pod IP {ip} outside node-c's {cidr}");

    // a dies, b stops: both fall silent and the controller manager marks them unreachable; c is untouched.
    cloud.terminate_instance(&a.id).await.unwrap();
    cloud.stop_instance(&b.id).await.unwrap();
    until(&nodes, HANG, "a and b NotReady (unreachable), c Ready", |all| {
        ["node-a", "node-b"].iter().all(|n| {
            all.get(*n)
                .is_some_and(|n| ready(n).as_deref() != Some("True") && has_taint(n, "node.kubernetes.io/unreachable"))
        }) && all.get("node-c").is_some_and(|n| ready(n).as_deref() == Some("True"))
    })
    .await;
    // Silent as a dead kubelet: b's Lease taken from kwok and not renewed again.
    let lease = leases.get("node-b").await.unwrap().spec.unwrap();
    assert_eq!(lease.holder_identity.as_deref(), Some("fakecloud: machine not running"));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(renewed(&leases, "node-b").await, lease.renew_time.map(|t| t.0), "the silent Lease was renewed");

    // b runs again: its kubelet resumes and the node is Ready again; a stays down (and is not deleted by us).
    cloud.start_instance(&b.id).await.unwrap();
    let all = until(&nodes, HANG, "b Ready again", |all| {
        all.get("node-b")
            .is_some_and(|n| ready(n).as_deref() == Some("True") && !has_taint(n, "node.kubernetes.io/unreachable"))
    })
    .await;
    assert_ne!(ready(&all["node-a"]).as_deref(), Some("True"));
    assert_eq!(ready(&all["node-c"]).as_deref(), Some("True"));

    // A Node deleted while its instance runs is registered again, as a kubelet would.
    let old_uid = all["node-c"].metadata.uid.clone();
    nodes.delete("node-c", &Default::default()).await.unwrap();
    let all = until(&nodes, HANG, "node-c registered again", |all| {
        all.get("node-c").is_some_and(|n| {
            n.metadata.uid != old_uid && n.metadata.deletion_timestamp.is_none() && ready(n).as_deref() == Some("True")
        })
    })
    .await;
    assert!(has_taint(&all["node-c"], UNINITIALIZED_TAINT), "a re-registered node waits for the CCM again");

    // The cloud's API down is not the machines down: for longer than the grace period the instances cannot
    // be listed, and the running nodes stay Ready on what was last seen.
    cloud
        .start_outage(&StartOutageRequest {
            scope: OutageScope::Service,
            service: Some(Service::Compute),
            zone: None,
            duration_seconds: Some(12.0),
        })
        .await
        .unwrap();
    assert!(cloud.list_instances(&Default::default()).await.is_err(), "the outage refuses listings");
    stays(&nodes, Duration::from_secs(12), "node-b and node-c Ready during a compute API outage", |all| {
        ["node-b", "node-c"].iter().all(|n| all.get(*n).and_then(ready).as_deref() == Some("True"))
    })
    .await;
}

/// 200 nodes in CI; `FAKECLOUD_SCALE_NODES=1000` for the measurement in BENCHMARKS.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_nodes_stay_ready() {
    let count: usize = std::env::var("FAKECLOUD_SCALE_NODES").ok().and_then(|v| v.parse().ok()).unwrap_or(200);
    if !built("simulated kubelets scale test") {
        return;
    }
    let cp = ControlPlane::builder()
        .node_monitor_grace_period(Duration::from_secs(8))
        .node_monitor_period(Duration::from_secs(1))
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (_server, cloud) = emulator(dir.path()).await;
    let _kubelets = SimulatedKubelets::start(cp.admin_kubeconfig(), cloud.clone(), fast()).await.unwrap();
    let zones = ["local-1a", "local-1b", "local-1c"];
    cloud.set_quota(fakecloud_api::QuotaName::Instances, count.max(1000) as u32).await.unwrap();
    for n in 0..count {
        create(&cloud, &format!("n{n:04}"), zones[n % 3]).await;
    }
    let nodes = Api::<Node>::all(cp.client());
    let all_ready =
        |all: &BTreeMap<String, Node>| all.len() == count && all.values().all(|n| ready(n).as_deref() == Some("True"));
    let started = Instant::now();
    until(&nodes, HANG, "all nodes Ready", all_ready).await;
    eprintln!("{count} nodes registered and Ready in {:?}", started.elapsed());
    // Well past the 8 s grace period: the lease renewals keep every node Ready.
    tokio::time::sleep(Duration::from_secs(15)).await;
    until(&nodes, Duration::from_secs(5), "all nodes still Ready after 15 s", all_ready).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_limits_the_kubelets_to_their_own_machines() {
    if !built("simulated kubelets test") {
        return;
    }
    let cp = ControlPlane::builder().start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (_server, cloud) = emulator(dir.path()).await;
    let simulated = fakecloud_controlplane::kubelets::parse_taint("example.com/simulated:NoSchedule").unwrap();
    let opts = Options {
        instance_tag: Some("pool=simulated".into()),
        register_with_taints: vec![simulated.clone()],
        ..fast()
    };
    let _kubelets = SimulatedKubelets::start(cp.admin_kubeconfig(), cloud.clone(), opts).await.unwrap();
    // A machine with a real kubelet of its own (as a kind node adopted into the cloud), and a simulated one.
    create(&cloud, "real-1", "local-1a").await;
    let req = CreateInstanceRequest {
        name: "sim-1".into(),
        tags: [("pool".to_string(), "simulated".to_string())].into(),
        ..Default::default()
    };
    cloud.create_instance(&req, None).await.unwrap();
    let nodes = Api::<Node>::all(cp.client());
    let all = until(&nodes, HANG, "sim-1 registered", |all| all.contains_key("sim-1")).await;
    let taints = all["sim-1"].spec.as_ref().unwrap().taints.clone().unwrap();
    // (The controller manager may add its not-ready taint behind them for a moment.)
    let keys: Vec<&str> = taints.iter().map(|t| t.key.as_str()).collect();
    assert_eq!(keys[..2], [UNINITIALIZED_TAINT, "example.com/simulated"], "{keys:?}");
    stays(&nodes, Duration::from_secs(3), "without a Node for the untagged machine", |all| !all.contains_key("real-1"))
        .await;
}

/// A kwok that exits (here at once, as v0.8.0 does on a bad configuration) is reported with its status and the
/// end of its log, which the `kubelets` process acts on: it stops rather than run on with no Lease renewed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kwok_that_exits_is_reported_with_its_log() {
    if !built("simulated kubelets test") {
        return;
    }
    let cp = ControlPlane::builder().start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (_server, cloud) = emulator(dir.path()).await;
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(bin.join("pod-stages")).unwrap();
    std::fs::write(bin.join("pod-stages/pod.yaml"), "").unwrap();
    let kwok = bin.join("kwok");
    std::fs::write(&kwok, "#!/bin/sh\necho 'playStageParallelism must be greater than 0' >&2\nexit 3\n").unwrap();
    std::fs::set_permissions(&kwok, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let opts = Options { kwok: Some(kwok), ..fast() };
    let kubelets = SimulatedKubelets::start(cp.admin_kubeconfig(), cloud, opts).await.unwrap();
    let how = eventually("kwok's exit reported", async || kubelets.kwok_exited()).await;
    assert!(how.contains("exit status: 3") && how.contains("playStageParallelism must be greater than 0"), "{how}");
}

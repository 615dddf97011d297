//! `fakecloud adopt` against the real control plane and a real (in-process) emulator: Nodes without an
//! instance (kind nodes) become instances with their name, address and zone, and running it again changes
//! nothing.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use fakecloud_api::{Client, CreateInstanceRequest, InstanceState};
use fakecloud_cli::adopt::{ADOPTED_TAG, Outcome, adopt};
use fakecloud_controlplane::{Binaries, ControlPlane};
use fakecloud_emulator::auth::Tokens;
use fakecloud_emulator::config::{Config, DbLocation, Timings};
use fakecloud_emulator::server::Server;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};

const USER: &str = "adopt-test-user-token-0123456789";
const ADMIN: &str = "adopt-test-admin-token-0123456789";

/// A Node as kind's kubelet leaves it: addresses in the status, maybe a zone label.
async fn node(nodes: &Api<Node>, name: &str, internal_ips: &[&str], zone: Option<&str>) {
    let mut n: Node = serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    if let Some(z) = zone {
        n.metadata.labels = Some([("topology.kubernetes.io/zone".to_string(), z.to_string())].into());
    }
    nodes.create(&PostParams::default(), &n).await.unwrap();
    if !internal_ips.is_empty() {
        let mut addresses: Vec<serde_json::Value> =
            internal_ips.iter().map(|ip| serde_json::json!({"type": "InternalIP", "address": ip})).collect();
        addresses.push(serde_json::json!({"type": "Hostname", "address": name}));
        let status = serde_json::json!({"status": {"addresses": addresses}});
        nodes.patch_status(name, &PatchParams::default(), &Patch::Strategic(status)).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_without_instances_are_adopted_once() {
    if Binaries::for_tests("adopt test").is_none() {
        return;
    }
    let cp = ControlPlane::builder().start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let timings = Timings { terminate_delay: Duration::from_millis(100), ..Timings::instant() };
    let server = Server::start(
        "127.0.0.1:0",
        &DbLocation::File(dir.path().join("fc.db")),
        // The kind network the nodes below sit on, as `make kind-up` tells its emulator.
        Config {
            timings,
            adopt_networks: vec!["172.18.0.0/16".parse().unwrap(), "fc00:f853:ccd:e793::/64".parse().unwrap()],
            ..Config::default()
        },
        Tokens { user: USER.into(), admin: ADMIN.into() },
    )
    .await
    .unwrap();
    let cloud = Client::new(&server.url(), USER).unwrap();
    let zones: Vec<String> = cloud.region().await.unwrap().zones.into_iter().map(|z| z.name).collect();
    let existing = cloud
        .create_instance(&CreateInstanceRequest { name: "kind-worker".into(), ..Default::default() }, None)
        .await
        .unwrap();

    // Sorted by name, as adopt walks them: the index picks the round-robin zone of an unlabelled Node.
    let nodes = Api::<Node>::all(cp.client());
    node(&nodes, "kind-control-plane", &["172.18.0.2"], None).await; // 0
    node(&nodes, "kind-worker", &["172.18.0.3"], None).await; // 1: has an instance
    node(&nodes, "kind-worker2", &["172.18.0.4"], Some("local-1c")).await; // 2: an emulator zone
    node(&nodes, "kind-worker3", &["fc00:f853:ccd:e793::5", "172.18.0.5"], Some("us-east-1a")).await; // 3: dual-stack, a foreign zone
    node(&nodes, "kind-worker4", &["172.18.0.6"], None).await; // 4
    node(&nodes, "no-address", &[], None).await; // 5

    let done = adopt(cp.client(), &cloud).await.unwrap();
    let adopted = |name: &str| match &done[name] {
        Outcome::Adopted { addresses, zone, .. } => (addresses.clone(), zone.clone()),
        other => panic!("{name}: {other:?}"),
    };
    assert_eq!(done["kind-worker"], Outcome::AlreadyAnInstance);
    assert_eq!(done["no-address"], Outcome::NoAddress);
    assert_eq!(adopted("kind-control-plane"), ("172.18.0.2".into(), zones[0].clone()));
    assert_eq!(adopted("kind-worker2"), ("172.18.0.4".into(), "local-1c".into()), "the zone label is honoured");
    assert_eq!(
        adopted("kind-worker3"),
        ("172.18.0.5, fc00:f853:ccd:e793::5".into(), zones[3 % zones.len()].clone()),
        "IPv4 first, the IPv6 address beside it; unknown zone → round-robin"
    );
    assert_eq!(adopted("kind-worker4"), ("172.18.0.6".into(), zones[4 % zones.len()].clone()));

    let all = cloud.list_all_instances(&Default::default()).await.unwrap();
    assert_eq!(all.len(), 5, "one instance per adopted Node beside {}", existing.id);
    for name in ["kind-control-plane", "kind-worker2", "kind-worker3", "kind-worker4"] {
        let inst = all.iter().find(|i| i.name == name).unwrap();
        let addresses: Vec<String> = inst.addresses().map(|a| a.to_string()).collect();
        assert_eq!((addresses.join(", "), inst.zone.clone()), adopted(name), "{name}");
        assert_eq!(inst.tags[ADOPTED_TAG], "true");
    }
    assert!(!all.iter().find(|i| i.name == "kind-worker").unwrap().tags.contains_key(ADOPTED_TAG));

    // Again: nothing new.
    let again = adopt(cp.client(), &cloud).await.unwrap();
    assert!(again.values().all(|o| matches!(o, Outcome::AlreadyAnInstance | Outcome::NoAddress)), "{again:?}");
    assert_eq!(cloud.list_all_instances(&Default::default()).await.unwrap().len(), 5);

    // An adopted machine that was terminated since is not brought back by a rerun (same Node, same key).
    let cp_inst = all.iter().find(|i| i.name == "kind-control-plane").unwrap();
    cloud.terminate_instance(&cp_inst.id).await.unwrap();
    let terminating = Instant::now();
    while cloud.get_instance(&cp_inst.id).await.unwrap().state != InstanceState::Terminated {
        assert!(terminating.elapsed() < crate::common::HANG, "{} still not terminated", cp_inst.id);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let third = adopt(cp.client(), &cloud).await.unwrap();
    assert_eq!(third["kind-control-plane"], Outcome::InstanceGone { instance_id: cp_inst.id.clone() });
    let live = cloud.list_all_instances(&Default::default()).await.unwrap();
    assert_eq!(live.iter().filter(|i| i.state != InstanceState::Terminated).count(), 4);
}

//! `fakecloud adopt` against the real control plane: Nodes without an instance become instances.
#![allow(clippy::unwrap_used)]

mod common;

use common::Emu;
use fakecloud_controlplane::{Binaries, ControlPlane};
use fakecloud_emulator::cli::adopt::{Outcome, adopt};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};

async fn node(nodes: &Api<Node>, name: &str, ip: Option<&str>, zone: Option<&str>) {
    let mut n: Node = serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    if let Some(z) = zone {
        n.metadata.labels = Some([("topology.kubernetes.io/zone".to_string(), z.to_string())].into());
    }
    nodes.create(&PostParams::default(), &n).await.unwrap();
    if let Some(ip) = ip {
        let status = serde_json::json!({"status": {"addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}]}});
        nodes.patch_status(name, &PatchParams::default(), &Patch::Strategic(status)).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_without_instances_are_adopted_once() {
    if Binaries::for_tests("adopt test").is_none() {
        return;
    }
    let cp = ControlPlane::builder().start().await.unwrap();
    let emu = Emu::start().await;
    let existing = emu.instance("kind-worker").await;
    let nodes = Api::<Node>::all(cp.client());
    node(&nodes, "kind-control-plane", Some("172.18.0.2"), None).await;
    node(&nodes, "kind-worker", Some("172.18.0.3"), None).await;
    node(&nodes, "kind-worker2", Some("172.18.0.4"), Some("local-1c")).await;
    node(&nodes, "no-address", None, None).await;

    let done = adopt(cp.client(), &emu.user).await.unwrap();
    assert_eq!(done["kind-worker"], Outcome::AlreadyAnInstance);
    assert_eq!(done["no-address"], Outcome::NoAddress);
    let Outcome::Adopted { ip, zone, .. } = &done["kind-worker2"] else { panic!("{:?}", done["kind-worker2"]) };
    assert_eq!((ip.as_str(), zone.as_str()), ("172.18.0.4", "local-1c"), "the zone label is honoured");
    assert!(matches!(&done["kind-control-plane"], Outcome::Adopted { ip, .. } if ip == "172.18.0.2"));

    let all = emu.user.list_all_instances(&Default::default()).await.unwrap();
    let cp_inst = all.iter().find(|i| i.name == "kind-control-plane").unwrap();
    assert_eq!(cp_inst.private_ip.to_string(), "172.18.0.2");
    assert_eq!(cp_inst.tags["fakecloud.io/adopted"], "true");
    assert_eq!(all.len(), 3, "{} was left alone", existing.id);

    // Again: nothing new.
    let again = adopt(cp.client(), &emu.user).await.unwrap();
    assert!(again.values().all(|o| matches!(o, Outcome::AlreadyAnInstance | Outcome::NoAddress)), "{again:?}");
    assert_eq!(emu.user.list_all_instances(&Default::default()).await.unwrap().len(), 3);
}

//! Conformance: the cloud-node and cloud-node-lifecycle controllers behave as upstream's — a new node gets
//! exactly the upstream label set, its providerID and its addresses in order, loses the uninitialized taint and
//! gets a `Synced` event, with one metadata call; an instance missing at init is retried with backoff and the
//! node initialized once it appears; a terminated instance's NotReady node is deleted with `DeletingNode`; a
//! stopped instance's node gets the shutdown taint until it is Ready again. Any backend (see `fakecloud_e2e`).
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use fakecloud_api::AuditEntry;
use fakecloud_e2e::own_node::{Heartbeat, ready_now};
use fakecloud_e2e::{Env, HANG, SHUTDOWN_TAINT, Setup, UNINITIALIZED_TAINT, case, initialized, taint_keys, until};
use k8s_openapi::api::core::v1::Node;
use kube::api::PostParams;

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");

fn addresses(n: &Node) -> Vec<(String, String)> {
    let list = n.status.as_ref().and_then(|s| s.addresses.clone()).unwrap_or_default();
    list.into_iter().map(|a| (a.type_, a.address)).collect()
}

async fn wait_initialized(env: &Env, name: &str, timeout: Duration) -> Node {
    until(timeout, &format!("{name} initialized"), async || env.node(name).await.filter(initialized)).await
}

/// The CCM's metadata lookups of these machines: by ID (`GetInstance`), or by name before a providerID is set
/// (`ListInstances`, which names no resource). Calls about other machines of a shared cluster do not count.
async fn metadata_calls(env: &Env, ids: &BTreeSet<String>) -> Vec<AuditEntry> {
    let calls = env.ccm_calls(&["GetInstance", "ListInstances"]).await;
    calls.into_iter().filter(|c| c.resource_id.as_ref().is_none_or(|id| ids.contains(id))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_are_initialized_and_follow_their_instances() {
    case("nodes", Setup::new(CCM), async |env| {
        let nodes = env.nodes();

        // 1. New nodes: providerID, exactly the upstream label set, addresses in order, taint gone, Synced, and
        //    exactly one metadata call each.
        let started = Instant::now();
        let a = env.instance("node-a", "local-1b").await;
        let c = env.instance("node-c", "local-1c").await;
        let na = wait_initialized(env, &a.name, HANG).await;
        wait_initialized(env, &c.name, HANG).await;
        eprintln!("2 nodes registered and initialized {:.1?} after their instances were created", started.elapsed());
        assert_eq!(na.spec.as_ref().unwrap().provider_id.as_deref(), Some(a.provider_id.as_str()));
        // (The controller manager may add its own not-ready taint for a moment; the CCM's is what matters.)
        assert!(!taint_keys(&na).iter().any(|k| k == UNINITIALIZED_TAINT));
        let labels: BTreeMap<String, String> = na.metadata.labels.clone().unwrap();
        let expected: BTreeMap<String, String> = [
            // The kubelet's own.
            ("kubernetes.io/hostname", a.name.as_str()),
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
        let want = vec![("InternalIP".to_string(), a.private_ip.to_string()), ("Hostname".to_string(), a.name.clone())];
        assert_eq!(addresses(&na), want);
        let synced = env.event("default", &a.name, "Synced", HANG).await;
        assert_eq!(synced.message.as_deref(), Some("Node synced successfully"));
        assert_eq!(synced.type_.as_deref(), Some("Normal"));
        assert_eq!(synced.source.as_ref().and_then(|s| s.component.as_deref()), Some("cloud-node-controller"));
        assert_eq!(synced.involved_object.kind.as_deref(), Some("Node"));
        assert_eq!(synced.involved_object.uid, na.metadata.uid);
        let ids: BTreeSet<String> = [a.id.clone(), c.id.clone()].into();
        let calls = metadata_calls(env, &ids).await;
        if env.ccm_is_upstream() {
            // Upstream's may look a node up twice: every Node Update enqueues it (k8s.io/cloud-provider v0.37.2
            // controllers/node/node_controller.go:L150), and syncNode reads the Node from the informer's cache
            // (L417): an Update (a heartbeat, the podCIDR) handled before the cache has the init's own PUT finds
            // the taint still there and fetches the metadata again (L436); its PUT then conflicts and is retried
            // from the cache (L455-466). (docs/upstream-ccm.md, trap 19: init is a PUT from a possibly stale lister.)
            // Seen once in three runs on kind. fakecloud-ccm keeps to one: the outcome is the same, and issue #14
            // asks of it never more cloud calls than upstream's for the same outcome.
            assert!((2..=4).contains(&calls.len()), "one or two metadata calls per node initialization: {calls:#?}");
        } else {
            assert_eq!(calls.len(), 2, "exactly one metadata call per node initialization: {calls:#?}");
        }

        // 2. An instance missing at init: the node keeps the taint, the CCM retries with backoff (several tries,
        //    not a hot loop), and initializes it once the instance appears. Ready, so the lifecycle controller
        //    leaves it be; its stale kubelet addresses (no provided IP) are replaced by the cloud's.
        let lookups_by_name =
            async || env.ccm_calls(&["ListInstances"]).await.into_iter().filter(|c| c.resource_id.is_none()).count();
        let before = lookups_by_name().await;
        // Registered Ready, as a kubelet registers: a Node without a Ready condition is NotReady to the lifecycle
        // controller, which would delete it at once, its instance missing (upstream's does, on its next 5 s tick).
        let ghost: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": env.name("ghost")},
            "spec": {"taints": [{"key": UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}]},
            "status": {
                "conditions": ready_now(),
                "addresses": [{"type": "Hostname", "address": "ghost.kubelet"}, {"type": "ExternalIP", "address": "198.51.100.7"}],
            },
        }))
        .unwrap();
        nodes.create(&PostParams::default(), &ghost).await.unwrap();
        let beating = Heartbeat::start(nodes.clone(), env.name("ghost"));
        tokio::time::sleep(Duration::from_secs(3)).await;
        let tries = lookups_by_name().await - before;
        assert!(
            taint_keys(&nodes.get(&env.name("ghost")).await.unwrap()).iter().any(|k| k == UNINITIALIZED_TAINT),
            "still tainted"
        );
        // 5 ms doubling: about 10 tries in 3 s (a hot loop would make hundreds).
        assert!((3..=25).contains(&tries), "{tries} lookups of the missing instance in 3 s");
        let g = env.instance("ghost", "local-1a").await;
        let ng = wait_initialized(env, &g.name, HANG).await;
        drop(beating);
        assert_eq!(ng.spec.as_ref().unwrap().provider_id.as_deref(), Some(g.provider_id.as_str()));
        let ng = until(HANG, "ghost's addresses", async || {
            env.node(&g.name).await.filter(|n| addresses(n).first().is_some_and(|a| a.0 == "InternalIP"))
        })
        .await;
        assert_eq!(
            addresses(&ng),
            [("InternalIP".to_string(), g.private_ip.to_string()), ("Hostname".to_string(), g.name.clone())],
            "the cloud's list replaces the kubelet's (its own Hostname wins, the stale ExternalIP goes)"
        );

        // 3. A terminated instance: the node goes NotReady, then is deleted with a DeletingNode event.
        env.cloud.terminate_instance(&a.id).await.unwrap();
        let t = Instant::now();
        until(env.timing.node_loss(), "node-a deleted", async || env.node_gone(&a.name).await.then_some(())).await;
        eprintln!("node-a deleted {:.1?} after its instance was terminated", t.elapsed());
        // Events are written in the background, as client-go's broadcaster does.
        let deleting = env.event("default", &a.name, "DeletingNode", HANG).await;
        let expected = format!("Deleting node {} because it does not exist in the cloud provider", a.name);
        assert_eq!(deleting.message, Some(expected));
        assert_eq!(
            deleting.source.as_ref().and_then(|s| s.component.as_deref()),
            Some("cloud-node-lifecycle-controller")
        );

        // 4. A stopped instance: the shutdown taint while NotReady, removed once Ready again.
        let has_shutdown_taint = |n: &Node| {
            n.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some_and(|ts| {
                ts.iter().any(|t| t.key == SHUTDOWN_TAINT && t.effect == "NoSchedule" && t.value.is_none())
            })
        };
        env.cloud.stop_instance(&c.id).await.unwrap();
        until(env.timing.node_loss(), "node-c's shutdown taint", async || {
            env.node(&c.name).await.filter(has_shutdown_taint).map(|_| ())
        })
        .await;
        assert!(nodes.get_opt(&c.name).await.unwrap().is_some(), "a stopped instance's node is not deleted");
        env.cloud.start_instance(&c.id).await.unwrap();
        until(env.timing.node_loss(), "node-c's shutdown taint removed", async || {
            env.node(&c.name).await.filter(|n| !has_shutdown_taint(n)).map(|_| ())
        })
        .await;
    })
    .await;
}

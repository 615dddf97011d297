//! Conformance: the cloud-node and cloud-node-lifecycle controllers behave as upstream's — a new node gets
//! exactly the upstream label set, its providerID and its addresses in order, loses the uninitialized taint and
//! gets a `Synced` event, with one metadata call; an instance missing at init is retried with backoff and the
//! node initialized once it appears; a terminated instance's NotReady node is deleted with `DeletingNode`; a
//! stopped instance's node gets the shutdown taint until it is Ready again. Any backend (see `fakecloud_e2e`).
//! Against cloud-provider-aws too, with the Nodes named as kubelets on EC2 name them and its providerID,
//! labels, addresses and EC2 calls where they differ, each from its source (v1.37.1, `pkg/providers/v1`).
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use fakecloud_api::{AuditEntry, CreateInstanceRequest, Instance};
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
/// (`ListInstances`, which names no resource); cloud-provider-aws's are `DescribeInstances`, by instance ID or by
/// a `private-dns-name` filter. Calls about other machines of a shared cluster do not count.
async fn metadata_calls(env: &Env, ids: &BTreeSet<String>) -> Vec<AuditEntry> {
    let calls = env.ccm_calls(env.instance_reads()).await;
    calls.into_iter().filter(|c| c.resource_id.as_ref().is_none_or(|id| ids.contains(id))).collect()
}

/// The addresses the CCM gives `inst`'s Node, in order: the provided node IP first (the kubelet's annotation),
/// then the Hostname; cloud-provider-aws lists the instance's private DNS name as InternalDNS and as Hostname
/// (aws.go extractIPv4NodeAddresses, L797-801).
fn expected_addresses(env: &Env, inst: &Instance) -> Vec<(String, String)> {
    let ip = ("InternalIP".to_string(), inst.private_ip.to_string());
    let name = env.node_name(inst);
    if env.ccm_is_aws() {
        vec![ip, ("InternalDNS".into(), name.clone()), ("Hostname".into(), name)]
    } else {
        vec![ip, ("Hostname".into(), name)]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_are_initialized_and_follow_their_instances() {
    case("nodes", Setup::new(CCM).stated_for_aws(), async |env| {
        let nodes = env.nodes();

        // 1. New nodes: providerID, exactly the upstream label set, addresses in order, taint gone, Synced, and
        //    exactly one metadata call each.
        let started = Instant::now();
        let a = env.instance("node-a", "local-1b").await;
        let c = env.instance("node-c", "local-1c").await;
        let (a_node, c_node) = (env.node_name(&a), env.node_name(&c));
        let na = wait_initialized(env, &a_node, HANG).await;
        wait_initialized(env, &c_node, HANG).await;
        eprintln!("2 nodes registered and initialized {:.1?} after their instances were created", started.elapsed());
        assert_eq!(na.spec.as_ref().unwrap().provider_id, Some(env.provider_id(&a)));
        // (The controller manager may add its own not-ready taint for a moment; the CCM's is what matters.)
        assert!(!taint_keys(&na).iter().any(|k| k == UNINITIALIZED_TAINT));
        let labels: BTreeMap<String, String> = na.metadata.labels.clone().unwrap();
        let mut expected: BTreeMap<String, String> = [
            // The kubelet's own.
            ("kubernetes.io/hostname", a_node.as_str()),
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
        if env.ccm_is_aws() {
            // cloud-provider-aws adds the zone's ID from DescribeAvailabilityZones (instances_v2.go
            // getAdditionalLabels, L85-93); the cloud's zones of `local-1` are `local1-az1`... in order. Its
            // network-node labels come from DescribeInstanceTopology, which knows none of the cloud's types (L96).
            expected.insert("topology.k8s.aws/zone-id".into(), "local1-az2".into());
        }
        assert_eq!(labels, expected);
        assert_eq!(addresses(&na), expected_addresses(env, &a));
        let synced = env.event("default", &a_node, "Synced", HANG).await;
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
        } else if env.ccm_is_aws() {
            // cloud-provider-aws looks a Node's machine up twice to initialize it: by name (a `private-dns-name`
            // filter) for its providerID, the Node having none (instances_v2.go getProviderID, L41), then by ID
            // for its metadata (InstanceMetadata, L157). Its route controller may meanwhile look a node up by name
            // to route it (aws_routes.go CreateRoute, L160): one more each at most.
            assert!((4..=6).contains(&calls.len()), "two metadata lookups per node initialization: {calls:#?}");
        } else {
            assert_eq!(calls.len(), 2, "exactly one metadata call per node initialization: {calls:#?}");
        }

        // 2. An instance missing at init: the node keeps the taint, the CCM retries with backoff (several tries,
        //    not a hot loop), and initializes it once the instance appears. Ready, so the lifecycle controller
        //    leaves it be; its stale kubelet addresses (no provided IP) are replaced by the cloud's.
        // The lookups by name, `ListInstances` calls that name no machine. cloud-provider-aws's are
        // `DescribeInstances` (a `private-dns-name` filter), which the audit log does not tell apart from its route
        // controller's two a period — the routes' machines by ID (aws_routes.go ListRoutes, L90) and the unrouted
        // ghost by name (CreateRoute, L160) — so two are taken off for each of its route listings.
        let lookups_by_name = async || {
            if env.ccm_is_aws() {
                let lookups = env.ccm_calls(&["DescribeInstances"]).await.len();
                lookups.saturating_sub(2 * env.ccm_calls(&["DescribeRouteTables"]).await.len())
            } else {
                env.ccm_calls(&["ListInstances"]).await.into_iter().filter(|c| c.resource_id.is_none()).count()
            }
        };
        let before = lookups_by_name().await;
        // The machine that appears later, and the name its Node has now. cloud-provider-aws finds a Node's machine
        // by the Node's name, its private DNS name, which says its address: the machine gets a fixed one, the
        // last but one of its zone's subnet (the cloud hands addresses out from the first).
        let region = env.cloud.region().await.unwrap();
        let zone = region.zones.iter().find(|z| z.name == "local-1a").unwrap();
        let subnet: ipnet::Ipv4Net = zone.subnet.parse().unwrap();
        let ghost_ip = std::net::IpAddr::V4(std::net::Ipv4Addr::from(u32::from(subnet.broadcast()) - 2));
        let ghost_request =
            CreateInstanceRequest { name: "ghost".into(), zone: Some("local-1a".into()), ..Default::default() };
        let ghost_request = match env.ccm_is_aws() {
            true => CreateInstanceRequest { private_ip: Some(ghost_ip), ..ghost_request },
            false => ghost_request,
        };
        let ghost_name = match env.ccm_is_aws() {
            true => fakecloud_api::net::private_dns_name("", ghost_ip, &region.name),
            false => env.name("ghost"),
        };
        // Registered Ready, as a kubelet registers: a Node without a Ready condition is NotReady to the lifecycle
        // controller, which would delete it at once, its instance missing (upstream's does, on its next 5 s tick).
        let ghost: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": ghost_name},
            "spec": {"taints": [{"key": UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}]},
            "status": {
                "conditions": ready_now(),
                "addresses": [{"type": "Hostname", "address": "ghost.kubelet"}, {"type": "ExternalIP", "address": "198.51.100.7"}],
            },
        }))
        .unwrap();
        nodes.create(&PostParams::default(), &ghost).await.unwrap();
        let beating = Heartbeat::start(nodes.clone(), ghost_name.clone());
        tokio::time::sleep(Duration::from_secs(3)).await;
        let tries = lookups_by_name().await.saturating_sub(before);
        assert!(
            taint_keys(&nodes.get(&ghost_name).await.unwrap()).iter().any(|k| k == UNINITIALIZED_TAINT),
            "still tainted"
        );
        // 5 ms doubling: about 10 tries in 3 s (a hot loop would make hundreds).
        assert!((3..=25).contains(&tries), "{tries} lookups of the missing instance in 3 s");
        let g = env.create_instance(ghost_request).await;
        assert_eq!(env.node_name(&g), ghost_name);
        let ng = wait_initialized(env, &ghost_name, HANG).await;
        drop(beating);
        assert_eq!(ng.spec.as_ref().unwrap().provider_id, Some(env.provider_id(&g)));
        let ng = until(HANG, "ghost's addresses", async || {
            env.node(&ghost_name).await.filter(|n| addresses(n).first().is_some_and(|a| a.0 == "InternalIP"))
        })
        .await;
        assert_eq!(
            addresses(&ng),
            expected_addresses(env, &g),
            "the cloud's list replaces the kubelet's (its own Hostname wins, the stale ExternalIP goes)"
        );

        // 3. A terminated instance: the node goes NotReady, then is deleted with a DeletingNode event.
        env.cloud.terminate_instance(&a.id).await.unwrap();
        let t = Instant::now();
        until(env.timing.node_loss(), "node-a deleted", async || env.node_gone(&a_node).await.then_some(())).await;
        eprintln!("node-a deleted {:.1?} after its instance was terminated", t.elapsed());
        // Events are written in the background, as client-go's broadcaster does.
        let deleting = env.event("default", &a_node, "DeletingNode", HANG).await;
        let expected = format!("Deleting node {a_node} because it does not exist in the cloud provider");
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
            env.node(&c_node).await.filter(has_shutdown_taint).map(|_| ())
        })
        .await;
        assert!(nodes.get_opt(&c_node).await.unwrap().is_some(), "a stopped instance's node is not deleted");
        env.cloud.start_instance(&c.id).await.unwrap();
        until(env.timing.node_loss(), "node-c's shutdown taint removed", async || {
            env.node(&c_node).await.filter(|n| !has_shutdown_taint(n)).map(|_| ())
        })
        .await;
    })
    .await;
}

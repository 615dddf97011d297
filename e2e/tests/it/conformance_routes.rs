//! Conformance: the route controller — one route per node pod CIDR, named from the cluster and the node UID;
//! the route quota reproducing "nodes stay NetworkUnavailable" (`FailedToCreateRoute`, `NoRouteCreated`),
//! healed without a restart when it is raised; at steady state no cloud writes and one route listing per
//! period; a deleted node's route deleted. Any backend: quotas and counts are relative to the routes the
//! cluster had before. Against cloud-provider-aws too (kops#4918: the route table at its limit), where its EC2
//! calls stand for the native ones.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use fakecloud_api::{QuotaName, Route};
use fakecloud_e2e::{HANG, Setup, case, condition, until};

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_follow_nodes_and_the_route_quota() {
    case("routes", Setup::new(CCM).stated_for_aws(), async |env| {
        let cloud = &env.cloud;
        // The routes the cluster's own nodes have, once settled: a route per pod CIDR of every Node (on a
        // fresh cluster some are still to be created; after an interrupted run some still to be deleted).
        let others = until(env.timing.routes(), "the cluster's own routes settled", async || {
            let cidrs: usize =
                env.node_list().await.iter().filter_map(|n| n.spec.as_ref()?.pod_cidrs.as_ref()).map(Vec::len).sum();
            let routes = cloud.list_routes("main").await.ok()?.items.len();
            (routes == cidrs).then_some(routes as u32)
        })
        .await;
        cloud.set_quota(QuotaName::RoutesPerRouteTable, others + 2).await.unwrap();
        let mut instances = Vec::new();
        for (name, zone) in [("node-a", "local-1a"), ("node-b", "local-1b"), ("node-c", "local-1c")] {
            instances.push(env.instance(name, zone).await);
        }
        let ids: BTreeSet<String> = instances.iter().map(|i| i.id.clone()).collect();
        let mine = async || -> Vec<Route> {
            let routes = cloud.list_routes("main").await.map(|l| l.items).unwrap_or_default();
            routes.into_iter().filter(|r| ids.contains(&r.target_instance)).collect()
        };
        let names: Vec<String> = instances.iter().map(|i| env.node_name(i)).collect();
        let my_nodes = async || {
            let list = env.node_list().await;
            list.into_iter().filter(|n| n.metadata.name.as_ref().is_some_and(|m| names.contains(m))).collect::<Vec<_>>()
        };

        // Room for two more routes, three nodes: exactly two routed; the third NetworkUnavailable, with
        // FailedToCreateRoute.
        let all = until(env.timing.routes() + Duration::from_secs(30), "2 nodes routed, 1 refused", async || {
            let list = my_nodes().await;
            let conds: Vec<_> = list.iter().filter_map(|n| condition(n, "NetworkUnavailable")).collect();
            let routed = conds.iter().filter(|c| c.0 == "False" && c.1 == "RouteCreated").count();
            let refused = conds.iter().filter(|c| c.0 == "True" && c.1 == "NoRouteCreated").count();
            (routed == 2 && refused == 1).then_some(list)
        })
        .await;
        let routes = mine().await;
        assert_eq!(routes.len(), 2, "{routes:#?}");
        for r in &routes {
            let inst = instances.iter().find(|i| i.id == r.target_instance).unwrap();
            let node = all.iter().find(|n| n.metadata.name == Some(env.node_name(inst))).unwrap();
            assert_eq!(
                Some(r.destination.as_str()),
                node.spec.as_ref().unwrap().pod_cidr.as_deref(),
                "a route per pod CIDR, to its node's instance"
            );
            if env.ccm_is_aws() {
                // An EC2 route has no name: cloud-provider-aws drops the route controller's hint (v1.37.1
                // pkg/providers/v1/aws_routes.go CreateRoute, L160) and names a route `<cluster>-<destination>`
                // only as it lists them (L101). The face names a route it makes by its destination.
                assert_eq!(r.name, r.destination, "an EC2 route is named by its destination");
            } else {
                let uid = node.metadata.uid.as_deref().unwrap();
                assert_eq!(r.name, format!("{}-{uid}", env.cluster_name), "named from the cluster and the node UID");
            }
        }
        let refused = all.iter().find(|n| condition(n, "NetworkUnavailable").is_some_and(|c| c.0 == "True")).unwrap();
        let refused_name = refused.metadata.name.clone().unwrap();
        // Found by its message: a node is also refused while it has no providerID yet (upstream's route
        // controller attempts those too, docs/upstream-ccm.md), and that event may come first.
        let ev = until(HANG, "a FailedToCreateRoute event naming the quota", async || {
            let events = env.events_in("default", &refused_name).await;
            events.into_iter().find(|e| {
                e.reason.as_deref() == Some("FailedToCreateRoute")
                    && e.message.as_deref().is_some_and(|m| m.contains("RouteLimitExceeded"))
            })
        })
        .await;
        let msg = ev.message.unwrap_or_default();
        // After ten refusals with different messages, both CCMs' recorders (client-go's correlator) combine them.
        let msg = msg.strip_prefix("(combined from similar events): ").unwrap_or(&msg);
        assert!(msg.starts_with("Could not create route "), "{msg}");
        assert!(msg.contains("RouteLimitExceeded"), "the event names the quota: {msg}");
        assert_eq!(ev.type_.as_deref(), Some("Warning"));
        assert_eq!(ev.source.and_then(|s| s.component).as_deref(), Some("route_controller"));

        // Raising the quota heals it without a restart.
        cloud.set_quota(QuotaName::RoutesPerRouteTable, others + 50).await.unwrap();
        until(env.timing.routes(), "all three routed", async || {
            let list = my_nodes().await;
            let routed = list.iter().filter(|n| condition(n, "NetworkUnavailable").is_some_and(|c| c.0 == "False"));
            (routed.count() == 3).then_some(())
        })
        .await;
        assert_eq!(mine().await.len(), 3);

        // Steady state: no cloud writes, and one route listing per period (not one call per node). Instance
        // reads are at most the periodic address refresh, one per node, whatever the number of periods; and for
        // cloud-provider-aws one per period besides, as each listing looks the routes' instances up in one
        // DescribeInstances (aws_routes.go ListRoutes, L90), also not one per node.
        let window = 5 * env.timing.route_period;
        let aws = env.ccm_is_aws();
        let writes: &[&str] = if aws {
            &["CreateRoute", "DeleteRoute", "ModifyInstanceAttribute", "CreateLoadBalancer", "DeleteLoadBalancer"]
        } else {
            &["CreateRoute", "DeleteRoute", "CreateLoadBalancer", "UpdateLoadBalancer", "DeleteLoadBalancer"]
        };
        let route_reads: &[&str] = if aws { &["DescribeRouteTables"] } else { &["ListRoutes", "GetRoute"] };
        let instance_reads = env.instance_reads();
        let (writes_before, listings_before, instance_reads_before) = (
            env.ccm_calls(writes).await.len(),
            env.ccm_calls(route_reads).await.len(),
            env.ccm_calls(instance_reads).await.len(),
        );
        tokio::time::sleep(window).await;
        assert_eq!(env.ccm_calls(writes).await.len(), writes_before, "no writes at steady state");
        let listings = env.ccm_calls(route_reads).await.len() - listings_before;
        assert!((3..=7).contains(&listings), "{listings} route reads in {window:?}, 5 periods (one listing each)");
        let instance_reads = env.ccm_calls(instance_reads).await.len() - instance_reads_before;
        let nodes = env.node_list().await.len();
        let bound = if aws { nodes + 7 } else { nodes };
        assert!(instance_reads <= bound, "{instance_reads} instance reads in 5 periods for {nodes} nodes");

        // A node deleted (its instance gone): its route goes too.
        cloud.terminate_instance(&instances[0].id).await.unwrap();
        until(env.timing.node_loss() + env.timing.routes(), "node-a's route deleted", async || {
            let routes = mine().await;
            (routes.len() == 2 && routes.iter().all(|r| r.target_instance != instances[0].id)).then_some(())
        })
        .await;
    })
    .await;
}

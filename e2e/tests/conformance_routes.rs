//! The route controller against the real control plane and emulator: one route per node pod CIDR, the route
//! quota reproducing "nodes stay NetworkUnavailable", healing when it is raised, stale routes removed, and at
//! steady state no cloud writes and one route listing per period.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use fakecloud_api::{CreateInstanceRequest, QuotaName, Route};
use fakecloud_e2e::{Cluster, until};
use k8s_openapi::api::core::v1::Node;

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");

fn network_unavailable(n: &Node) -> Option<(String, String)> {
    let c = n.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "NetworkUnavailable")?;
    Some((c.status.clone(), c.reason.clone().unwrap_or_default()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_follow_nodes_and_the_route_quota() {
    let Some(cluster) = Cluster::start("CCM route controller e2e test").await else {
        return;
    };
    let cloud = cluster.cloud.clone();
    cluster.cloud.set_quota(QuotaName::RoutesPerRouteTable, 2).await.unwrap();
    let ccm = cluster.ccm(CCM, &["--route-reconciliation-period=1s"]);
    ccm.wait_log("starting controllers", Duration::from_secs(30)).await;
    let mut instances = Vec::new();
    for (name, zone) in [("node-a", "local-1a"), ("node-b", "local-1b"), ("node-c", "local-1c")] {
        let req = CreateInstanceRequest { name: name.into(), zone: Some(zone.into()), ..Default::default() };
        instances.push(cloud.create_instance(&req, None).await.unwrap());
    }

    // Quota 2, three nodes: exactly two routes; the third node is NetworkUnavailable with FailedToCreateRoute.
    let all = until(Duration::from_secs(60), "2 nodes routed, 1 refused", async || {
        let list = cluster.node_list().await;
        let conds: Vec<_> = list.iter().filter_map(network_unavailable).collect();
        let routed = conds.iter().filter(|c| c.0 == "False" && c.1 == "RouteCreated").count();
        let refused = conds.iter().filter(|c| c.0 == "True" && c.1 == "NoRouteCreated").count();
        (routed == 2 && refused == 1).then_some(list)
    })
    .await;
    let routes: Vec<Route> = cloud.list_routes("main").await.unwrap().items;
    assert_eq!(routes.len(), 2, "{routes:#?}");
    for r in &routes {
        let inst = instances.iter().find(|i| i.id == r.target_instance).unwrap();
        let node = all.iter().find(|n| n.metadata.name.as_deref() == Some(inst.name.as_str())).unwrap();
        assert_eq!(
            Some(r.destination.as_str()),
            node.spec.as_ref().unwrap().pod_cidr.as_deref(),
            "a route per pod CIDR, to its node's instance"
        );
        let uid = node.metadata.uid.as_deref().unwrap();
        assert_eq!(r.name, format!("kubernetes-{uid}"), "named from the cluster and the node UID");
    }
    let refused = all.iter().find(|n| network_unavailable(n).is_some_and(|c| c.0 == "True")).unwrap();
    let refused_name = refused.metadata.name.clone().unwrap();
    let ev = until(Duration::from_secs(15), "a FailedToCreateRoute event", async || {
        cluster.events_for(&refused_name).await.into_iter().find(|e| e.reason.as_deref() == Some("FailedToCreateRoute"))
    })
    .await;
    let msg = ev.message.unwrap_or_default();
    assert!(msg.starts_with("Could not create route "), "{msg}");
    assert!(msg.contains("RouteLimitExceeded"), "the event names the quota: {msg}");
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    assert_eq!(ev.source.and_then(|s| s.component).as_deref(), Some("route_controller"));

    // Raising the quota heals it without a restart.
    cluster.cloud.set_quota(QuotaName::RoutesPerRouteTable, 50).await.unwrap();
    until(Duration::from_secs(30), "all three routed", async || {
        let list = cluster.node_list().await;
        (list.len() == 3 && list.iter().all(|n| network_unavailable(n).is_some_and(|c| c.0 == "False"))).then_some(())
    })
    .await;
    assert_eq!(cloud.list_routes("main").await.unwrap().items.len(), 3);

    // Steady state: no cloud writes, and reads are one route listing per period (not one call per node).
    let writes = ["CreateRoute", "DeleteRoute"];
    let reads = ["ListRoutes", "GetRoute", "GetInstance", "ListInstances"];
    let (writes_before, reads_before) = (cluster.ccm_calls(&writes).await.len(), cluster.ccm_calls(&reads).await.len());
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(cluster.ccm_calls(&writes).await.len(), writes_before, "no writes at steady state");
    let reads = cluster.ccm_calls(&reads).await.len() - reads_before;
    assert!((3..=7).contains(&reads), "{reads} cloud reads in 5 s at a 1 s period (expected one listing each)");

    // A node deleted (its instance gone): its route goes too.
    cloud.terminate_instance(&instances[0].id).await.unwrap();
    until(Duration::from_secs(60), "node-a's route deleted", async || {
        let routes = cloud.list_routes("main").await.ok()?.items;
        (routes.len() == 2 && routes.iter().all(|r| r.target_instance != instances[0].id)).then_some(())
    })
    .await;
}

//! Several clusters on one cloud (issue #28), on the local backend: two control planes, each with its CCM (the
//! one `FAKECLOUD_E2E_CCM` chooses) and simulated kubelets, on one emulator, as several clusters share one
//! account of a real cloud. A real cloud throttles per account and region (EC2's buckets are per account, ARM's
//! per subscription), so one cluster's calls spend the budget of the other; and the clusters share the VPC's
//! route table, each finding its own routes by its `--cluster-name`, and its route quota: one cluster's routes
//! can leave the other's nodes `NetworkUnavailable`, though its CCM sees only its own few routes.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use fakecloud_api::{AuditQuery, CreateInstanceRequest, Instance, QuotaName, Route, SetRateLimitRequest};
use fakecloud_e2e::env::start_local_ccm;
use fakecloud_e2e::{Cluster, ClusterOptions, HANG, Rates, condition, until};

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");
/// The account-wide bucket of route creates: room for the first cluster's three, refilled slowly enough that the
/// second cluster, coming right after, finds it spent.
const BUCKET: &str = "create-route";
const CAPACITY: u32 = 4;
const REFILL_PER_SECOND: f64 = 0.05;
const NODES: usize = 3;

/// A cluster whose kubelets run the machines tagged `cluster=<name>`, with pod CIDRs from `cidr`.
fn options(name: &str, cidr: &str) -> ClusterOptions {
    let mut rates = Rates::fast();
    rates.kubelets.instance_tag = Some(format!("cluster={name}"));
    ClusterOptions { rates, cluster_cidr: cidr.into(), ..ClusterOptions::default() }
}

/// Machines `<name>-node-<i>` for `i` in `range`, run by cluster `name`'s kubelets.
async fn machines(cluster: &Cluster, name: &str, range: std::ops::Range<usize>) -> Vec<Instance> {
    let mut instances = Vec::new();
    for i in range {
        let req = CreateInstanceRequest {
            name: format!("{name}-node-{i}"),
            tags: BTreeMap::from([("cluster".to_string(), name.to_string())]),
            ..Default::default()
        };
        instances.push(cluster.cloud.create_instance(&req, None).await.unwrap());
    }
    instances
}

/// The `NetworkUnavailable` condition of Node `name`, once its reason is `reason`.
async fn network(cluster: &Cluster, name: &str, reason: &str) -> String {
    until(HANG, &format!("{name} NetworkUnavailable with {reason}"), async || {
        let (status, why) = condition(&cluster.node(name).await?, "NetworkUnavailable")?;
        (why == reason).then_some(status)
    })
    .await
}

/// The routes of cluster `name` in the shared table, once there is one per node, by destination.
async fn routes_of(cluster: &Cluster, name: &str) -> BTreeMap<String, Route> {
    let prefix = format!("{name}-");
    until(HANG, &format!("a route per node of cluster {name}"), async || {
        let routes = cluster.cloud.list_routes("main").await.ok()?.items;
        let own: BTreeMap<String, Route> =
            routes.into_iter().filter(|r| r.name.starts_with(&prefix)).map(|r| (r.destination.clone(), r)).collect();
        (own.len() == NODES).then_some(own)
    })
    .await
}

/// The CCMs' route creates after audit entry `after`: (accepted, refused by the bucket).
async fn route_creates(cluster: &Cluster, after: i64) -> (usize, usize) {
    let query = AuditQuery {
        operation: Some("CreateRoute".into()),
        after: Some(after),
        limit: Some(10_000),
        ..Default::default()
    };
    let calls: Vec<_> =
        cluster.cloud.audit(&query).await.unwrap().items.into_iter().filter(|e| e.role == "user").collect();
    let refused = calls.iter().filter(|e| e.fault.as_deref() == Some(BUCKET)).count();
    let accepted = calls.iter().filter(|e| (200..300).contains(&e.status)).count();
    (accepted, refused)
}

/// The newest audit entry's `seq`.
async fn last_seq(cluster: &Cluster) -> i64 {
    const PAGE: u32 = 10_000;
    let mut after = 0;
    loop {
        let query = AuditQuery { after: Some(after), limit: Some(PAGE), ..Default::default() };
        let items = cluster.cloud.audit(&query).await.unwrap().items;
        let Some(last) = items.last() else { return after };
        after = last.seq;
        if items.len() < PAGE as usize {
            return after;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clusters_share_one_accounts_budget_route_table_and_route_quota() {
    let Some(a) = Cluster::start_with_options("shared cloud e2e test", options("a", "10.244.0.0/16")).await else {
        return;
    };
    let b = a.start_beside("shared cloud e2e test", options("b", "10.245.0.0/16")).await;
    let limit = SetRateLimitRequest {
        scope: fakecloud_api::RateLimitScope::Operation,
        operation: Some("CreateRoute".into()),
        capacity: CAPACITY,
        refill_per_second: Some(REFILL_PER_SECOND),
        // EC2's: 503 RequestLimitExceeded.
        status: 503,
        ..Default::default()
    };
    a.cloud.set_rate_limit(BUCKET, &limit).await.unwrap();
    let _ccm_a = start_local_ccm(&a, CCM, &["--cluster-name=a"]);
    let _ccm_b = start_local_ccm(&b, CCM, &["--cluster-name=b"]);
    let start = last_seq(&a).await;

    // Cluster a alone: its three routes fit the bucket.
    let machines_a = machines(&a, "a", 0..NODES).await;
    a.wait_initialized(&machines_a, HANG).await;
    let routes_a = routes_of(&a, "a").await;
    assert!(routes_a.keys().all(|d| d.starts_with("10.244.")), "cluster a's routes are its pod CIDRs: {routes_a:?}");
    let (accepted, refused) = route_creates(&a, start).await;
    assert_eq!((accepted, refused), (NODES, 0), "cluster a alone creates one route per node, unrefused");

    // Cluster b: three creates would fit an empty bucket of four, but a has spent it.
    let before_b = last_seq(&a).await;
    let machines_b = machines(&b, "b", 0..NODES).await;
    b.wait_initialized(&machines_b, HANG).await;
    let routes_b = routes_of(&b, "b").await;
    assert!(routes_b.keys().all(|d| d.starts_with("10.245.")), "cluster b's routes are its pod CIDRs: {routes_b:?}");
    let (accepted, refused) = route_creates(&b, before_b).await;
    assert_eq!(accepted, NODES, "cluster b creates one route per node once the bucket refills");
    assert!(refused > 0, "cluster b's creates are refused: cluster a spent the account's bucket");

    // Both CCMs reconcile on (every second here), each on its own routes only: the other cluster's stay as they
    // are. Seen after each has listed the table a few more times.
    let listed = last_seq(&a).await;
    until(HANG, "both CCMs listing the route table again", async || {
        let query = AuditQuery { operation: Some("ListRoutes".into()), after: Some(listed), ..Default::default() };
        (a.cloud.audit(&query).await.ok()?.items.len() >= 6).then_some(())
    })
    .await;
    let table = a.cloud.list_routes("main").await.unwrap().items;
    let ids = |routes: &BTreeMap<String, Route>| routes.values().map(|r| r.id.clone()).collect::<Vec<_>>();
    for id in ids(&routes_a).iter().chain(&ids(&routes_b)) {
        assert!(table.iter().any(|r| &r.id == id), "route {id} is still in the table: {table:?}");
    }
    assert_eq!(table.len(), 2 * NODES, "no route was made twice: {table:?}");
    assert_eq!(route_creates(&a, start).await.0, 2 * NODES, "every route was created once");

    // The route quota is the table's, whoever's routes fill it: at the two clusters' six, b's next node is
    // refused for the limit though b's CCM sees three routes of its own; a is untouched. Raising it heals b.
    a.cloud.delete_rate_limit(BUCKET).await.unwrap();
    let full = u32::try_from(2 * NODES).unwrap();
    a.cloud.set_quota(QuotaName::RoutesPerRouteTable, full).await.unwrap();
    let extra = machines(&b, "b", NODES..NODES + 1).await;
    let name = &extra[0].name;
    assert_eq!(network(&b, name, "NoRouteCreated").await, "True", "the table is full");
    let refusal = until(HANG, "a FailedToCreateRoute event naming the quota", async || {
        let events = b.events_in("default", name).await;
        events
            .into_iter()
            .filter_map(|e| e.message.filter(|_| e.reason.as_deref() == Some("FailedToCreateRoute")))
            .find(|m| m.contains("RouteLimitExceeded"))
    })
    .await;
    assert!(refusal.contains(&full.to_string()), "the refusal names the table's limit: {refusal}");
    assert_eq!(a.cloud.list_routes("main").await.unwrap().items.len(), 2 * NODES, "a's routes stay");
    a.cloud.set_quota(QuotaName::RoutesPerRouteTable, full + 1).await.unwrap();
    assert_eq!(network(&b, name, "RouteCreated").await, "False", "routed once the quota is raised");
}

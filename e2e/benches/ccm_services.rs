//! The service and route controllers at scale, against their floor, for fakecloud-ccm (a release build) and
//! upstream's CCM with fakecloud's Go provider, each on a cluster of its own, one after the other:
//!
//! - Services: N `type: LoadBalancer` Services created at once (3 nodes, zero provisioning delay); the wall
//!   time until every one has its EXTERNAL-IP (from a watch).
//! - Routes: N instances whose Nodes register at the kubelet's rates; the time until all are initialized, then
//!   until every one has its route and `NetworkUnavailable=False`.
//! - Routes under a budget: the same under a per-minute budget of route creates (kubernetes#26119's shape).
//! - Services on a fleet (`backends`): 1,000 Services (`FAKECLOUD_BENCH_SERVICES`) on N routed Nodes, every
//!   load balancer with N backends; the wall time until every one has its EXTERNAL-IP.
//! - All: what [`fakecloud_e2e::bench`] measures (cloud calls, API writes, CPU, peak RSS, the steady state
//!   after), then the side-by-side table.
//! - The floor: the API-server writes those outcomes require (per Service the finalizer and the ingress, per
//!   Node the condition), done by a bare client, 16 in flight; reported with the ratio CCM / floor.
//!
//! `cargo bench -p fakecloud-e2e --bench ccm_services`; the environment is described in
//! [`fakecloud_e2e::bench`] (`FAKECLOUD_CCM_BENCH_NODES`, default `1,100,1000`; `FAKECLOUD_CCM_BENCH_ARGS`, e.g.
//! `--kube-api-qps=200 --kube-api-burst=400 --concurrent-service-syncs=10`; `FAKECLOUD_CCM_BENCH_CCMS`, default
//! `fakecloud,upstream`), `FAKECLOUD_BENCH_PARTS=services,routes,budget,backends` to pick (default the first three),
//! `FAKECLOUD_BENCH_ROUTE_BUDGET` (route creates a minute; default half of N) and `FAKECLOUD_BENCH_SERVICES`.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use fakecloud_api::{QuotaName, RateLimitKind, RateLimitScope, SetRateLimitRequest};
use fakecloud_e2e::bench::{self, Contender, Measured, Outcome};
use fakecloud_e2e::{Cluster, ClusterOptions, Rates, lb};
use fakecloud_emulator::config::Topology;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams, PostParams};

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");
const IN_FLIGHT: usize = 16;

/// `writes` API-server writes by a bare client, `IN_FLIGHT` at once: the floor.
async fn floor<F, Fut>(n: usize, write: F) -> Duration
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let t = Instant::now();
    futures::stream::iter(0..n).map(write).buffer_unordered(IN_FLIGHT).collect::<Vec<()>>().await;
    t.elapsed()
}

/// Region and zones of the service benches, with a public pool of 4,094 VIPs (198.18.0.0/20; the default is a
/// /24).
fn vip_topology() -> Topology {
    let zones: Vec<String> = ["local-1a", "local-1b", "local-1c"].iter().map(|s| s.to_string()).collect();
    Topology::new("local-1", &zones, "10.0.0.0/16".parse().unwrap(), "198.18.0.0/20".parse().unwrap()).unwrap()
}

/// A kubelet's rates, with load balancers provisioned at once: the time measured is the CCM's.
fn service_options() -> ClusterOptions {
    let rates = Rates { lb_provision_delay: Duration::ZERO, ..Rates::real() };
    ClusterOptions { rates, topology: vip_topology(), ..ClusterOptions::default() }
}

/// Quotas for `n` load balancers and their public IPs, and for the rule cloud-provider-aws adds to the nodes'
/// security group for each ELB (`updateInstanceSecurityGroupsForLoadBalancer`, aws.go; 60 would stop it at the
/// 60th Service, as it does on AWS: kubernetes#26670).
async fn fit_load_balancers(cluster: &Cluster, n: usize) {
    let limit = u32::try_from(n + 10).unwrap();
    cluster.cloud.set_quota(QuotaName::LoadBalancers, limit).await.unwrap();
    cluster.cloud.set_quota(QuotaName::PublicIps, limit).await.unwrap();
    cluster.cloud.set_quota(QuotaName::RulesPerSecurityGroup, limit).await.unwrap();
}

/// Create `n` LoadBalancer Services in namespace `bench`, `IN_FLIGHT` at once; the wall time until every one has
/// its EXTERNAL-IP.
async fn external_ips(cluster: &Cluster, n: usize) -> Duration {
    cluster.create_namespace("bench").await;
    let api = Api::<Service>::namespaced(cluster.client(), "bench");
    let create = api.clone();
    bench::watch_until(api, n, |s| lb::ingress_address(s).is_some(), async move {
        futures::stream::iter(0..n)
            .map(|i| {
                let api = create.clone();
                async move {
                    api.create(&PostParams::default(), &lb::service(&format!("svc-{i:04}"), 80, serde_json::json!({})))
                        .await
                        .map(|_| ())
                }
            })
            .buffer_unordered(IN_FLIGHT)
            .try_collect::<Vec<()>>()
            .await
            .unwrap();
    })
    .await
}

async fn services(n: usize, contender: &Contender, extra: &[String]) -> Option<Outcome> {
    let cluster = Cluster::start_with_options("service benchmark", contender.options(service_options())).await?;
    fit_load_balancers(&cluster, n).await;
    let mut measured = Measured::start(&cluster, contender, extra).await;
    cluster.initialized_nodes("svc-bench-node", 3, Duration::from_secs(120)).await;
    measured.begin().await;
    let wall = external_ips(&cluster, n).await;
    let outcome = measured.converged("services", n, wall).await;
    drop(measured);

    // The floor: per Service the finalizer and the ingress, two status patches.
    cluster.create_namespace("floor").await;
    let floor_api = Api::<Service>::namespaced(cluster.client(), "floor");
    futures::stream::iter(0..n)
        .map(|i| {
            let api = floor_api.clone();
            async move {
                api.create(&PostParams::default(), &lb::service(&format!("svc-{i:04}"), 80, serde_json::json!({})))
                    .await
                    .unwrap()
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<_>>()
        .await;
    let bare = floor(n, |i| {
        let api = floor_api.clone();
        async move {
            let name = format!("svc-{i:04}");
            let fin = serde_json::json!({"metadata": {"finalizers": ["service.kubernetes.io/load-balancer-cleanup"]}});
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(fin)).await.unwrap();
            let ip = format!("198.19.{}.{}", i / 250, i % 250 + 1);
            let st = serde_json::json!({"status": {"loadBalancer": {"ingress": [{"ip": ip}]}}});
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(st)).await.unwrap();
        }
    })
    .await;
    println!(
        "services={n} ccm={} flags={extra:?} all_external_ips={wall:.1?} floor(2 writes each)={bare:.1?} ratio={:.1}",
        contender.name,
        wall.as_secs_f64() / bare.as_secs_f64()
    );
    Some(outcome)
}

/// `FAKECLOUD_BENCH_SERVICES` (default 1,000) Services on a fleet of N Nodes, initialized and routed first: every
/// load balancer is made with N backends. The converge time is the wall time until every Service has its
/// EXTERNAL-IP; the outcome's N is the fleet's.
async fn services_on_fleet(n: usize, contender: &Contender, extra: &[String]) -> Option<Outcome> {
    let count = std::env::var("FAKECLOUD_BENCH_SERVICES").ok().and_then(|c| c.parse().ok()).unwrap_or(1000);
    let options = contender.options(service_options());
    let cluster = bench::fleet_cluster_with("services on a fleet benchmark", n, options).await?;
    fit_load_balancers(&cluster, count).await;
    // The default (1,000, a public cloud's usual targets per load balancer) would refuse a larger fleet's.
    let backends = u32::try_from(n + 10).unwrap();
    cluster.cloud.set_quota(QuotaName::BackendsPerLoadBalancer, backends).await.unwrap();
    let mut measured = Measured::start(&cluster, contender, extra).await;
    let (init, routed) = bench::fleet_routed(&cluster, "svc-fleet", n).await;
    measured.begin().await;
    let wall = external_ips(&cluster, count).await;
    let outcome = measured.converged(&format!("{count}-services"), n, wall).await;
    println!(
        "services={count} backends={n} ccm={} flags={extra:?} fleet_initialized={init:.1?} fleet_routed={routed:.1?} \
         all_external_ips={wall:.1?}",
        contender.name
    );
    Some(outcome)
}

async fn routes(n: usize, contender: &Contender, extra: &[String]) -> Option<Outcome> {
    let cluster = bench::fleet_cluster("route benchmark", n, contender).await?;
    let measured = Measured::start(&cluster, contender, extra).await;
    let t = Instant::now();
    let (init, routed_after) = bench::fleet_routed(&cluster, "route-bench", n).await;
    let total = t.elapsed();
    let outcome = measured.converged("routes", n, total).await;
    drop(measured);
    // The floor: one NetworkUnavailable patch per Node (named as the contender's cluster names them).
    let nodes = cluster.nodes();
    let names: Vec<String> = cluster.node_list().await.into_iter().filter_map(|n| n.metadata.name).collect();
    let bare = floor(n, |i| {
        let (nodes, name) = (nodes.clone(), names[i].clone());
        async move {
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            let patch = serde_json::json!({"status": {"conditions": [{"type": "NetworkUnavailable", "status": "False",
                "reason": "Floor", "message": "bare client", "lastTransitionTime": now, "lastHeartbeatTime": now}]}});
            nodes.patch_status(&name, &PatchParams::default(), &Patch::Strategic(patch)).await.unwrap();
        }
    })
    .await;
    let routing = routed_after.saturating_sub(init);
    println!(
        "route_nodes={n} ccm={} flags={extra:?} all_initialized={init:.1?} then_all_routed={routing:.1?} \
         (total {total:.1?}) floor(1 write each)={bare:.1?} ratio(routing/floor)={:.1}",
        contender.name,
        routing.as_secs_f64() / bare.as_secs_f64()
    );
    Some(outcome)
}

/// The shape of kubernetes#26119 (routes programmed "forever" at 1–2k Nodes under the cloud's throttling): the
/// routes of N new Nodes under a per-minute budget of route creates, GCP's shape (403 `rateLimitExceeded` once
/// the minute's are spent, Retry-After to the minute's end). Half of N a minute unless
/// `FAKECLOUD_BENCH_ROUTE_BUDGET` says otherwise, so that converging takes two minutes or more at any N and
/// the creates the cloud refuses show in the cloud calls.
async fn routes_under_budget(n: usize, contender: &Contender, extra: &[String]) -> Option<Outcome> {
    let cluster = bench::fleet_cluster("route budget benchmark", n, contender).await?;
    let budget = std::env::var("FAKECLOUD_BENCH_ROUTE_BUDGET")
        .ok()
        .and_then(|b| b.parse().ok())
        .unwrap_or_else(|| u32::try_from(n / 2).unwrap().max(1));
    let limit = SetRateLimitRequest {
        scope: RateLimitScope::Operations,
        operations: vec!["CreateRoute".into()],
        kind: RateLimitKind::FixedWindow,
        capacity: budget,
        refill_per_second: None,
        window_seconds: Some(60),
        status: 403,
        code: Some("rateLimitExceeded".into()),
        ..SetRateLimitRequest::default()
    };
    cluster.cloud.set_rate_limit("route-budget", &limit).await.unwrap();
    let measured = Measured::start(&cluster, contender, extra).await;
    let t = Instant::now();
    let (init, routed) = bench::fleet_routed(&cluster, "route-budget", n).await;
    let outcome = measured.converged("routes-budget", n, t.elapsed()).await;
    let creates = outcome.work.calls.get("CreateRoute").copied().unwrap_or(0);
    println!(
        "route_budget_nodes={n} ccm={} budget={budget}/min flags={extra:?} all_initialized={init:.1?} \
         all_routed={routed:.1?} route_creates={creates} (refused {})",
        contender.name,
        creates.saturating_sub(n)
    );
    Some(outcome)
}

#[tokio::main]
async fn main() {
    let (contenders, extra) = (bench::contenders(CCM), bench::extra_args());
    let parts = std::env::var("FAKECLOUD_BENCH_PARTS").unwrap_or_else(|_| "services,routes,budget".into());
    let mut outcomes = Vec::new();
    // Both CCMs on the same work back to back, so that they see about the same load on the machine.
    for n in bench::counts() {
        for part in ["services", "routes", "backends", "budget"].into_iter().filter(|p| parts.contains(p)) {
            for contender in &contenders {
                let outcome = match part {
                    "services" => services(n, contender, &extra).await,
                    "routes" => routes(n, contender, &extra).await,
                    "backends" => services_on_fleet(n, contender, &extra).await,
                    _ => routes_under_budget(n, contender, &extra).await,
                };
                outcomes.extend(outcome);
            }
        }
    }
    print!("{}", bench::comparison(&outcomes));
}

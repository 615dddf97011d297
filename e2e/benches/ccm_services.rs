//! The service and route controllers at scale, against their floor, for fakecloud-ccm (a release build) and
//! upstream's CCM with fakecloud's Go provider, each on a cluster of its own, one after the other:
//!
//! - Services: N `type: LoadBalancer` Services created at once (3 nodes, zero provisioning delay); the wall
//!   time until every one has its EXTERNAL-IP (from a watch).
//! - Routes: N instances whose Nodes register at the kubelet's rates; the time until all are initialized, then
//!   until every one has its route and `NetworkUnavailable=False`.
//! - Both: what [`fakecloud_e2e::bench`] measures (cloud calls, API writes, CPU, peak RSS, the steady state
//!   after), then the side-by-side table.
//! - The floor: the API-server writes those outcomes require (per Service the finalizer and the ingress, per
//!   Node the condition), done by a bare client, 16 in flight; reported with the ratio CCM / floor.
//!
//! `cargo bench -p fakecloud-e2e --bench ccm_services`; the environment is described in
//! [`fakecloud_e2e::bench`] (`FAKECLOUD_CCM_BENCH_NODES`, default `1,100,1000`; `FAKECLOUD_CCM_BENCH_ARGS`, e.g.
//! `--kube-api-qps=200 --kube-api-burst=400 --concurrent-service-syncs=10`; `FAKECLOUD_CCM_BENCH_CCMS`, default
//! `fakecloud,upstream`), and `FAKECLOUD_BENCH_PARTS=services,routes` to pick.
#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::time::{Duration, Instant};

use fakecloud_api::{CreateInstanceRequest, QuotaName};
use fakecloud_e2e::bench::{self, Contender, Measured, Outcome};
use fakecloud_e2e::{Cluster, ClusterOptions, Rates, lb};
use fakecloud_emulator::config::Topology;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");
const IN_FLIGHT: usize = 16;
const DEADLINE: Duration = Duration::from_secs(1200);

/// Wait until `done` holds for `n` distinct objects seen by a watch started before `start()` runs.
async fn watch_until<K, F>(api: Api<K>, n: usize, done: fn(&K) -> bool, start: F) -> Duration
where
    K: kube::Resource + Clone + std::fmt::Debug + k8s_openapi::serde::de::DeserializeOwned + Send + 'static,
    K::DynamicType: Default,
    F: std::future::Future<Output = ()>,
{
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let watch =
        tokio::spawn(watcher(api, watcher::Config::default()).default_backoff().applied_objects().for_each(move |o| {
            if let Ok(o) = o
                && done(&o)
            {
                let _ = tx.send(o.meta().name.clone().unwrap_or_default());
            }
            futures::future::ready(())
        }));
    let t = Instant::now();
    start.await;
    let mut seen = HashSet::new();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while seen.len() < n {
        let Ok(Some(name)) = tokio::time::timeout_at(deadline, rx.recv()).await else {
            panic!("only {} of {n} done after {DEADLINE:?}", seen.len());
        };
        seen.insert(name);
    }
    watch.abort();
    t.elapsed()
}

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

async fn services(n: usize, contender: &Contender, extra: &[String]) -> Option<Outcome> {
    let zones: Vec<String> = ["local-1a", "local-1b", "local-1c"].iter().map(|s| s.to_string()).collect();
    // 198.18.0.0/20: 4,094 VIPs (the default public pool is a /24).
    let topology =
        Topology::new("local-1", &zones, "10.0.0.0/16".parse().unwrap(), "198.18.0.0/20".parse().unwrap()).unwrap();
    let rates = Rates { lb_provision_delay: Duration::ZERO, ..Rates::real() };
    let options = ClusterOptions { rates, topology, ..ClusterOptions::default() };
    let cluster = Cluster::start_with_options("service benchmark", options).await?;
    let limit = u32::try_from(n + 10).unwrap();
    cluster.cloud.set_quota(QuotaName::LoadBalancers, limit).await.unwrap();
    cluster.cloud.set_quota(QuotaName::PublicIps, limit).await.unwrap();
    let mut measured = Measured::start(&cluster, contender, extra).await;
    cluster.initialized_nodes("svc-bench-node", 3, Duration::from_secs(120)).await;
    measured.begin().await;
    cluster.create_namespace("bench").await;
    let api = Api::<Service>::namespaced(cluster.client(), "bench");
    let create = api.clone();
    let wall = watch_until(api, n, |s| lb::ingress_ip(s).is_some(), async move {
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
    .await;
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

fn routed(n: &Node) -> bool {
    n.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| {
        cs.iter().any(|c| {
            c.type_ == "NetworkUnavailable" && c.status == "False" && c.reason.as_deref() == Some("RouteCreated")
        })
    })
}

fn initialized(n: &Node) -> bool {
    n.spec.as_ref().and_then(|s| s.provider_id.as_ref()).is_some()
}

async fn routes(n: usize, contender: &Contender, extra: &[String]) -> Option<Outcome> {
    // /26 pod CIDRs: 1,024 nodes fit the /16 cluster CIDR (the default /24 gives 256).
    let options = ClusterOptions { rates: Rates::real(), node_cidr_mask_size: Some(26), ..ClusterOptions::default() };
    let cluster = Cluster::start_with_options("route benchmark", options).await?;
    let limit = u32::try_from(n + 10).unwrap();
    cluster.cloud.set_quota(QuotaName::Instances, limit).await.unwrap();
    cluster.cloud.set_quota(QuotaName::RoutesPerRouteTable, limit).await.unwrap();
    let measured = Measured::start(&cluster, contender, extra).await;
    let cloud = cluster.cloud.clone();
    let t = Instant::now();
    let init = watch_until(cluster.nodes(), n, initialized, async move {
        for i in 0..n {
            let req = CreateInstanceRequest { name: format!("route-bench-{i:04}"), ..Default::default() };
            cloud.create_instance(&req, None).await.unwrap();
        }
    })
    .await;
    let routed_after = watch_until(cluster.nodes(), n, routed, async {}).await + init;
    let total = t.elapsed();
    let outcome = measured.converged("routes", n, total).await;
    drop(measured);
    // The floor: one NetworkUnavailable patch per Node.
    let nodes = cluster.nodes();
    let bare = floor(n, |i| {
        let nodes = nodes.clone();
        async move {
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            let patch = serde_json::json!({"status": {"conditions": [{"type": "NetworkUnavailable", "status": "False",
                "reason": "Floor", "message": "bare client", "lastTransitionTime": now, "lastHeartbeatTime": now}]}});
            let name = format!("route-bench-{i:04}");
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

#[tokio::main]
async fn main() {
    let (contenders, extra) = (bench::contenders(CCM), bench::extra_args());
    let parts = std::env::var("FAKECLOUD_BENCH_PARTS").unwrap_or_else(|_| "services,routes".into());
    let mut outcomes = Vec::new();
    // Both CCMs on the same work back to back, so that they see about the same load on the machine.
    for n in bench::counts() {
        if parts.contains("services") {
            for contender in &contenders {
                outcomes.extend(services(n, contender, &extra).await);
            }
        }
        if parts.contains("routes") {
            for contender in &contenders {
                outcomes.extend(routes(n, contender, &extra).await);
            }
        }
    }
    print!("{}", bench::comparison(&outcomes));
}

//! The CCM when the cloud misbehaves, judged only through the Kubernetes API and the emulator's audit log:
//! a throttled create is retried after exactly the `Retry-After` the cloud gave (never sooner, and not after
//! the 5 s backoff), and a load-balancing outage keeps Services `<pending>` with `SyncLoadBalancerFailed` until
//! it ends, then they converge without a restart.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use fakecloud_api::{
    AuditEntry, CreateFaultRuleRequest, FaultAction, FaultMatch, FaultTrigger, OutageScope, StartOutageRequest,
};
use fakecloud_e2e::{Cluster, lb, until};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");

fn at(e: &AuditEntry) -> Timestamp {
    e.time.parse().unwrap()
}

async fn started(cluster: &Cluster, ns: &str) -> (fakecloud_e2e::Ccm, Api<Service>) {
    let ccm = cluster.ccm(CCM, &[]);
    ccm.wait_log("starting controllers", Duration::from_secs(30)).await;
    cluster.initialized_nodes(&format!("{ns}-node"), 1, Duration::from_secs(60)).await;
    cluster.namespace(ns).await;
    (ccm, Api::namespaced(cluster.client(), ns))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_create_is_retried_after_exactly_its_retry_after() {
    let Some(cluster) = Cluster::start("CCM Retry-After e2e test").await else {
        return;
    };
    let (_ccm, services) = started(&cluster, "throttled").await;
    // The first two creates are throttled, each saying "come back in 3 s".
    let rule = CreateFaultRuleRequest {
        id: Some("throttle-lb-creates".into()),
        matcher: FaultMatch { operations: vec!["CreateLoadBalancer".into()], ..Default::default() },
        action: FaultAction::Error {
            status: 503,
            code: "RequestLimitExceeded".into(),
            message: Some("slow down".into()),
            headers: BTreeMap::from([("Retry-After".to_string(), "3".to_string())]),
        },
        trigger: FaultTrigger { times: Some(2), ..Default::default() },
        position: None,
    };
    cluster.cloud.add_fault(&rule).await.unwrap();
    services.create(&PostParams::default(), &lb::service("web", 80, serde_json::json!({}))).await.unwrap();
    until(Duration::from_secs(60), "web's EXTERNAL-IP", async || lb::ingress_ip(&services.get_opt("web").await.ok()??))
        .await;

    let calls = cluster.ccm_calls(&["CreateLoadBalancer", "ListLoadBalancers"]).await;
    let creates: Vec<&AuditEntry> = calls.iter().filter(|e| e.operation == "CreateLoadBalancer").collect();
    assert_eq!(
        creates.iter().map(|e| e.status).collect::<Vec<_>>(),
        [503, 503, 201],
        "two throttled creates, then one that works: {creates:#?}"
    );
    for pair in creates.windows(2) {
        let gap = at(pair[1]).duration_since(at(pair[0])).as_secs_f64();
        // Exactly the delay asked for: not sooner, and not the 5 s backoff of other errors.
        assert!((2.99..4.5).contains(&gap), "{gap:.3} s between creates (Retry-After: 3)");
        let early: Vec<&AuditEntry> = calls
            .iter()
            .filter(|e| e.seq > pair[0].seq && at(e).duration_since(at(pair[0])).as_secs_f64() < 2.99)
            .collect();
        assert!(early.is_empty(), "cloud calls before Retry-After elapsed: {early:#?}");
    }
    let events = cluster.events_in("throttled", "web").await;
    let throttled = events.iter().filter(|e| {
        e.reason.as_deref() == Some("SyncLoadBalancerFailed")
            && e.message.as_deref().is_some_and(|m| m.contains("RequestLimitExceeded"))
    });
    assert_eq!(throttled.count(), 2, "a SyncLoadBalancerFailed per throttled try: {events:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_wait_out_a_load_balancing_outage_and_converge() {
    let Some(cluster) = Cluster::start("CCM outage e2e test").await else {
        return;
    };
    let (ccm, services) = started(&cluster, "outage").await;
    let outage = StartOutageRequest {
        scope: OutageScope::Service,
        service: Some(fakecloud_api::Service::LoadBalancing),
        zone: None,
        duration_seconds: Some(10.0),
    };
    cluster.cloud.start_outage(&outage).await.unwrap();
    for name in ["a", "b", "c"] {
        services.create(&PostParams::default(), &lb::service(name, 80, serde_json::json!({}))).await.unwrap();
    }
    // During the outage: pending, each with a SyncLoadBalancerFailed that says the service is unavailable.
    for name in ["a", "b", "c"] {
        let ev = until(Duration::from_secs(8), &format!("{name}'s SyncLoadBalancerFailed"), async || {
            let events = cluster.events_in("outage", name).await;
            events.into_iter().find(|e| e.reason.as_deref() == Some("SyncLoadBalancerFailed"))
        })
        .await;
        assert!(ev.message.as_deref().unwrap().contains("ServiceUnavailable"), "{:?}", ev.message);
        assert_eq!(lb::ingress_ip(&services.get(name).await.unwrap()), None, "<pending> during the outage");
    }
    // After it: all converge, with no restart.
    for name in ["a", "b", "c"] {
        until(Duration::from_secs(40), &format!("{name}'s EXTERNAL-IP"), async || {
            lb::ingress_ip(&services.get_opt(name).await.ok()??)
        })
        .await;
    }
    let lbs = cluster.cloud.list_all_load_balancers().await.unwrap();
    assert_eq!(lbs.len(), 3, "one load balancer per Service: {lbs:#?}");
    assert!(!ccm.log().contains("panicked"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reclaimed_spot_node_leaves_the_cluster_its_route_and_its_load_balancers() {
    let Some(cluster) = Cluster::start("CCM spot reclamation e2e test").await else {
        return;
    };
    let ccm = cluster.ccm(CCM, &["--route-reconciliation-period=1s"]);
    ccm.wait_log("starting controllers", Duration::from_secs(30)).await;
    let on_demand = cluster.initialized_nodes("steady", 1, Duration::from_secs(60)).await.remove(0);
    let req = fakecloud_api::CreateInstanceRequest {
        name: "spot-0".into(),
        market: fakecloud_api::Market::Spot,
        ..Default::default()
    };
    let spot = cluster.cloud.create_instance(&req, None).await.unwrap();
    cluster.namespace("spot").await;
    let services = Api::<Service>::namespaced(cluster.client(), "spot");
    services.create(&PostParams::default(), &lb::service("web", 80, serde_json::json!({}))).await.unwrap();
    // Everything in place: both nodes routed and behind the load balancer.
    until(Duration::from_secs(60), "two routes and two backends", async || {
        let routes = cluster.cloud.list_routes("main").await.ok()?.items;
        let lbs = cluster.cloud.list_all_load_balancers().await.ok()?;
        (routes.len() == 2 && lbs.len() == 1 && lbs[0].backends.len() == 2).then_some(())
    })
    .await;

    // Reclaimed with a 2 s notice: the instance terminates, the kubelet falls silent, the node goes NotReady,
    // and the CCM deletes the Node; the route and the backend go with it.
    let reclaim = fakecloud_api::ReclaimRequest {
        instance_ids: vec![spot.id.clone()],
        notice_seconds: Some(2.0),
        ..Default::default()
    };
    cluster.cloud.reclaim_spot(&reclaim).await.unwrap();
    until(Duration::from_secs(60), "spot-0's Node deleted", async || cluster.node_gone("spot-0").await.then_some(()))
        .await;
    let events = cluster.events_for("spot-0").await;
    assert!(events.iter().any(|e| e.reason.as_deref() == Some("DeletingNode")), "{events:#?}");
    until(Duration::from_secs(30), "its route and its backend gone", async || {
        let routes = cluster.cloud.list_routes("main").await.ok()?.items;
        let lbs = cluster.cloud.list_all_load_balancers().await.ok()?;
        let routed_only_steady = routes.len() == 1 && routes[0].target_instance == on_demand.id;
        (routed_only_steady && lbs[0].backends == [on_demand.id.clone()]).then_some(())
    })
    .await;
    let ev = until(Duration::from_secs(10), "UpdatedLoadBalancer", async || {
        let events = cluster.events_in("spot", "web").await;
        events.into_iter().find(|e| e.reason.as_deref() == Some("UpdatedLoadBalancer"))
    })
    .await;
    assert_eq!(ev.message.as_deref(), Some("Updated load balancer with new hosts"));
    assert!(cluster.node("steady-0").await.is_some(), "the on-demand node is untouched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zone_outage_shuts_down_that_zones_nodes_only_and_they_come_back() {
    let Some(cluster) = Cluster::start("CCM zone outage e2e test").await else {
        return;
    };
    let ccm = cluster.ccm(CCM, &[]);
    ccm.wait_log("starting controllers", Duration::from_secs(30)).await;
    let mut names = Vec::new();
    for (name, zone) in [("dark-a", "local-1a"), ("dark-b", "local-1a"), ("lit-c", "local-1b")] {
        let req =
            fakecloud_api::CreateInstanceRequest { name: name.into(), zone: Some(zone.into()), ..Default::default() };
        cluster.cloud.create_instance(&req, None).await.unwrap();
        names.push(name);
    }
    until(Duration::from_secs(60), "three initialized nodes", async || {
        let nodes = cluster.node_list().await;
        let ready = nodes.iter().filter(|n| n.spec.as_ref().is_some_and(|s| s.provider_id.is_some())).count();
        (ready == 3).then_some(())
    })
    .await;
    let shutdown = |n: &k8s_openapi::api::core::v1::Node| {
        fakecloud_e2e::taint_keys(n).iter().any(|k| k == fakecloud_e2e::SHUTDOWN_TAINT)
    };

    // local-1a goes dark: its instances read as stopped and its kubelets fall silent. Upstream's lifecycle
    // controller then sees NotReady nodes whose instances are shut down: shutdown taint, no deletion.
    let outage = StartOutageRequest {
        scope: OutageScope::Zone,
        service: None,
        zone: Some("local-1a".into()),
        duration_seconds: Some(30.0),
    };
    cluster.cloud.start_outage(&outage).await.unwrap();
    until(Duration::from_secs(40), "local-1a's nodes tainted shutdown", async || {
        let a = cluster.node("dark-a").await?;
        let b = cluster.node("dark-b").await?;
        (shutdown(&a) && shutdown(&b)).then_some(())
    })
    .await;
    let lit = cluster.node("lit-c").await.unwrap();
    assert!(!shutdown(&lit), "the other zone's node is untouched");
    let events = cluster.events_for("dark-a").await;
    assert!(!events.iter().any(|e| e.reason.as_deref() == Some("DeletingNode")), "a dark zone is not a deleted one");

    // The zone comes back: the kubelets beat again, the nodes turn Ready and lose the taint.
    until(Duration::from_secs(60), "local-1a's nodes back", async || {
        let a = cluster.node("dark-a").await?;
        let b = cluster.node("dark-b").await?;
        (!shutdown(&a) && !shutdown(&b)).then_some(())
    })
    .await;
    for name in names {
        assert!(cluster.node(name).await.is_some(), "{name} still exists");
    }
}

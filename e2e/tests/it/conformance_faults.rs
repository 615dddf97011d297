//! Conformance under faults, judged only through the Kubernetes API and the emulator's audit log: a throttled
//! create is retried after exactly the `Retry-After` the cloud gave (never sooner, and not after the 5 s
//! backoff); a create whose answer is lost (applied, then a 500) is replayed in place with its key and leaves
//! one load balancer, not two; a load-balancing outage keeps Services `<pending>` with `SyncLoadBalancerFailed`
//! until it ends, then they converge without a restart; a reclaimed spot machine's Node, route and backend go;
//! a zone outage taints that zone's nodes shutdown and deletes none. Any backend. Against cloud-provider-aws the
//! last three run as they are; the first two state what it does instead: AWS's protocol has no `Retry-After`, so
//! its SDK retries a throttled call in place on its own backoff, and a classic ELB create has no idempotency key.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fakecloud_api::{
    AuditEntry, CreateFaultRuleRequest, FaultAction, FaultMatch, FaultTrigger, OutageScope, StartOutageRequest,
};
use fakecloud_e2e::{Env, HANG, Setup, called_at, case, lb, until};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, PostParams};

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");

/// A node to balance to, and a namespace: its name and its Services.
async fn started(env: &Env, prefix: &str) -> (String, Api<Service>) {
    env.initialized_nodes(&format!("{prefix}-node"), 1).await;
    let ns = env.namespace(prefix).await;
    let api = Api::namespaced(env.client(), &ns);
    (ns, api)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_create_is_retried_after_exactly_its_retry_after() {
    case("throttled", Setup::new(CCM).stated_for_aws(), async |env| {
        let (ns, services) = started(env, "throttled").await;
        // The first two creates are throttled, each saying "come back in 3 s": longer than either CCM waits in
        // place (1 s), so each goes back to the service queue, which waits exactly that.
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
        env.cloud.add_fault(&rule).await.unwrap();
        services.create(&PostParams::default(), &lb::service("web", 80, serde_json::json!({}))).await.unwrap();
        if env.ccm_is_aws() {
            throttled_under_aws(env, &ns, &services, &rule.id.unwrap()).await;
            return;
        }
        lb::wait_for_ip(&services, "web", HANG).await;

        let calls = env.ccm_calls(&["CreateLoadBalancer", "ListLoadBalancers"]).await;
        let creates: Vec<&AuditEntry> = calls.iter().filter(|e| e.operation == "CreateLoadBalancer").collect();
        assert_eq!(
            creates.iter().map(|e| e.status).collect::<Vec<_>>(),
            [503, 503, 201],
            "two throttled creates, then one that works: {creates:#?}"
        );
        for pair in creates.windows(2) {
            let gap = called_at(pair[1]).duration_since(called_at(pair[0])).as_secs_f64();
            // Exactly the delay asked for: not sooner, and not the 5 s backoff of other errors.
            assert!((2.99..4.5).contains(&gap), "{gap:.3} s between creates (Retry-After: 3)");
            let early: Vec<&AuditEntry> = calls
                .iter()
                .filter(|e| e.seq > pair[0].seq && called_at(e).duration_since(called_at(pair[0])).as_secs_f64() < 2.99)
                .collect();
            assert!(early.is_empty(), "cloud calls before Retry-After elapsed: {early:#?}");
        }
        // Occurrences, not Event objects: client-go's recorder folds an identical event into the one already
        // written (`count` + 1; tools/record/events_cache.go), so two throttled tries with the same message are
        // one Event with count 2 under upstream's CCM, and two Events when the messages differ.
        let events = env.events_in(&ns, "web").await;
        let throttled: i32 = events
            .iter()
            .filter(|e| {
                e.reason.as_deref() == Some("SyncLoadBalancerFailed")
                    && e.message.as_deref().is_some_and(|m| m.contains("RequestLimitExceeded"))
            })
            .map(|e| e.count.unwrap_or(1))
            .sum();
        assert_eq!(throttled, 2, "a SyncLoadBalancerFailed per throttled try: {events:#?}");
    })
    .await;
}

/// cloud-provider-aws under the same two throttled creates: the face answers them as ELB does (400 `Throttling`,
/// no `Retry-After`: AWS's protocol has none), and its SDK's standard retryer tries the call three times on its
/// own jittered backoff (aws_sdk.go's `customRetryer`), so the third try makes the ELB within the one sync: the
/// creates are two refused then one made, and no sync fails.
async fn throttled_under_aws(env: &Env, ns: &str, services: &Api<Service>, rule: &str) {
    lb::wait_for_ingress(services, "web", HANG).await;
    let creates = env.ccm_calls(&["CreateLoadBalancer"]).await;
    let seen: Vec<(u16, Option<&str>, Option<&str>)> =
        creates.iter().map(|e| (e.status, e.error_code.as_deref(), e.fault.as_deref())).collect();
    assert_eq!(
        seen,
        [(400, Some("Throttling"), Some(rule)), (400, Some("Throttling"), Some(rule)), (200, None, None)],
        "two throttled tries, then the one that makes the ELB"
    );
    let events = env.events_in(ns, "web").await;
    let failed: Vec<_> = events.iter().filter(|e| e.reason.as_deref() == Some("SyncLoadBalancerFailed")).collect();
    assert!(failed.is_empty(), "the SDK's retries absorb both; no sync fails: {failed:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_whose_answer_is_lost_makes_one_load_balancer() {
    case("lost-answer", Setup::new(CCM).stated_for_aws(), async |env| {
        let (ns, services) = started(env, "lost").await;
        // The cloud creates the load balancer, then answers 500 as if it had not: the CCM must not make another.
        let rule = CreateFaultRuleRequest {
            id: Some("lose-the-create-answer".into()),
            matcher: FaultMatch { operations: vec!["CreateLoadBalancer".into()], ..Default::default() },
            action: FaultAction::ApplyThenFail { status: 500, code: "InternalError".into(), message: None },
            trigger: FaultTrigger { times: Some(1), ..Default::default() },
            position: None,
        };
        env.cloud.add_fault(&rule).await.unwrap();
        let web =
            services.create(&PostParams::default(), &lb::service("web", 80, serde_json::json!({}))).await.unwrap();
        lb::wait_for_ingress(&services, "web", HANG).await;
        let lbs = env.cloud.list_all_load_balancers().await.unwrap();
        let mine: Vec<_> = lbs.iter().filter(|l| l.name == lb::name(&web)).collect();
        assert_eq!(mine.len(), 1, "one load balancer for the Service: {lbs:#?}");
        let creates = env.ccm_calls(&["CreateLoadBalancer"]).await;
        assert_eq!(creates.first().map(|c| c.status), Some(500), "the lost answer: {creates:#?}");
        if env.ccm_is_aws() {
            // A classic ELB's create has no idempotency token: the SDK's retry in place (a 500 is retryable) finds
            // the name taken, `DuplicateLoadBalancerName`, ELB's error for it; that fails the sync once, and the
            // next one finds the ELB by name (`DescribeLoadBalancers` before any create, aws.go) and goes on.
            let codes: Vec<Option<&str>> = creates.iter().map(|c| c.error_code.as_deref()).collect();
            assert_eq!(codes, [Some("InternalFailure"), Some("DuplicateLoadBalancerName")], "{creates:#?}");
            let events = env.events_in(&ns, "web").await;
            let failed: i32 = events
                .iter()
                .filter(|e| e.reason.as_deref() == Some("SyncLoadBalancerFailed"))
                .map(|e| e.count.unwrap_or(1))
                .sum();
            assert_eq!(failed, 1, "one failed sync, the retry's: {events:#?}");
            return;
        }
        // Then the same create replayed with its idempotency key (200), in place, as a cloud SDK retries a 5xx
        // (the AWS SDK's standard retryer: 3 tries, jittered backoff) — never a new one (201) nor a clash with
        // the first (409).
        let retries = &creates[1..];
        assert!(!retries.is_empty() && retries.iter().all(|c| c.status == 200), "no second create: {creates:#?}");
        let gap = called_at(&retries[0]).duration_since(called_at(&creates[0])).as_secs_f64();
        assert!(gap < 3.0, "the replay came {gap:.3} s after the lost answer: retried in place, not requeued");
        // Retried in place, the sync did not fail: no SyncLoadBalancerFailed.
        let failed = env.events_in(&ns, "web").await;
        let failed: Vec<_> = failed.iter().filter(|e| e.reason.as_deref() == Some("SyncLoadBalancerFailed")).collect();
        assert!(failed.is_empty(), "a lost answer retried in place fails no sync: {failed:#?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_wait_out_a_load_balancing_outage_and_converge() {
    case("lb-outage", Setup::new(CCM).stated_for_aws(), async |env| {
        let (ns, services) = started(env, "outage").await;
        // Until it is ended below, once the failures were seen: an outage of a fixed length could end before a
        // busy machine showed them.
        let outage = StartOutageRequest {
            scope: OutageScope::Service,
            service: Some(fakecloud_api::Service::LoadBalancing),
            zone: None,
            duration_seconds: None,
        };
        let outage = env.cloud.start_outage(&outage).await.unwrap();
        for name in ["a", "b", "c"] {
            services.create(&PostParams::default(), &lb::service(name, 80, serde_json::json!({}))).await.unwrap();
        }
        // During the outage: pending, each with a SyncLoadBalancerFailed that says the service is unavailable
        // (ELB's own code is `ServiceUnavailable` too; the SDK retried it first).
        for name in ["a", "b", "c"] {
            let ev = until(HANG, &format!("{name}'s SyncLoadBalancerFailed"), async || {
                let events = env.events_in(&ns, name).await;
                events.into_iter().find(|e| e.reason.as_deref() == Some("SyncLoadBalancerFailed"))
            })
            .await;
            assert!(ev.message.as_deref().unwrap().contains("ServiceUnavailable"), "{:?}", ev.message);
            assert_eq!(lb::ingress(&services.get(name).await.unwrap()), None, "<pending> during the outage");
        }
        env.cloud.stop_outage(&outage.id).await.unwrap();
        // After it: all converge, with no restart.
        for name in ["a", "b", "c"] {
            lb::wait_for_ingress(&services, name, HANG).await;
        }
        let names: Vec<String> = services.list(&Default::default()).await.unwrap().items.iter().map(lb::name).collect();
        let lbs = env.cloud.list_all_load_balancers().await.unwrap();
        let mine = lbs.iter().filter(|l| names.contains(&l.name)).count();
        assert_eq!(mine, 3, "one load balancer per Service, none twice: {lbs:#?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reclaimed_spot_node_leaves_the_cluster_its_route_and_its_load_balancers() {
    case("spot", Setup::new(CCM).stated_for_aws(), async |env| {
        let on_demand = env.initialized_nodes("steady", 1).await.remove(0);
        let req = fakecloud_api::CreateInstanceRequest {
            name: "spot-0".into(),
            market: fakecloud_api::Market::Spot,
            ..Default::default()
        };
        let spot = env.create_instance(req).await;
        let ns = env.namespace("spot").await;
        let services = Api::<Service>::namespaced(env.client(), &ns);
        let web =
            services.create(&PostParams::default(), &lb::service("web", 80, serde_json::json!({}))).await.unwrap();
        let routed = async |id: &str| {
            let routes = env.cloud.list_routes("main").await.map(|l| l.items).unwrap_or_default();
            routes.iter().any(|r| r.target_instance == id)
        };
        let backends = async || -> Option<Vec<String>> {
            Some(env.cloud.find_load_balancer(&lb::name(&web)).await.ok()??.backends)
        };
        // Everything in place: both nodes routed and behind the load balancer.
        until(env.timing.routes(), "both nodes routed and backends", async || {
            let b = backends().await?;
            (routed(&on_demand.id).await && routed(&spot.id).await && b.contains(&on_demand.id) && b.contains(&spot.id))
                .then_some(())
        })
        .await;

        // Reclaimed with a 2 s notice: the instance terminates, the kubelet falls silent, the node goes NotReady,
        // and the CCM deletes the Node; the route and the backend go with it.
        let reclaim = fakecloud_api::ReclaimRequest {
            instance_ids: vec![spot.id.clone()],
            notice_seconds: Some(2.0),
            ..Default::default()
        };
        env.cloud.reclaim_spot(&reclaim).await.unwrap();
        let spot_node = env.node_name(&spot);
        until(env.timing.node_loss(), "spot-0's Node deleted", async || env.node_gone(&spot_node).await.then_some(()))
            .await;
        // Waited for, not read once: the event is written by the CCM's event writer, which may land it after
        // the delete it announces (as client-go's broadcaster may).
        env.event("default", &spot_node, "DeletingNode", HANG).await;
        until(env.timing.routes(), "its route and its backend gone", async || {
            let b = backends().await?;
            (routed(&on_demand.id).await
                && !routed(&spot.id).await
                && b.contains(&on_demand.id)
                && !b.contains(&spot.id))
            .then_some(())
        })
        .await;
        let ev = env.event(&ns, "web", "UpdatedLoadBalancer", HANG).await;
        assert_eq!(ev.message.as_deref(), Some("Updated load balancer with new hosts"));
        assert!(env.node(&env.node_name(&on_demand)).await.is_some(), "the on-demand node is untouched");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zone_outage_shuts_down_that_zones_nodes_only_and_they_come_back() {
    case("zone-outage", Setup::new(CCM).stated_for_aws(), async |env| {
        let mut names = Vec::new();
        for (name, zone) in [("dark-a", "local-1a"), ("dark-b", "local-1a"), ("lit-c", "local-1b")] {
            names.push(env.node_name(&env.instance(name, zone).await));
        }
        let (dark_a, dark_b, lit_c) = (&names[0], &names[1], &names[2]);
        until(HANG, "three initialized nodes", async || {
            let nodes = env.node_list().await;
            let mine = nodes.iter().filter(|n| n.metadata.name.as_ref().is_some_and(|m| names.contains(m)));
            (mine.filter(|n| fakecloud_e2e::initialized(n)).count() == 3).then_some(())
        })
        .await;
        let shutdown = |n: &k8s_openapi::api::core::v1::Node| {
            fakecloud_e2e::taint_keys(n).iter().any(|k| k == fakecloud_e2e::SHUTDOWN_TAINT)
        };

        // local-1a goes dark: its instances read as stopped and its kubelets fall silent. Upstream's lifecycle
        // controller then sees NotReady nodes whose instances are shut down: shutdown taint, no deletion. (Long
        // enough for the cluster's grace period to run out, and then some; ended below, so never before the taint
        // was seen, however slow the machine.)
        let dark_for = env.timing.node_grace + 4 * env.timing.node_monitor + Duration::from_secs(15);
        let outage = StartOutageRequest {
            scope: OutageScope::Zone,
            service: None,
            zone: Some("local-1a".into()),
            duration_seconds: None,
        };
        let darkened = Instant::now();
        let outage = env.cloud.start_outage(&outage).await.unwrap();
        until(env.timing.node_loss(), "local-1a's nodes tainted shutdown", async || {
            let a = env.node(dark_a).await?;
            let b = env.node(dark_b).await?;
            (shutdown(&a) && shutdown(&b)).then_some(())
        })
        .await;
        let lit = env.node(lit_c).await.unwrap();
        assert!(!shutdown(&lit), "the other zone's node is untouched");
        let events = env.events_for(dark_a).await;
        assert!(
            !events.iter().any(|e| e.reason.as_deref() == Some("DeletingNode")),
            "a dark zone is not a deleted one"
        );

        // The zone comes back (after dark_for at least): the kubelets beat again, the nodes turn Ready and lose the
        // taint.
        tokio::time::sleep(dark_for.saturating_sub(darkened.elapsed())).await;
        env.cloud.stop_outage(&outage.id).await.unwrap();
        until(env.timing.node_loss(), "local-1a's nodes back", async || {
            let a = env.node(dark_a).await?;
            let b = env.node(dark_b).await?;
            (!shutdown(&a) && !shutdown(&b)).then_some(())
        })
        .await;
        for name in &names {
            assert!(env.node(name).await.is_some(), "{name} still exists");
        }
    })
    .await;
}

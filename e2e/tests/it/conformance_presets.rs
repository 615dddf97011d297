//! Conformance under each real cloud's throttling, the emulator's failure-shape presets (issue #26): with a
//! preset installed, three new nodes are initialized and routed and three `LoadBalancer` Services get their
//! EXTERNAL-IP, the CCM having been refused in that cloud's shape on the way (EC2's 503 `RequestLimitExceeded`,
//! ELB's 400 `Throttling`, ARM's 429s with and without `Retry-After`, GCP's 403 `rateLimitExceeded` until the
//! window ends), and never in a hot loop: a bounded number of calls, none bunched, and a load balancer refused
//! with `Retry-After` is not tried again before it. Judged through the Kubernetes API and the audit log; any
//! backend, any of the three CCMs (cloud-provider-aws under the two AWS shapes).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use fakecloud_api::RateLimitScope;
use fakecloud_api::{AuditEntry, CreateInstanceRequest, QuotaName, RateLimit, RateLimitKind, RateLimitPreset};
use fakecloud_api::{Instance, SetRateLimitRequest};
use fakecloud_e2e::{Env, HANG, Setup, called_at, case, lb, until};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");

const NODES: usize = 3;
const SERVICES: [&str; 3] = ["a", "b", "c"];
/// The CCM's writes. The case's tighter limits cover these and not every write, so that the case's own
/// `CreateInstance` calls are not refused.
const CCM_WRITES: [&str; 5] =
    ["CreateRoute", "DeleteRoute", "CreateLoadBalancer", "UpdateLoadBalancer", "DeleteLoadBalancer"];
const LB_OPERATIONS: [&str; 4] =
    ["ListLoadBalancers", "CreateLoadBalancer", "UpdateLoadBalancer", "DeleteLoadBalancer"];
/// The CCM's cloud calls over a case, at most: its work is a few calls per node and per Service, a route
/// listing per period and a retry per refusal after a backoff, a few hundred on a slow machine; a hot loop
/// makes thousands.
const CALLS_AT_MOST: usize = 800;
/// How long a quota refusal's retries are watched, and how many creates it may take: the first, then after
/// 5 s and 15 s of backoff (at most one more, when a throttle refusal and a quota refusal share a backoff step).
const QUOTA_WATCH: std::time::Duration = std::time::Duration::from_secs(15);
const QUOTA_TRIES_AT_MOST: usize = 4;
/// Calls of one operation in any one second, at most. Upstream's node queue backs off from 5 ms (5, 10, 20,
/// ... ms: about eight retries in the first second, per node), so a backoff may bunch a little; a hot loop on
/// the local emulator makes hundreds.
const PER_SECOND_AT_MOST: usize = 40;
/// How long the work may take before the case calls it a hang: past upstream's backoff steps, not [`HANG`].
/// Upstream's node queue backs a Node off from 5 ms, doubling up to 1,000 s, and every refused try counts: a
/// Node refused through the rest of a 20 s window (14 quick tries in a CI run on kind, upstream's CCM) waits 20 to
/// 82 s for its next try, 164 s if that one is refused too. Nothing wakes it sooner on kind, whose kubelets write
/// their Node on a change only (the simulated ones write it every few seconds, and each write re-queues it).
/// Upstream's service queue backs off 5 s to 300 s.
const CONVERGE_HANG: std::time::Duration = std::time::Duration::from_secs(360);

/// A preset's case: the refusals the CCM must be seen getting, and the tighter limits of the preset's own
/// shape that make its work meet them.
struct Shape {
    preset: RateLimitPreset,
    status: u16,
    /// Any of these codes.
    codes: &'static [&'static str],
    tighter: Vec<Tighter>,
    /// Whether the case states what cloud-provider-aws does under it (AWS's own shapes do: the SDK's retries;
    /// the other clouds' shapes are for their CCMs), and how its tighter limits are loosened for it: each of its
    /// classic ELB syncs makes several load balancer writes (create, attributes, health check, instances), every
    /// one of them in every sync until it is done, and the attributes on every sync (kubernetes#69362), so a
    /// bucket smaller than a sync's writes refuses every sync, each refused call tried three times in a second.
    aws: Option<fn(SetRateLimitRequest) -> SetRateLimitRequest>,
}

/// `(id suffix, the preset's limit it is shaped like, what is tighter)`.
type Tighter = (&'static str, &'static str, fn(SetRateLimitRequest) -> SetRateLimitRequest);

fn ccm_writes(capacity: u32, spec: SetRateLimitRequest) -> SetRateLimitRequest {
    SetRateLimitRequest {
        scope: RateLimitScope::Operations,
        operations: CCM_WRITES.map(String::from).to_vec(),
        capacity,
        ..spec
    }
}

/// Install the preset and the tighter limits, run the work, judge it, clear the presets.
async fn under(shape: Shape) {
    let name = shape.preset.name();
    let setup = if shape.aws.is_some() { Setup::new(CCM).stated_for_aws() } else { Setup::new(CCM) };
    case(name, setup, async |env| {
        let cloud = &env.cloud;
        // A preset's limits are per token (the CCM's budget is its own, as a cloud account's is; the simulated
        // kubelets list instances with the admin token several times a second).
        let installed = cloud.install_rate_limit_preset(shape.preset).await.unwrap().items;
        assert!(installed.iter().all(|l| l.limit.per_token), "{installed:#?}");
        // The presets' real sizes are far above what 3 nodes and 3 Services ask for: the same shapes (status,
        // code, message, Retry-After or none, headers, per token), with room for a couple of calls, so the work
        // meets them.
        let tight: Vec<SetRateLimitRequest> = shape
            .tighter
            .iter()
            .map(|(_, like, tighter)| {
                let spec = tighter(installed.iter().find(|l| l.id == format!("{name}-{like}")).unwrap().limit.clone());
                match shape.aws {
                    Some(loosened) if env.ccm_is_aws() => loosened(spec),
                    _ => spec,
                }
            })
            .collect();
        // A window's limit is met only by calls inside one window, and the work's first burst (every node's
        // lookup and every Service's sync) lasts seconds. Begun late in a window, a loaded machine spread it over
        // two and neither refused; begun at a window's start, it stays in one.
        if let Some(window) =
            tight.iter().filter(|s| s.kind == RateLimitKind::FixedWindow).filter_map(|s| s.window_seconds).max()
        {
            at_window_start(window).await;
        }
        for ((suffix, ..), spec) in shape.tighter.iter().zip(&tight) {
            cloud.set_rate_limit(&format!("{name}-e2e-{suffix}"), spec).await.unwrap();
        }
        // Then the machines: their Nodes register after the boot delay (a kubelet's poll), so all the CCM's work
        // on them is under the throttle. The case's own calls use the admin token, which the limits do not count.
        let mut instances = Vec::new();
        for i in 0..NODES {
            instances.push(
                env.create_instance(CreateInstanceRequest { name: format!("{name}-{i}"), ..Default::default() }).await,
            );
        }
        let ns = env.namespace(name).await;
        let services = Api::<Service>::namespaced(env.client(), &ns);
        for s in SERVICES {
            services.create(&PostParams::default(), &lb::service(s, 80, serde_json::json!({}))).await.unwrap();
        }

        converge(env, &instances, &services).await;
        let calls = env.ccm_audit().await;
        let refused: Vec<&AuditEntry> = calls
            .iter()
            .filter(|e| {
                e.fault.as_deref().is_some_and(|f| f.starts_with(name))
                    && e.status == shape.status
                    && e.error_code.as_deref().is_some_and(|c| shape.codes.contains(&c))
            })
            .collect();
        assert!(
            !refused.is_empty(),
            "the CCM was refused {} {:?} at least once: {calls:#?}",
            shape.status,
            shape.codes
        );
        eprintln!("{name}: {} of the CCM's {} calls refused", refused.len(), calls.len());
        // Each tighter limit was met, or it tested nothing.
        for (suffix, ..) in &shape.tighter {
            let id = format!("{name}-e2e-{suffix}");
            assert!(refused.iter().any(|e| e.fault.as_deref() == Some(id.as_str())), "{id} never refused the CCM");
        }
        not_hot(&calls);
        for spec in &tight {
            if let (RateLimitKind::FixedWindow, Some(window), true) = (spec.kind, spec.window_seconds, spec.retry_after)
            {
                retry_after_kept(&calls, &refused, window);
            }
        }
        if env.ccm_is_aws() {
            retried_in_place(&calls, &refused);
        } else if refused.iter().any(|e| LB_OPERATIONS.contains(&e.operation.as_str())) {
            // A refused load balancer call is a Warning on its Service naming the refusal: SyncLoadBalancerFailed
            // from the Service's own sync, UpdateLoadBalancerFailed from a node sync's backend update
            // (k8s.io/cloud-provider v0.37.2 controllers/service/controller.go:L824-860); which one depends on
            // which sync was refused.
            let all: Vec<_> = futures::future::join_all(SERVICES.map(|s| env.events_in(&ns, s))).await.concat();
            assert!(
                all.iter().any(|e| matches!(
                    e.reason.as_deref(),
                    Some("SyncLoadBalancerFailed" | "UpdateLoadBalancerFailed")
                ) && e
                    .message
                    .as_deref()
                    .is_some_and(|m| shape.codes.iter().any(|c| m.contains(c)))),
                "a SyncLoadBalancerFailed or UpdateLoadBalancerFailed naming the refusal: {all:#?}"
            );
        }

        quota_refusal_reported_not_retried_hot(env, shape.preset, &services).await;

        let cleared: Vec<String> =
            cloud.clear_rate_limit_presets().await.unwrap().items.into_iter().map(|l| l.id).collect();
        assert_eq!(
            cleared.len(),
            installed.len() + shape.tighter.len(),
            "the preset's and the case's limits: {cleared:?}"
        );
        let left: Vec<RateLimit> = cloud.list_rate_limits().await.unwrap().items;
        assert!(left.iter().all(|l| !l.id.starts_with(name)), "{left:#?}");
    })
    .await;
}

/// With the load-balancers quota used up, one more Service: the create is refused in the preset's shape (as
/// `GET /v1/rate-limit-presets` lists it), the CCM reports it (a `SyncLoadBalancerFailed` Warning naming the
/// code) and retries it with backoff, not hot: from the first refusal, at most [`QUOTA_TRIES_AT_MOST`] creates
/// in [`QUOTA_WATCH`] (upstream's service queue backs off 5 s, 10 s, 20 s ...; a hot loop makes hundreds).
/// The harness puts the quota back afterwards.
async fn quota_refusal_reported_not_retried_hot(env: &Env, preset: RateLimitPreset, services: &Api<Service>) {
    let cloud = &env.cloud;
    let presets = cloud.list_rate_limit_presets().await.unwrap().items;
    let info = presets.iter().find(|p| p.name == preset).unwrap();
    assert!(info.installed, "{info:#?}");
    let refusal = info.quota_refusals.iter().find(|r| r.quota == QuotaName::LoadBalancers).unwrap();
    let (status, code) = (refusal.status, refusal.code.as_str());
    let used = cloud.get_quota(QuotaName::LoadBalancers).await.unwrap().usage.unwrap_or_default();
    cloud.set_quota(QuotaName::LoadBalancers, used).await.unwrap();
    let ns = services.namespace().unwrap_or_default();
    services.create(&PostParams::default(), &lb::service("over", 80, serde_json::json!({}))).await.unwrap();

    let reported = format!("a SyncLoadBalancerFailed about over naming {code}");
    until(HANG, &reported, async || {
        env.events_in(ns, "over").await.into_iter().find(|e| {
            e.reason.as_deref() == Some("SyncLoadBalancerFailed")
                && e.type_.as_deref() == Some("Warning")
                && e.message.as_deref().is_some_and(|m| m.contains(code))
        })
    })
    .await;
    let creates = async || env.ccm_calls(&["CreateLoadBalancer"]).await;
    let refused_at = |calls: &[AuditEntry]| {
        calls.iter().find(|e| e.status == status && e.error_code.as_deref() == Some(code)).map(called_at)
    };
    let first = refused_at(&creates().await).unwrap_or_else(|| panic!("no CreateLoadBalancer refused {status} {code}"));
    // Watched for its whole length from the refusal (the emulator answers on this machine's clock).
    let watched = first.duration_since(Timestamp::now()).as_secs_f64() + QUOTA_WATCH.as_secs_f64();
    tokio::time::sleep(std::time::Duration::from_secs_f64(watched.max(0.0))).await;
    let tries: Vec<AuditEntry> = creates()
        .await
        .into_iter()
        .filter(|e| {
            let since = called_at(e).duration_since(first).as_secs_f64();
            (0.0..QUOTA_WATCH.as_secs_f64()).contains(&since)
        })
        .collect();
    assert!(
        tries.len() <= QUOTA_TRIES_AT_MOST,
        "{} creates within {QUOTA_WATCH:?} of the first {status} {code}: retried hot: {tries:#?}",
        tries.len()
    );
    assert!(lb::ingress_address(&services.get("over").await.unwrap()).is_none(), "over the quota, still <pending>");
}

/// Sleeps until just after the next start of a `seconds` window: the emulator's windows are aligned to the
/// clock (from the Unix epoch), and it answers on this machine's clock.
async fn at_window_start(seconds: u32) {
    let window = i64::from(seconds) * 1000;
    let now = Timestamp::now().as_millisecond();
    let next = (now.div_euclid(window) + 1) * window;
    // A little past the start, so a call sent at once is not counted in the window before.
    let wait = u64::try_from(next - now).unwrap_or_default() + 50;
    tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
}

/// Every node initialized and routed, every Service with its EXTERNAL-IP.
async fn converge(env: &Env, instances: &[Instance], services: &Api<Service>) {
    env.wait_initialized(instances, CONVERGE_HANG).await;
    until(env.timing.routes(), "a route per node", async || {
        let routes = env.cloud.list_routes("main").await.ok()?.items;
        instances.iter().all(|i| routes.iter().any(|r| r.target_instance == i.id)).then_some(())
    })
    .await;
    for s in SERVICES {
        lb::wait_for_ingress(services, s, CONVERGE_HANG).await;
    }
}

/// A bounded number of calls, and none bunched: no operation called more than [`PER_SECOND_AT_MOST`] times in
/// any second.
fn not_hot(calls: &[AuditEntry]) {
    assert!(calls.len() <= CALLS_AT_MOST, "{} cloud calls (at most {CALLS_AT_MOST})", calls.len());
    let mut by_operation: BTreeMap<&str, Vec<Timestamp>> = BTreeMap::new();
    for e in calls {
        by_operation.entry(e.operation.as_str()).or_default().push(called_at(e));
    }
    for (op, times) in by_operation {
        for (i, t) in times.iter().enumerate() {
            let within = times[i..].iter().take_while(|u| u.duration_since(*t).as_secs_f64() < 1.0).count();
            assert!(within <= PER_SECOND_AT_MOST, "{within} {op} calls in the second from {t}: a hot loop");
        }
    }
}

/// cloud-provider-aws's SDK retries a throttled call in place (aws-sdk-go-v2's standard retryer, three attempts,
/// which `customRetryer` in aws_sdk.go wraps; `RequestLimitExceeded` and `Throttling` are among its throttle
/// codes), so a refusal is seen as the same operation called again, and a Warning on a Service only when all three
/// attempts were refused. Each refused call was called again after it: retried, not dropped.
fn retried_in_place(calls: &[AuditEntry], refused: &[&AuditEntry]) {
    for r in refused {
        assert!(
            calls.iter().any(|e| e.seq > r.seq && e.operation == r.operation),
            "{} refused at {} ({:?}) and never called again: {calls:#?}",
            r.operation,
            r.time,
            r.error_code
        );
    }
}

/// With a clock-aligned window that says `Retry-After` (its end), a Service whose load balancer create was
/// refused in a window is not tried again in it: after a refused create, creates in the rest of that window are
/// at most one per other Service (their own first tries). Creates only: a node sync whose `UpdateLoadBalancer`
/// fails puts the Service on the queue for a full sync at once, Retry-After or not, and each node change makes
/// one (upstream's service controller, docs/upstream-ccm.md trap 15; fakecloud-ccm does the same).
fn retry_after_kept(calls: &[AuditEntry], refused: &[&AuditEntry], window_seconds: u32) {
    let window_ms = i64::from(window_seconds) * 1000;
    for r in refused.iter().filter(|e| e.operation == "CreateLoadBalancer") {
        let ends = (called_at(r).as_millisecond().div_euclid(window_ms) + 1) * window_ms;
        let again: Vec<&AuditEntry> = calls
            .iter()
            .filter(|e| e.seq > r.seq && e.operation == r.operation && called_at(e).as_millisecond() < ends)
            .collect();
        assert!(
            again.len() < SERVICES.len(),
            "{} refused at {} with Retry-After to the window's end, then called {} times before it: {again:#?}",
            r.operation,
            r.time,
            again.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_under_aws_ec2_throttling() {
    under(Shape {
        preset: RateLimitPreset::AwsEc2,
        status: 503,
        codes: &["RequestLimitExceeded"],
        // The mutating bucket, 2 tokens refilled one per 2 s: six creates at once meet it.
        tighter: vec![("writes", "mutating", |s| SetRateLimitRequest {
            refill_per_second: Some(0.5),
            ..ccm_writes(2, s)
        })],
        // The same limit as for the others: its route and load balancer writes go through it.
        aws: Some(|s| s),
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_under_aws_elb_throttling() {
    under(Shape {
        preset: RateLimitPreset::AwsElb,
        status: 400,
        codes: &["Throttling"],
        // The load balancer writes, 1 token refilled one per 5 s: three creates at once meet it.
        tighter: vec![("writes", "mutating", |s| SetRateLimitRequest {
            capacity: 1,
            refill_per_second: Some(0.2),
            ..s
        })],
        // Room for one classic ELB sync's writes (four or five), refilled one per 2 s: the three first syncs at
        // once meet it, and a retry after the service queue's 5 s backoff finds room.
        aws: Some(|s| SetRateLimitRequest { capacity: 5, refill_per_second: Some(0.5), ..s }),
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_under_azure_arm_throttling() {
    under(Shape {
        preset: RateLimitPreset::AzureArm,
        status: 429,
        codes: &["SubscriptionRequestsThrottled", "OperationNotAllowed"],
        tighter: vec![
            // The subscription's writes (Retry-After), 2 tokens refilled one per 2 s ...
            ("writes", "subscription-writes", |s| SetRateLimitRequest {
                refill_per_second: Some(0.5),
                ..ccm_writes(2, s)
            }),
            // ... and Compute's window on instance reads (no Retry-After), 6 reads per 20 s. The work takes a
            // dozen reads or more (a lookup per node, a backend listing per load balancer sync, each retry): at
            // 2 per 20 s that alone is 2 minutes, which a loaded kind run went past; the first burst (three
            // nodes and three Services at once, then the retries: nine reads in two seconds here), begun at the
            // window's start, still meets it.
            ("instance-reads", "compute-high-cost-get", |s| SetRateLimitRequest {
                capacity: 6,
                window_seconds: Some(20),
                ..s
            }),
        ],
        aws: None,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_under_gcp_compute_throttling() {
    under(Shape {
        preset: RateLimitPreset::GcpCompute,
        status: 403,
        codes: &["rateLimitExceeded"],
        // The per-minute writes as 2 per 10 s window (Retry-After to its end), so a refused Service waits
        // seconds, not up to a minute.
        tighter: vec![("writes", "writes", |s| SetRateLimitRequest { window_seconds: Some(10), ..ccm_writes(2, s) })],
        aws: None,
    })
    .await;
}

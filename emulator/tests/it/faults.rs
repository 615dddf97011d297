//! Fault injection over real HTTP: each action and trigger, rate limits, outages, spot reclamation.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use crate::common::{Emu, HANG, eventually, wait_state};
use fakecloud_api::limits::FAULT_COUNT_MAX;
use fakecloud_api::{
    AuditQuery, CreateFaultRuleRequest, CreateInstanceRequest, CreateLbFaultRuleRequest, CreateLoadBalancerRequest,
    FaultAction, FaultMatch, FaultTrigger, InstanceState, LbFaultAction, LbFaultMatch, Listener, Market,
    NoResponseMode, OutageScope, Protocol, QuotaName, RateLimitScope, ReclaimRequest, Service, SetRateLimitRequest,
    StartOutageRequest, codes,
};
use fakecloud_emulator::config::{Config, Timings};

fn rule(ops: &[&str], action: FaultAction, trigger: FaultTrigger) -> CreateFaultRuleRequest {
    CreateFaultRuleRequest {
        id: None,
        matcher: FaultMatch { operations: ops.iter().map(|s| s.to_string()).collect(), ..Default::default() },
        action,
        trigger,
        position: None,
    }
}

fn error(status: u16, code: &str) -> FaultAction {
    FaultAction::Error { status, code: code.into(), message: None, headers: Default::default() }
}

fn lb(name: &str) -> CreateLoadBalancerRequest {
    CreateLoadBalancerRequest {
        name: name.into(),
        listeners: vec![Listener { protocol: Protocol::Tcp, port: 80, backend_port: 1 }],
        ..Default::default()
    }
}

fn inst(name: &str) -> CreateInstanceRequest {
    CreateInstanceRequest { name: name.into(), ..Default::default() }
}

#[tokio::test]
async fn an_error_rule_answers_with_its_status_code_and_headers() {
    let emu = Emu::start().await;
    let mut action = error(503, "ServiceUnavailable");
    if let FaultAction::Error { headers, .. } = &mut action {
        headers.insert("Retry-After".into(), "7".into());
    }
    let added = emu.admin.add_fault(&rule(&["*LoadBalancer*"], action, FaultTrigger::default())).await.unwrap();
    assert_eq!(added.id, "fault-1");
    let err = emu.user.create_load_balancer(&lb("a"), None).await.unwrap_err();
    assert_eq!(
        (err.status(), err.code(), err.retry_after()),
        (Some(503), Some("ServiceUnavailable"), Some(Duration::from_secs(7)))
    );
    emu.instance("n1").await; // other operations are untouched
    assert!(emu.user.list_all_load_balancers().await.is_err());

    let audit = emu
        .admin
        .audit(&AuditQuery { operation: Some("CreateLoadBalancer".into()), ..Default::default() })
        .await
        .unwrap()
        .items;
    assert_eq!((audit[0].status, audit[0].fault.as_deref()), (503, Some("fault-1")));
    let listed = emu.admin.list_faults().await.unwrap().items;
    assert_eq!((listed[0].matched, listed[0].injected), (2, 2));
    let (_, metrics) = emu.raw(reqwest::Method::GET, "/metrics", None, None).await;
    assert!(metrics.as_str().unwrap().contains(r#"fakecloud_faults_injected_total{fault="fault-1"} 2"#));

    emu.admin.delete_fault("fault-1").await.unwrap();
    emu.user.create_load_balancer(&lb("a"), None).await.unwrap();
}

/// A rule's headers may not frame the answer or end the connection: those are the server's (a Content-Length
/// of 0 on an answer with a body, or a Transfer-Encoding, left the client with an empty or garbled answer while
/// the audit said it got the error).
#[tokio::test]
async fn an_error_rule_may_not_set_the_answers_framing() {
    let emu = Emu::start().await;
    for (name, value) in [
        ("Content-Length", "0"),
        ("Transfer-Encoding", "chunked"),
        ("connection", "close"),
        ("Keep-Alive", "timeout=1"),
        ("Upgrade", "h2c"),
    ] {
        let mut action = error(503, "Busy");
        if let FaultAction::Error { headers, .. } = &mut action {
            headers.insert(name.into(), value.into());
        }
        let err = emu.admin.add_fault(&rule(&[], action, FaultTrigger::default())).await.unwrap_err();
        assert_eq!(err.status(), Some(400), "{name}: {err}");
        assert!(err.to_string().contains("set by the server"), "{name}: {err}");
    }
    // Any other header still goes out with the error.
    let mut action = error(503, "Busy");
    if let FaultAction::Error { headers, .. } = &mut action {
        headers.insert("X-Amzn-ErrorType".into(), "Throttling".into());
    }
    emu.admin.add_fault(&rule(&["ListInstances"], action, FaultTrigger::default())).await.unwrap();
    let resp = reqwest::Client::new()
        .get(format!("{}/v1/instances", emu.url()))
        .bearer_auth(crate::common::USER)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["x-amzn-errortype"], "Throttling");
    let body: fakecloud_api::ErrorBody = resp.json().await.unwrap();
    assert_eq!(body.error.code, "Busy");
}

#[tokio::test]
async fn skip_then_times_counts_matching_calls() {
    let emu = Emu::start().await;
    let trigger = FaultTrigger { skip: 2, times: Some(3), ..Default::default() };
    emu.admin.add_fault(&rule(&["CreateInstance"], error(500, "InternalError"), trigger)).await.unwrap();
    let mut outcome = Vec::new();
    for n in 0..7 {
        outcome.push(emu.user.create_instance(&inst(&format!("n{n}")), None).await.is_ok());
    }
    assert_eq!(outcome, [true, true, false, false, false, true, true]);
}

async fn pattern(seed: u64) -> Vec<bool> {
    let emu = Emu::with_config(Config { timings: Timings::instant(), seed: Some(seed), ..Config::default() }).await;
    let trigger = FaultTrigger { probability: Some(0.3), ..Default::default() };
    emu.admin.add_fault(&rule(&["GetRegion"], error(500, "InternalError"), trigger)).await.unwrap();
    let mut v = Vec::new();
    for _ in 0..60 {
        v.push(emu.user.region().await.is_ok());
    }
    v
}

#[tokio::test]
async fn a_seed_makes_random_faults_repeat_exactly() {
    let (a, b, c) = (pattern(42).await, pattern(42).await, pattern(7).await);
    assert_eq!(a, b, "same seed, same calls fail");
    assert_ne!(a, c, "another seed, another pattern");
    let failures = a.iter().filter(|ok| !**ok).count();
    assert!((8..=30).contains(&failures), "about 30% of 60 fail, got {failures}");
}

#[tokio::test]
async fn latency_delays_the_call() {
    let emu = Emu::start().await;
    emu.admin
        .add_fault(&rule(&["GetRegion"], FaultAction::Latency { ms: 300, jitter_ms: 50 }, FaultTrigger::default()))
        .await
        .unwrap();
    let t = Instant::now();
    emu.user.region().await.unwrap();
    let took = t.elapsed();
    // Not sooner than the latency; the upper bound only catches a hang (read as seconds, it would be 300 s).
    assert!(took >= Duration::from_millis(300) && took < HANG, "{took:?}");
}

#[tokio::test]
async fn no_response_closes_or_hangs() {
    let emu = Emu::start().await;
    let close = FaultAction::NoResponse { mode: NoResponseMode::Close, hang_seconds: None };
    emu.admin.add_fault(&rule(&["GetRegion"], close, FaultTrigger::default())).await.unwrap();
    let err = emu.user.region().await.unwrap_err();
    assert!(err.status().is_none(), "no HTTP answer, got {err}");

    // Held ten times the bound below: an answer after the hang could not pass for the client's own timeout.
    let hang = FaultAction::NoResponse { mode: NoResponseMode::Hang, hang_seconds: Some(600.0) };
    emu.admin.add_fault(&rule(&["ListInstances"], hang, FaultTrigger::default())).await.unwrap();
    let impatient = emu.user.clone().with_timeout(Duration::from_millis(300)).unwrap();
    let t = Instant::now();
    let err = impatient.list_instances(&Default::default()).await.unwrap_err();
    assert!(err.status().is_none() && t.elapsed() < HANG, "{err} after {:?}", t.elapsed());
}

#[tokio::test]
async fn apply_then_fail_really_applies() {
    let emu = Emu::start().await;
    let action = FaultAction::ApplyThenFail { status: 500, code: "InternalError".into(), message: None };
    emu.admin
        .add_fault(&rule(&["CreateLoadBalancer"], action, FaultTrigger { times: Some(1), ..Default::default() }))
        .await
        .unwrap();
    let err = emu.user.create_load_balancer(&lb("web"), Some("svc-uid")).await.unwrap_err();
    assert_eq!(err.status(), Some(500));
    let all = emu.user.list_all_load_balancers().await.unwrap();
    assert_eq!(all.len(), 1, "the write happened although the answer was an error");
    // The retry a careful client makes with its key finds the original instead of a second LB.
    assert_eq!(emu.user.create_load_balancer(&lb("web"), Some("svc-uid")).await.unwrap().id, all[0].id);
    assert_eq!(emu.user.list_all_load_balancers().await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_window_expires() {
    let emu = Emu::start().await;
    // A call inside the window fails. On a busy machine the rule's write and the call may outlast a short window,
    // which then cannot tell: the rule goes and a window ten times longer is tried.
    let mut looked = false;
    for window in [0.4, 4.0, 40.0] {
        let trigger = FaultTrigger { duration_seconds: Some(window), ..Default::default() };
        let t = Instant::now();
        let r = emu.admin.add_fault(&rule(&["GetRegion"], error(500, "InternalError"), trigger)).await.unwrap();
        assert!(r.active_until.is_some());
        let failed = emu.user.region().await.is_err();
        if !failed && t.elapsed().as_secs_f64() >= window {
            let _ = emu.admin.delete_fault(&r.id).await;
            continue;
        }
        assert!(failed);
        looked = true;
        break;
    }
    assert!(looked, "never called inside the window");
    eventually(HANG, "the window to end", || async { emu.user.region().await.ok() }).await;
    let future = FaultTrigger { from: Some("2999-01-01T00:00:00Z".into()), ..Default::default() };
    emu.admin.add_fault(&rule(&["GetRegion"], error(500, "InternalError"), future)).await.unwrap();
    emu.user.region().await.unwrap();
}

#[tokio::test]
async fn admin_calls_are_never_faulted() {
    let emu = Emu::start().await;
    emu.admin.add_fault(&rule(&[], error(500, "InternalError"), FaultTrigger::default())).await.unwrap();
    assert!(emu.user.region().await.is_err());
    emu.admin.set_quota(QuotaName::Instances, 5).await.unwrap();
    emu.admin.list_faults().await.unwrap();
    emu.admin.clear_faults().await.unwrap();
    emu.user.region().await.unwrap();
}

#[tokio::test]
async fn rules_survive_a_restart() {
    let mut emu = Emu::start().await;
    emu.admin.add_fault(&rule(&["GetRegion"], error(418, "Teapot"), FaultTrigger::default())).await.unwrap();
    emu.admin
        .set_rate_limit(
            "writes",
            &SetRateLimitRequest {
                scope: RateLimitScope::Writes,
                capacity: 5,
                refill_per_second: Some(1.0),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    emu.restart().await;
    assert_eq!(emu.user.region().await.unwrap_err().code(), Some("Teapot"));
    assert_eq!(emu.admin.list_rate_limits().await.unwrap().items.len(), 1);
}

#[tokio::test]
async fn bad_rules_are_refused_naming_the_field() {
    let emu = Emu::start().await;
    let cases = [
        (rule(&["CreateInstanse"], error(500, "X"), FaultTrigger::default()), "match.operations[0]"),
        (rule(&["["], error(500, "X"), FaultTrigger::default()), "match.operations[0]"),
        (
            rule(&[], error(500, "X"), FaultTrigger { probability: Some(1.5), ..Default::default() }),
            "trigger.probability",
        ),
        (
            rule(&[], error(500, "X"), FaultTrigger { duration_seconds: Some(-1.0), ..Default::default() }),
            "trigger.duration_seconds",
        ),
        (rule(&[], error(200, "X"), FaultTrigger::default()), "action.status"),
        (
            rule(
                &[],
                FaultAction::NoResponse { mode: NoResponseMode::Hang, hang_seconds: Some(-3.0) },
                FaultTrigger::default(),
            ),
            "action.hang_seconds",
        ),
        (rule(&[], error(500, "X"), FaultTrigger { from: Some("soon".into()), ..Default::default() }), "trigger.from"),
    ];
    for (req, field) in cases {
        let err = emu.admin.add_fault(&req).await.unwrap_err();
        assert_eq!((err.status(), err.code()), (Some(400), Some(codes::INVALID_PARAMETER)), "{field}: {err}");
        assert!(err.to_string().contains(field), "{field} not named in {err}");
    }
    let (status, body) = emu
        .raw(
            reqwest::Method::POST,
            "/v1/faults",
            Some(crate::common::ADMIN),
            Some(("application/json", r#"{"action":{"type":"explode"}}"#)),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    let bad_limit = SetRateLimitRequest { capacity: 0, ..Default::default() };
    assert!(emu.admin.set_rate_limit("x", &bad_limit).await.unwrap_err().to_string().contains("capacity"));
}

fn lb_rule(id: Option<&str>, matcher: LbFaultMatch, action: LbFaultAction) -> CreateLbFaultRuleRequest {
    CreateLbFaultRuleRequest { id: id.map(str::to_string), matcher, action, trigger: FaultTrigger::default() }
}

#[tokio::test]
async fn data_plane_rules_are_checked_listed_kept_and_deleted() {
    let mut emu = Emu::start().await;
    let reset = LbFaultAction::Reset { after_ms: None };
    let ports = |p: Vec<u16>| LbFaultMatch { ports: p, ..Default::default() };
    let cases = [
        (lb_rule(None, ports(vec![0]), reset.clone()), "match.ports[0]"),
        (lb_rule(None, ports(vec![80]), LbFaultAction::BlackHole {}), "match.ports"),
        (
            lb_rule(None, LbFaultMatch { names: vec!["[".into()], ..Default::default() }, reset.clone()),
            "match.names[0]",
        ),
        (
            lb_rule(None, LbFaultMatch { backends: vec!["i x".into()], ..Default::default() }, reset.clone()),
            "match.backends[0]",
        ),
        (
            lb_rule(None, LbFaultMatch::default(), LbFaultAction::Latency { ms: 600_000, jitter_ms: 1 }),
            "action.jitter_ms",
        ),
        (lb_rule(None, LbFaultMatch::default(), LbFaultAction::Reset { after_ms: Some(u64::MAX) }), "action.after_ms"),
        (lb_rule(Some("no spaces"), LbFaultMatch::default(), reset.clone()), "id"),
        (
            CreateLbFaultRuleRequest {
                trigger: FaultTrigger { probability: Some(-0.1), ..Default::default() },
                ..lb_rule(None, LbFaultMatch::default(), reset.clone())
            },
            "trigger.probability",
        ),
    ];
    for (req, field) in cases {
        let err = emu.admin.add_lb_fault(&req).await.unwrap_err();
        assert_eq!((err.status(), err.code()), (Some(400), Some(codes::INVALID_PARAMETER)), "{field}: {err}");
        assert!(err.to_string().contains(field), "{field} not named in {err}");
    }
    for body in [
        r#"{"action":{"type":"explode"}}"#,
        r#"{"action":{"type":"black-hole","ms":3}}"#,
        r#"{"action":{"type":"reset"},"match":{"ports":[70000]}}"#,
    ] {
        let (status, answer) = emu
            .raw(reqwest::Method::POST, "/v1/lb-faults", Some(crate::common::ADMIN), Some(("application/json", body)))
            .await;
        assert_eq!(status, 400, "{body}: {answer}");
    }
    // The user token may not touch them.
    let (status, _) = emu.raw(reqwest::Method::GET, "/v1/lb-faults", Some(crate::common::USER), None).await;
    assert_eq!(status, 403);

    let added = emu.admin.add_lb_fault(&lb_rule(None, ports(vec![80]), reset.clone())).await.unwrap();
    assert!(added.id.starts_with("lb-fault-"), "{}", added.id);
    let named = lb_rule(Some("flap"), LbFaultMatch::default(), LbFaultAction::BlackHole {});
    emu.admin.add_lb_fault(&named).await.unwrap();
    assert_eq!(emu.admin.add_lb_fault(&named).await.unwrap_err().status(), Some(409));
    emu.restart().await;
    let listed = emu.admin.list_lb_faults().await.unwrap().items;
    assert_eq!(listed.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), [added.id.as_str(), "flap"]);
    assert_eq!((listed[0].matched, listed[0].injected), (0, 0));
    assert_eq!(emu.admin.delete_lb_fault("flap").await.unwrap().action, LbFaultAction::BlackHole {});
    assert_eq!(emu.admin.delete_lb_fault("flap").await.unwrap_err().status(), Some(404));
    // Clearing the faults clears these too.
    emu.admin.clear_faults().await.unwrap();
    assert!(emu.admin.list_lb_faults().await.unwrap().items.is_empty());
}

fn bucket(scope: RateLimitScope, capacity: u32, refill: f64) -> SetRateLimitRequest {
    SetRateLimitRequest { scope, capacity, refill_per_second: Some(refill), ..Default::default() }
}

/// The buckets' tokens now: what is left after the last call plus the refill since, per caller role when per
/// token; a bucket no call has touched is full.
#[tokio::test]
async fn a_rate_limit_shows_the_tokens_each_bucket_holds() {
    let emu = Emu::start().await;
    let tokens = async |id: &str| {
        let limits = emu.admin.list_rate_limits().await.unwrap().items;
        let limit = limits.into_iter().find(|l| l.id == id).unwrap();
        limit.buckets.into_iter().map(|b| (b.key, b.tokens)).collect::<Vec<_>>()
    };
    emu.admin.set_rate_limit("writes", &bucket(RateLimitScope::Writes, 5, 0.001)).await.unwrap();
    assert_eq!(tokens("writes").await, [("all".to_string(), 5.0)]);
    emu.instance("a").await;
    emu.instance("b").await;
    let shown = tokens("writes").await;
    let [(key, left)] = &shown[..] else { panic!("one bucket: {shown:?}") };
    assert_eq!(key, "all");
    assert!((3.0..3.01).contains(left), "3 tokens left, give or take the refill: {left}");

    let per_token = SetRateLimitRequest { per_token: true, ..bucket(RateLimitScope::Reads, 4, 0.001) };
    emu.admin.set_rate_limit("reads", &per_token).await.unwrap();
    assert!(tokens("reads").await.is_empty(), "no caller yet");
    emu.user.region().await.unwrap();
    let shown = tokens("reads").await;
    assert_eq!(shown.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), ["user"], "a role, never the token");
    assert!((3.0..3.01).contains(&shown[0].1), "{shown:?}");
}

#[tokio::test]
async fn an_empty_bucket_answers_429_with_an_accurate_retry_after() {
    let emu = Emu::start().await;
    emu.admin.set_rate_limit("writes", &bucket(RateLimitScope::Writes, 3, 0.5)).await.unwrap();
    for n in 0..3 {
        emu.instance(&format!("n{n}")).await;
    }
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/instances", emu.url()))
        .bearer_auth(crate::common::USER)
        .json(&inst("n3"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 429);
    let h = |k: &str| resp.headers().get(k).unwrap().to_str().unwrap().to_string();
    // One token every 2 s: the next one is due in (0, 2] s.
    let retry: u64 = h("Retry-After").parse().unwrap();
    assert!((1..=2).contains(&retry), "Retry-After {retry}");
    assert_eq!((h("RateLimit-Limit"), h("RateLimit-Remaining")), ("3".to_string(), "0".to_string()));
    emu.user.region().await.unwrap(); // reads are not in the bucket
    // Honouring Retry-After gets the call through.
    tokio::time::sleep(Duration::from_secs(retry)).await;
    emu.instance("n3").await;
    assert_eq!(emu.admin.list_rate_limits().await.unwrap().items[0].refused, 1);
}

#[tokio::test]
async fn buckets_can_be_per_token_and_answer_503() {
    let emu = Emu::start().await;
    // A token every 1,000 s: the second call finds the bucket empty however long the first took.
    let mut spec = bucket(RateLimitScope::Reads, 1, 0.001);
    spec.per_token = true;
    spec.status = 503;
    emu.admin.set_rate_limit("reads", &spec).await.unwrap();
    emu.user.region().await.unwrap();
    let err = emu.user.region().await.unwrap_err();
    assert_eq!((err.status(), err.code()), (Some(503), Some(codes::REQUEST_LIMIT_EXCEEDED)));
    emu.admin.region().await.unwrap(); // the admin token has its own bucket
    emu.admin.delete_rate_limit("reads").await.unwrap();
    emu.user.region().await.unwrap();
}

#[tokio::test]
async fn a_service_outage_fails_that_service_only_and_ends() {
    let emu = Emu::start().await;
    let outage = emu
        .admin
        .start_outage(&StartOutageRequest {
            scope: OutageScope::Service,
            service: Some(Service::LoadBalancing),
            zone: None,
            duration_seconds: Some(30.0),
        })
        .await
        .unwrap();
    let err = emu.user.create_load_balancer(&lb("a"), None).await.unwrap_err();
    assert_eq!((err.status(), err.code()), (Some(503), Some(codes::SERVICE_UNAVAILABLE)));
    let retry = err.retry_after().unwrap();
    assert!(retry > Duration::from_secs(25) && retry <= Duration::from_secs(30), "{retry:?}");
    emu.instance("n1").await;
    emu.admin.stop_outage(&outage.id).await.unwrap();
    emu.user.create_load_balancer(&lb("a"), None).await.unwrap();

    // A call inside the outage is refused. On a busy machine the outage's write and the call may outlast a short
    // one, which then cannot tell: it is stopped and one ten times longer is tried.
    let mut looked = false;
    for seconds in [0.3, 3.0, 30.0] {
        let t = Instant::now();
        let api_down =
            StartOutageRequest { scope: OutageScope::Api, service: None, zone: None, duration_seconds: Some(seconds) };
        let outage = emu.admin.start_outage(&api_down).await.unwrap();
        let answer = emu.user.region().await;
        if answer.is_ok() && t.elapsed().as_secs_f64() >= seconds {
            let _ = emu.admin.stop_outage(&outage.id).await;
            continue;
        }
        assert_eq!(answer.unwrap_err().status(), Some(503));
        looked = true;
        break;
    }
    assert!(looked, "never called inside the outage");
    eventually(HANG, "the API outage to end", || async { emu.user.region().await.ok() }).await;
}

#[tokio::test]
async fn a_zone_outage_makes_its_instances_unreachable() {
    let emu = Emu::start().await;
    let a = emu
        .user
        .create_instance(&CreateInstanceRequest { zone: Some("local-1a".into()), ..inst("a") }, None)
        .await
        .unwrap();
    let b = emu
        .user
        .create_instance(&CreateInstanceRequest { zone: Some("local-1b".into()), ..inst("b") }, None)
        .await
        .unwrap();
    let bad = StartOutageRequest {
        scope: OutageScope::Zone,
        service: None,
        zone: Some("mars-1".into()),
        duration_seconds: None,
    };
    assert!(emu.admin.start_outage(&bad).await.unwrap_err().to_string().contains("zone"));
    let o = emu.admin.start_outage(&StartOutageRequest { zone: Some("local-1a".into()), ..bad }).await.unwrap();
    let seen = emu.user.get_instance(&a.id).await.unwrap();
    assert_eq!((seen.state, seen.state_reason.as_deref()), (InstanceState::Stopped, Some("Server.ZoneOutage")));
    assert_eq!(emu.user.get_instance(&b.id).await.unwrap().state, InstanceState::Running);
    let running = emu
        .user
        .list_all_instances(&fakecloud_api::ListInstancesQuery {
            state: Some(InstanceState::Running),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(running.iter().map(|i| i.name.as_str()).collect::<Vec<_>>(), ["b"]);
    assert_eq!(emu.user.stop_instance(&a.id).await.unwrap_err().status(), Some(503));
    emu.user.stop_instance(&b.id).await.unwrap();
    emu.admin.stop_outage(&o.id).await.unwrap();
    assert_eq!(emu.user.get_instance(&a.id).await.unwrap().state, InstanceState::Running);
}

#[tokio::test]
async fn spot_reclamation_gives_notice_then_terminates() {
    // The notice and the stopping state last only a while: a look that came too late to tell (a busy machine)
    // runs the case again, on a fresh emulator, with both ten times longer.
    for scale in [1, 10, 100] {
        let delay = Duration::from_millis(300 * scale);
        let emu = Emu::with_timings(Timings { terminate_delay: delay, ..Timings::instant() }).await;
        let spot = emu
            .user
            .create_instance(&CreateInstanceRequest { market: Market::Spot, ..inst("spot-1") }, None)
            .await
            .unwrap();
        let on_demand = emu.instance("od-1").await;
        let err = emu
            .admin
            .reclaim_spot(&ReclaimRequest { instance_ids: vec![on_demand.id], ..Default::default() })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some(codes::NOT_SPOT));

        let notice = 0.5 * scale as f64;
        let asked = Instant::now();
        let r = emu
            .admin
            .reclaim_spot(&ReclaimRequest {
                names: vec!["spot-1".into()],
                notice_seconds: Some(notice),
                ..Default::default()
            })
            .await
            .unwrap();
        let noticed = &r.items[0];
        if noticed.state != InstanceState::Running && asked.elapsed().as_secs_f64() >= notice {
            continue;
        }
        assert_eq!(
            (noticed.state, noticed.state_reason.as_deref()),
            (InstanceState::Running, Some("Server.SpotInstanceTermination"))
        );
        assert!(noticed.interruption_at.is_some());
        // Stopping for `delay`: looked at until it is, or is past it. Two looks that straddle the whole of it
        // were further apart than `delay`, so looks closer than that must see it.
        let (mut previous, mut widest) = (Instant::now(), Duration::ZERO);
        let stopping = loop {
            let started = Instant::now();
            let i = emu.user.get_instance(&spot.id).await.unwrap();
            widest = widest.max(previous.elapsed());
            previous = started;
            match i.state {
                InstanceState::Stopping => break Some(i),
                InstanceState::Terminated => break None,
                _ => {}
            }
            assert!(asked.elapsed() < HANG + Duration::from_secs_f64(notice), "{} still {}", i.id, i.state);
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let Some(stopping) = stopping else {
            assert!(widest >= delay, "never seen stopping, though looked at every {widest:?} at least");
            continue;
        };
        assert_eq!(stopping.state_reason.as_deref(), Some("Server.SpotInstanceTermination"));
        let gone = wait_state(&emu.user, &spot.id, InstanceState::Terminated).await;
        assert_eq!(gone.state_reason.as_deref(), Some("Server.SpotInstanceTermination"));
        // Still terminated once the background ticker (every 250 ms) has written the transition down.
        tokio::time::sleep(Duration::from_millis(700)).await;
        let later = emu.user.get_instance(&spot.id).await.unwrap();
        assert_eq!((later.state, later.state_changed_at), (InstanceState::Terminated, gone.state_changed_at));
        // Its address and name are free again.
        emu.user
            .create_instance(&CreateInstanceRequest { private_ip: Some(spot.private_ip), ..inst("spot-1") }, None)
            .await
            .unwrap();
        return;
    }
    panic!("never looked inside the notice and the stopping state");
}

#[tokio::test]
async fn new_resources_stay_invisible_then_appear() {
    // Reads inside the lag do not see the instance. On a busy machine the create and the reads may outlast a
    // short lag, which then cannot tell: a fresh emulator tries a lag ten times longer.
    for seconds in [0.6, 6.0, 30.0] {
        let emu = Emu::start().await;
        let action = FaultAction::EventualConsistency { seconds };
        emu.admin.add_fault(&rule(&["CreateInstance"], action, FaultTrigger::default())).await.unwrap();
        let old = emu.admin.list_faults().await.unwrap(); // admin reads are unaffected
        assert_eq!(old.items.len(), 1);
        let t = Instant::now();
        let created = emu.user.create_instance(&inst("lagging"), None).await.unwrap();
        let got = emu.user.get_instance(&created.id).await;
        let listed = emu.user.list_all_instances(&Default::default()).await.unwrap();
        if (got.is_ok() || !listed.is_empty()) && t.elapsed().as_secs_f64() >= seconds {
            continue;
        }
        let err = got.unwrap_err();
        assert_eq!((err.status(), err.code()), (Some(404), Some(codes::INSTANCE_NOT_FOUND)));
        assert!(listed.is_empty());
        eventually(HANG, "the instance to become visible", || async { emu.user.get_instance(&created.id).await.ok() })
            .await;
        assert_eq!(emu.user.list_all_instances(&Default::default()).await.unwrap().len(), 1);
        return;
    }
    panic!("never read inside the lag");
}

/// The lag is the public API's: the cloud's own view (the admin token, which the machines' simulated kubelets
/// use) sees a new instance at once, so its kubelet can register while the CCM still gets 404.
#[tokio::test]
async fn the_admin_token_sees_lagging_resources_at_once() {
    let emu = Emu::start().await;
    let action = FaultAction::EventualConsistency { seconds: 30.0 };
    emu.admin.add_fault(&rule(&["CreateInstance"], action, FaultTrigger::default())).await.unwrap();
    let created = emu.user.create_instance(&inst("lagging"), None).await.unwrap();
    assert_eq!(emu.user.get_instance(&created.id).await.unwrap_err().status(), Some(404));
    assert!(emu.user.list_all_instances(&Default::default()).await.unwrap().is_empty());
    assert_eq!(emu.admin.get_instance(&created.id).await.unwrap().id, created.id);
    let listed = emu.admin.list_all_instances(&Default::default()).await.unwrap();
    assert_eq!(listed.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(), [created.id.as_str()]);
}

#[tokio::test]
async fn the_client_can_wait_out_retry_after_itself() {
    let emu = Emu::start().await;
    emu.admin.set_rate_limit("writes", &bucket(RateLimitScope::Writes, 1, 1.0)).await.unwrap();
    emu.instance("first").await;
    // Without a policy the caller sees the 429 and its delay...
    let err = emu.user.create_instance(&inst("second"), None).await.unwrap_err();
    assert_eq!((err.status(), err.retry_after()), (Some(429), Some(Duration::from_secs(1))));
    // ...with one, the client waits as told and the call goes through.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    emu.instance("second").await;
    let patient = emu.user.clone().with_retry_policy(fakecloud_api::RetryPolicy {
        max_attempts: 3,
        max_wait: Duration::from_secs(5),
        ..Default::default()
    });
    let t = Instant::now();
    patient.create_instance(&inst("third"), None).await.unwrap();
    assert!(t.elapsed() >= Duration::from_millis(900), "it waited for the bucket: {:?}", t.elapsed());
    let refused = emu.admin.audit(&AuditQuery { status: Some(429), ..Default::default() }).await.unwrap().items;
    assert_eq!(refused.len(), 2, "one refusal each for the plain and the patient client");
}

#[tokio::test]
async fn rules_can_match_the_resource_zone_name_and_tags() {
    let emu = Emu::start().await;
    let a = emu
        .user
        .create_instance(&CreateInstanceRequest { zone: Some("local-1a".into()), ..inst("web-1") }, None)
        .await
        .unwrap();
    let tagged = CreateInstanceRequest {
        zone: Some("local-1b".into()),
        tags: [("pool".to_string(), "gpu".to_string())].into(),
        ..inst("gpu-1")
    };
    let b = emu.user.create_instance(&tagged, None).await.unwrap();
    let by = |zones: &[&str], names: &[&str], tags: &[&str]| CreateFaultRuleRequest {
        id: None,
        matcher: FaultMatch {
            zones: zones.iter().map(|s| s.to_string()).collect(),
            names: names.iter().map(|s| s.to_string()).collect(),
            tags: tags.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        },
        action: error(503, "ServiceUnavailable"),
        trigger: FaultTrigger::default(),
        position: None,
    };
    let r = emu.admin.add_fault(&by(&["local-1a"], &[], &[])).await.unwrap();
    assert!(emu.user.stop_instance(&a.id).await.is_err(), "an instance in local-1a");
    emu.user.get_instance(&b.id).await.unwrap();
    let err = emu
        .user
        .create_instance(&CreateInstanceRequest { zone: Some("local-1a".into()), ..inst("web-2") }, None)
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(503), "a create asking for local-1a");
    emu.user
        .create_instance(&CreateInstanceRequest { zone: Some("local-1c".into()), ..inst("web-3") }, None)
        .await
        .unwrap();
    emu.admin.delete_fault(&r.id).await.unwrap();

    let r = emu.admin.add_fault(&by(&[], &["gpu-*"], &[])).await.unwrap();
    assert!(emu.user.get_instance(&b.id).await.is_err());
    emu.user.get_instance(&a.id).await.unwrap();
    emu.admin.delete_fault(&r.id).await.unwrap();

    emu.admin.add_fault(&by(&[], &[], &["pool=gpu"])).await.unwrap();
    assert!(emu.user.get_instance(&b.id).await.is_err());
    emu.user.get_instance(&a.id).await.unwrap();
    let err = emu.admin.add_fault(&by(&[], &["["], &[])).await.unwrap_err();
    assert!(err.to_string().contains("match.names[0]"), "{err}");
}

#[tokio::test]
async fn random_spot_reclamation_takes_only_spot_instances() {
    let emu = Emu::with_config(Config { timings: Timings::instant(), seed: Some(3), ..Config::default() }).await;
    for n in 0..4 {
        emu.user
            .create_instance(&CreateInstanceRequest { market: Market::Spot, ..inst(&format!("spot-{n}")) }, None)
            .await
            .unwrap();
    }
    let od = emu.instance("on-demand").await;
    let bad =
        fakecloud_api::SpotRandomRequest { rate_per_minute: 1000.0, notice_seconds: None, duration_seconds: None };
    assert!(emu.admin.start_spot_random(&bad).await.unwrap_err().to_string().contains("rate_per_minute"));
    // 120 a minute: about two a second.
    let req =
        fakecloud_api::SpotRandomRequest { rate_per_minute: 120.0, notice_seconds: Some(60.0), duration_seconds: None };
    emu.admin.start_spot_random(&req).await.unwrap();
    let noticed = eventually(HANG, "two spot instances with a notice", || async {
        let all = emu.user.list_all_instances(&Default::default()).await.unwrap();
        let n: Vec<_> = all.into_iter().filter(|i| i.interruption_at.is_some()).collect();
        (n.len() >= 2).then_some(n)
    })
    .await;
    assert!(noticed.iter().all(|i| i.market == Market::Spot));
    emu.admin.stop_spot_random().await.unwrap();
    let after = emu
        .user
        .list_all_instances(&Default::default())
        .await
        .unwrap()
        .iter()
        .filter(|i| i.interruption_at.is_some())
        .count();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let later = emu
        .user
        .list_all_instances(&Default::default())
        .await
        .unwrap()
        .iter()
        .filter(|i| i.interruption_at.is_some())
        .count();
    assert_eq!(after, later, "stopped means stopped");
    assert!(emu.user.get_instance(&od.id).await.unwrap().interruption_at.is_none());
}

#[tokio::test]
async fn changed_resources_read_as_before_until_the_lag_is_over() {
    // Reads inside the lag see the old version. On a busy machine the write and the reads may outlast a short
    // lag, which then cannot tell: a fresh emulator tries a lag ten times longer.
    for seconds in [0.6, 6.0, 30.0] {
        let emu = Emu::start().await;
        let created = emu.instance("lagging").await;
        let action = FaultAction::EventualConsistency { seconds };
        emu.admin.add_fault(&rule(&["StopInstance"], action, FaultTrigger::default())).await.unwrap();
        let t = Instant::now();
        assert_eq!(
            emu.user.stop_instance(&created.id).await.unwrap().state,
            InstanceState::Stopped,
            "the write itself answers truthfully"
        );
        let got = emu.user.get_instance(&created.id).await.unwrap().state;
        let listed = emu.user.list_all_instances(&Default::default()).await.unwrap();
        if (got != InstanceState::Running || listed[0].state != InstanceState::Running)
            && t.elapsed().as_secs_f64() >= seconds
        {
            continue;
        }
        assert_eq!(got, InstanceState::Running, "reads still see the old version");
        assert_eq!(listed[0].state, InstanceState::Running);
        eventually(HANG, "the change to show", || async {
            (emu.user.get_instance(&created.id).await.unwrap().state == InstanceState::Stopped).then_some(())
        })
        .await;
        return;
    }
    panic!("never read inside the lag");
}

/// Rates and durations that would overflow the arithmetic behind them (a refill time beyond governor's
/// nanosecond clock, a latency plus jitter past u64) are a 400 naming the field and its range, not a panic.
#[tokio::test]
async fn rates_and_durations_out_of_range_are_refused_not_panics() {
    let emu = Emu::start().await;
    let limit = |capacity: u32, refill: f64| SetRateLimitRequest { capacity, ..bucket(RateLimitScope::All, 1, refill) };
    let latency = |ms: u64, jitter_ms: u64| rule(&[], FaultAction::Latency { ms, jitter_ms }, FaultTrigger::default());
    for (req, field, range) in [
        (limit(1, 1e-11), "refill_per_second", "between 0.001 and 1000000"),
        (limit(1_000_000, 1e-9), "refill_per_second", "between 0.001 and 1000000"),
        (limit(1, 1e12), "refill_per_second", "between 0.001 and 1000000"),
        (limit(4_000_000_000, 1.0), "capacity", "between 1 and 1000000"),
    ] {
        let err = emu.admin.set_rate_limit("absurd", &req).await.unwrap_err();
        assert_eq!((err.status(), err.code()), (Some(400), Some(codes::INVALID_PARAMETER)), "{err}");
        assert!(err.to_string().contains(field) && err.to_string().contains(range), "{field} {range}: {err}");
    }
    for (req, field, max) in [
        (latency(u64::MAX, 0), "action.ms", "600000"),
        (latency(1, u64::MAX), "action.jitter_ms", "600000"),
        (latency(u64::MAX, u64::MAX), "action.ms", "600000"),
        (latency(600_000, 1), "action.jitter_ms", "600000"),
        (
            rule(&[], FaultAction::EventualConsistency { seconds: 1e300 }, FaultTrigger::default()),
            "action.seconds",
            "3600",
        ),
    ] {
        let err = emu.admin.add_fault(&req).await.unwrap_err();
        assert_eq!((err.status(), err.code()), (Some(400), Some(codes::INVALID_PARAMETER)), "{err}");
        assert!(err.to_string().contains(field) && err.to_string().contains(max), "{field} {max}: {err}");
    }
    // Counts past what the document's int64 holds (u64 would take them), and past the bound.
    let counted = |skip: u64, times: Option<u64>| {
        rule(&[], error(500, "X"), FaultTrigger { skip, times, ..FaultTrigger::default() })
    };
    for (req, field) in [
        (counted(1 << 63, None), "trigger.skip"),
        (counted(0, Some(u64::MAX)), "trigger.times"),
        (counted(FAULT_COUNT_MAX + 1, None), "trigger.skip"),
        (CreateFaultRuleRequest { position: Some(usize::MAX), ..counted(0, None) }, "position"),
    ] {
        let err = emu.admin.add_fault(&req).await.unwrap_err();
        assert_eq!((err.status(), err.code()), (Some(400), Some(codes::INVALID_PARAMETER)), "{err}");
        let range = format!("between 0 and {FAULT_COUNT_MAX}");
        assert!(err.to_string().contains(field) && err.to_string().contains(&range), "{field}: {err}");
    }
    emu.admin.add_fault(&counted(FAULT_COUNT_MAX, Some(FAULT_COUNT_MAX))).await.unwrap();
    emu.admin.clear_faults().await.unwrap();
    // The limits themselves are accepted, and the emulator is still serving.
    emu.admin.set_rate_limit("slow", &limit(1_000_000, 0.001)).await.unwrap();
    emu.admin.add_fault(&latency(0, 600_000)).await.unwrap();
    assert!(emu.admin.list_rate_limits().await.unwrap().items.len() == 1);
}

/// IDs are never handed out twice, not after a delete and not after a restart: a client holding an old ID
/// must never stop or delete something else with it.
#[tokio::test]
async fn outage_and_rule_ids_are_never_reused() {
    let mut emu = Emu::start().await;
    let outage = || StartOutageRequest { scope: OutageScope::Api, service: None, zone: None, duration_seconds: None };
    let mut seen = std::collections::HashSet::new();
    for round in 0..2 {
        for _ in 0..2 {
            let o = emu.admin.start_outage(&outage()).await.unwrap();
            let r = emu.admin.add_fault(&rule(&["GetRegion"], error(500, "X"), FaultTrigger::default())).await.unwrap();
            assert!(seen.insert(o.id.clone()) && seen.insert(r.id.clone()), "reused {} or {}", o.id, r.id);
        }
        // Stop the newest (the one a count-based ID would hand out again), then everything.
        let newest_outage = emu.admin.list_outages().await.unwrap().items.pop().unwrap().id;
        emu.admin.stop_outage(&newest_outage).await.unwrap();
        let newest_rule = emu.admin.list_faults().await.unwrap().items.pop().unwrap().id;
        emu.admin.delete_fault(&newest_rule).await.unwrap();
        let o = emu.admin.start_outage(&outage()).await.unwrap();
        let r = emu.admin.add_fault(&rule(&["GetRegion"], error(500, "X"), FaultTrigger::default())).await.unwrap();
        assert!(seen.insert(o.id.clone()) && seen.insert(r.id.clone()), "round {round}: reused {} or {}", o.id, r.id);
        emu.admin.clear_faults().await.unwrap();
        emu.restart().await;
    }
}

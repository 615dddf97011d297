//! Rate limits shaped as real clouds throttle (fixed windows aligned to the clock, their own statuses, codes and
//! headers), and the presets built of them, driven over real HTTP until they refuse.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fakecloud_api::{ClientError, CreateInstanceRequest, ErrorBody, QuotaName, RateLimitKind, RateLimitPreset};
use fakecloud_api::{RateLimitScope, SetRateLimitRequest, codes};

use crate::common::{ADMIN, Emu, USER};

/// More calls than any preset's budget takes to spend twice (a window may roll over mid-run): a hang detector.
const CALLS_MAX: usize = 5000;

async fn call(emu: &Emu, method: reqwest::Method, path: &str) -> reqwest::Response {
    let req = reqwest::Client::new().request(method.clone(), format!("{}{path}", emu.url())).bearer_auth(USER);
    let req = if method == reqwest::Method::POST { req.json(&serde_json::json!({})) } else { req };
    req.send().await.unwrap()
}

/// Call until a refusal of `status`; the refusal. Other answers (a 404 of a made-up ID) count as calls.
async fn until_refused(emu: &Emu, method: reqwest::Method, path: &str, status: u16) -> reqwest::Response {
    until_refused_at(emu, method, path, status).await.0
}

/// As [`until_refused`], with when (Unix seconds) the refused call was sent and its answer received: the
/// server judged it in between.
async fn until_refused_at(
    emu: &Emu,
    method: reqwest::Method,
    path: &str,
    status: u16,
) -> (reqwest::Response, f64, f64) {
    for _ in 0..CALLS_MAX {
        let sent = unix_now();
        let resp = call(emu, method.clone(), path).await;
        if resp.status().as_u16() == status {
            return (resp, sent, unix_now());
        }
    }
    panic!("{method} {path} never refused with {status} in {CALLS_MAX} calls");
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

fn header(resp: &reqwest::Response, name: &str) -> Option<String> {
    resp.headers().get(name).map(|v| v.to_str().unwrap().to_string())
}

async fn envelope(resp: reqwest::Response) -> fakecloud_api::ErrorDetail {
    resp.json::<ErrorBody>().await.unwrap().error
}

/// That `retry` (Retry-After of a call judged between `sent` and `received`) names the end of a window of
/// `window` seconds aligned to the clock. The server rounds the wait up to whole seconds, so the window ends in
/// (judged + retry - 1, judged + retry]: some multiple of `window` must lie in (sent + retry - 1,
/// received + retry].
fn points_at_a_boundary(retry: u64, window: u64, sent: f64, received: f64) {
    assert!((1..=window).contains(&retry), "Retry-After {retry} for a {window} s window");
    let (w, retry) = (window as f64, retry as f64);
    let (after, until) = (sent + retry - 1.0, received + retry);
    let boundary = ((after / w).floor() + 1.0) * w;
    assert!(boundary <= until + 0.002, "no {window} s boundary in ({after}, {until}]: Retry-After {retry}");
}

fn window(scope: RateLimitScope, operations: &[&str], capacity: u32, seconds: u32) -> SetRateLimitRequest {
    SetRateLimitRequest {
        scope,
        operations: operations.iter().map(|op| op.to_string()).collect(),
        kind: RateLimitKind::FixedWindow,
        capacity,
        refill_per_second: None,
        window_seconds: Some(seconds),
        ..SetRateLimitRequest::default()
    }
}

/// A fixed window of 3 calls per 2 s on a class of operations: the 4th call in a window is refused until the
/// next 2 s boundary, which Retry-After names; every answer it applies to says what is left.
#[tokio::test]
async fn a_fixed_window_refuses_until_the_next_clock_aligned_boundary() {
    let emu = Emu::start().await;
    let mut spec = window(RateLimitScope::Operations, &["GetRegion", "GetQuota"], 3, 2);
    spec.remaining_header = Some("X-Calls-Left".into());
    spec.remaining_format = Some("{remaining} left".into());
    emu.admin.set_rate_limit("two-seconds", &spec).await.unwrap();

    let first = call(&emu, reqwest::Method::GET, "/v1/region").await;
    assert_eq!(first.status(), 200);
    assert_eq!(header(&first, "x-calls-left").as_deref(), Some("2 left"), "the first call of a window");
    let other = call(&emu, reqwest::Method::GET, "/v1/instances").await;
    assert_eq!((other.status().as_u16(), header(&other, "x-calls-left")), (200, None), "not in the class");

    let (refused, sent, received) = until_refused_at(&emu, reqwest::Method::GET, "/v1/region", 429).await;
    assert_eq!(header(&refused, "x-calls-left").as_deref(), Some("0 left"), "refusals say it too");
    let retry: u64 = header(&refused, "retry-after").unwrap().parse().unwrap();
    points_at_a_boundary(retry, 2, sent, received);
    assert_eq!(header(&refused, "ratelimit-limit").as_deref(), Some("3"));
    assert_eq!(envelope(refused).await.code, codes::REQUEST_LIMIT_EXCEEDED);

    // Honouring Retry-After gets the call through: a new window, its calls all back.
    tokio::time::sleep(Duration::from_secs(retry)).await;
    let next = call(&emu, reqwest::Method::GET, "/v1/region").await;
    assert_eq!(next.status(), 200);
    let listed = emu.admin.list_rate_limits().await.unwrap().items;
    assert!(listed[0].refused >= 1 && listed[0].buckets[0].tokens <= 2.0, "{listed:?}");
}

/// A limit's own status, code and message, and no Retry-After when it says so.
#[tokio::test]
async fn a_limit_refuses_with_its_own_status_code_and_message() {
    let emu = Emu::start().await;
    let spec = SetRateLimitRequest {
        scope: RateLimitScope::Reads,
        capacity: 1,
        refill_per_second: Some(0.001),
        status: 400,
        code: Some("Throttling".into()),
        message: Some("Rate exceeded".into()),
        retry_after: false,
        ..SetRateLimitRequest::default()
    };
    emu.admin.set_rate_limit("quiet", &spec).await.unwrap();
    let refused = until_refused(&emu, reqwest::Method::GET, "/v1/region", 400).await;
    assert_eq!((header(&refused, "retry-after"), header(&refused, "ratelimit-reset")), (None, None));
    let error = envelope(refused).await;
    assert_eq!((error.code.as_str(), error.message.as_str()), ("Throttling", "Rate exceeded"));
}

#[tokio::test]
async fn bad_limits_and_unknown_presets_are_refused_naming_what_is_wrong() {
    let emu = Emu::start().await;
    let bucket = SetRateLimitRequest::default;
    let cases = [
        (SetRateLimitRequest { status: 418, ..bucket() }, "status", "400, 403, 429 or 503"),
        (window(RateLimitScope::All, &[], 5, 0), "window_seconds", "between 1 and 86400"),
        (window(RateLimitScope::All, &[], 5, 86_401), "window_seconds", "between 1 and 86400"),
        (
            SetRateLimitRequest { window_seconds: None, ..window(RateLimitScope::All, &[], 5, 1) },
            "window_seconds",
            "needs",
        ),
        (
            SetRateLimitRequest { refill_per_second: Some(1.0), ..window(RateLimitScope::All, &[], 5, 1) },
            "refill_per_second",
            "token-bucket",
        ),
        (SetRateLimitRequest { window_seconds: Some(5), ..bucket() }, "window_seconds", "fixed-window"),
        (SetRateLimitRequest { refill_per_second: None, ..bucket() }, "refill_per_second", "needs its refill rate"),
        (SetRateLimitRequest { refill_per_second: Some(0.0), ..bucket() }, "refill_per_second", "between 0.001"),
        (SetRateLimitRequest { scope: RateLimitScope::Operations, ..bucket() }, "operations", "needs a list"),
        (window(RateLimitScope::Operations, &["GetRegion", "GetRegionn"], 5, 1), "operations[1]", "not an operation"),
        (window(RateLimitScope::Reads, &["GetRegion"], 5, 1), "operations", "only with scope operations"),
        (SetRateLimitRequest { code: Some("no spaces".into()), ..bucket() }, "code", "letters"),
        (SetRateLimitRequest { message: Some(String::new()), ..bucket() }, "message", "between 1"),
        (
            SetRateLimitRequest { remaining_header: Some("bad header".into()), ..bucket() },
            "remaining_header",
            "not a valid",
        ),
        (
            SetRateLimitRequest { remaining_header: Some("Content-Length".into()), ..bucket() },
            "remaining_header",
            "set by the server",
        ),
        (
            SetRateLimitRequest { remaining_format: Some("{remaining}".into()), ..bucket() },
            "remaining_format",
            "only with remaining_header",
        ),
        (
            SetRateLimitRequest {
                remaining_header: Some("X-Left".into()),
                remaining_format: Some("left".into()),
                ..bucket()
            },
            "remaining_format",
            "{remaining}",
        ),
        (
            SetRateLimitRequest {
                remaining_header: Some("X-Left".into()),
                remaining_format: Some("{remaining}\n".into()),
                ..bucket()
            },
            "remaining_format",
            "header value",
        ),
    ];
    for (spec, field, says) in cases {
        let err = emu.admin.set_rate_limit("bad", &spec).await.unwrap_err();
        assert_eq!((err.status(), err.code()), (Some(400), Some(codes::INVALID_PARAMETER)), "{field}: {err}");
        assert!(err.to_string().contains(field) && err.to_string().contains(says), "{field} {says}: {err}");
    }
    assert!(emu.admin.list_rate_limits().await.unwrap().items.is_empty());

    let (status, body) = emu.raw(reqwest::Method::PUT, "/v1/rate-limit-presets/aws-ec3", Some(ADMIN), None).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], codes::RATE_LIMIT_PRESET_NOT_FOUND);
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("aws-ec3") && message.contains("aws-ec2, aws-elb, azure-arm, gcp-compute"), "{message}");
    // Presets are the admin's, as every fault is.
    let (status, _) = emu.raw(reqwest::Method::PUT, "/v1/rate-limit-presets/aws-ec2", Some(USER), None).await;
    assert_eq!(status, 403);
}

/// A preset replaces any other preset's limits and leaves those set by name; they survive a restart; clearing
/// presets removes theirs only.
#[tokio::test]
async fn a_preset_replaces_the_others_survives_a_restart_and_clears() {
    let mut emu = Emu::start().await;
    let mine = SetRateLimitRequest { capacity: 100, refill_per_second: Some(10.0), ..SetRateLimitRequest::default() };
    emu.admin.set_rate_limit("mine", &mine).await.unwrap();
    let ids = async |emu: &Emu| {
        let mut ids: Vec<String> =
            emu.admin.list_rate_limits().await.unwrap().items.into_iter().map(|l| l.id).collect();
        ids.sort();
        ids
    };
    let ec2 = emu.admin.install_rate_limit_preset(RateLimitPreset::AwsEc2).await.unwrap().items;
    assert_eq!(ec2.len(), 4);
    assert!(ec2.iter().all(|l| l.id.starts_with("aws-ec2-")), "{ec2:?}");
    emu.admin.install_rate_limit_preset(RateLimitPreset::GcpCompute).await.unwrap();
    assert_eq!(ids(&emu).await, ["gcp-compute-reads", "gcp-compute-writes", "mine"]);
    emu.restart().await;
    assert_eq!(ids(&emu).await, ["gcp-compute-reads", "gcp-compute-writes", "mine"]);
    let restored = emu.admin.list_rate_limits().await.unwrap().items;
    let reads = restored.iter().find(|l| l.id == "gcp-compute-reads").unwrap();
    assert_eq!(
        (reads.limit.kind, reads.limit.window_seconds, reads.limit.status),
        (RateLimitKind::FixedWindow, Some(60), 403)
    );
    let cleared = emu.admin.clear_rate_limit_presets().await.unwrap().items;
    assert_eq!(cleared.len(), 2);
    assert_eq!(ids(&emu).await, ["mine"]);
}

/// EC2: 503 `RequestLimitExceeded` with no Retry-After, for reads and (separately) writes.
#[tokio::test]
async fn aws_ec2_throttles_with_503_and_no_retry_after() {
    let emu = Emu::start().await;
    emu.admin.install_rate_limit_preset(RateLimitPreset::AwsEc2).await.unwrap();
    for (method, path) in
        [(reqwest::Method::GET, "/v1/region"), (reqwest::Method::POST, "/v1/instances/i-none/terminate")]
    {
        let refused = until_refused(&emu, method, path, 503).await;
        assert_eq!((header(&refused, "retry-after"), header(&refused, "ratelimit-reset")), (None, None), "{path}");
        assert_eq!(envelope(refused).await.code, "RequestLimitExceeded", "{path}");
    }
    let limits = emu.admin.list_rate_limits().await.unwrap().items;
    let refused = |id: &str| limits.iter().find(|l| l.id == id).unwrap().refused;
    assert!(refused("aws-ec2-non-mutating") >= 1 && refused("aws-ec2-mutating") >= 1, "{limits:?}");
}

/// ELB: 400 `Throttling` "Rate exceeded", no Retry-After; only load balancer calls count.
#[tokio::test]
async fn aws_elb_throttles_with_400_throttling() {
    let emu = Emu::start().await;
    emu.admin.install_rate_limit_preset(RateLimitPreset::AwsElb).await.unwrap();
    let refused = until_refused(&emu, reqwest::Method::GET, "/v1/load-balancers", 400).await;
    assert_eq!(header(&refused, "retry-after"), None);
    let error = envelope(refused).await;
    assert_eq!((error.code.as_str(), error.message.as_str()), ("Throttling", "Rate exceeded"));
    assert_eq!(call(&emu, reqwest::Method::GET, "/v1/region").await.status(), 200, "not a load balancer call");
}

/// Azure: the remaining counts on every answer; Compute's costly-read window refuses 429 without Retry-After,
/// the subscription's bucket 429 with it.
#[tokio::test]
async fn azure_arm_says_what_is_left_on_every_answer_and_throttles_with_429() {
    let emu = Emu::start().await;
    emu.admin.install_rate_limit_preset(RateLimitPreset::AzureArm).await.unwrap();
    let (reads, writes, resource) = (
        "x-ms-ratelimit-remaining-subscription-reads",
        "x-ms-ratelimit-remaining-subscription-writes",
        "x-ms-ratelimit-remaining-resource",
    );
    let region = call(&emu, reqwest::Method::GET, "/v1/region").await;
    assert_eq!(region.status(), 200);
    assert_eq!(
        (header(&region, reads).as_deref(), header(&region, writes), header(&region, resource)),
        (Some("249"), None, None)
    );
    let listed = call(&emu, reqwest::Method::GET, "/v1/instances").await;
    assert_eq!(listed.status(), 200);
    assert_eq!(header(&listed, resource).as_deref(), Some("Microsoft.Compute/HighCostGet3Min;159"));
    assert!(header(&listed, reads).is_some());
    // Each write takes a token of 200; the bucket refills 10 a second, so what refilled between the two is
    // bounded by the time between them (a busy machine's, not a speed claim).
    let between = std::time::Instant::now();
    let first = call(&emu, reqwest::Method::POST, "/v1/instances/i-none/stop").await;
    let write = call(&emu, reqwest::Method::POST, "/v1/instances/i-none/terminate").await;
    let refilled = (between.elapsed().as_secs_f64() * 10.0).ceil() as u32;
    assert_eq!(write.status(), 404);
    assert_eq!(header(&first, writes).as_deref(), Some("199"), "one write of a full bucket");
    let left: u32 = header(&write, writes).and_then(|h| h.parse().ok()).expect("the writes left");
    assert!((198..=(198 + refilled).min(199)).contains(&left), "two writes of 200, {refilled} refilled: {left}");

    // The costly reads' window (the subscription's bucket may refuse first if the window rolls over mid-run:
    // then wait as it says).
    let mut refused = None;
    for _ in 0..CALLS_MAX {
        let resp = call(&emu, reqwest::Method::GET, "/v1/instances").await;
        if resp.status() != 429 {
            continue;
        }
        if let Some(retry) = header(&resp, "retry-after") {
            tokio::time::sleep(Duration::from_secs(retry.parse().unwrap())).await;
            continue;
        }
        refused = Some(resp);
        break;
    }
    let refused = refused.expect("the HighCostGet3Min window never refused");
    assert_eq!(header(&refused, resource).as_deref(), Some("Microsoft.Compute/HighCostGet3Min;0"));
    assert_eq!(envelope(refused).await.code, "OperationNotAllowed");

    let refused = until_refused(&emu, reqwest::Method::GET, "/v1/region", 429).await;
    assert_eq!(header(&refused, reads).as_deref(), Some("0"));
    let retry: u64 = header(&refused, "retry-after").unwrap().parse().unwrap();
    assert!((1..=2).contains(&retry), "a token every 40 ms: Retry-After {retry}");
    assert_eq!(envelope(refused).await.code, "SubscriptionRequestsThrottled");
}

/// GCP: 403 `rateLimitExceeded` until the next minute of the clock; writes have a budget of their own.
#[tokio::test]
async fn gcp_compute_refuses_until_the_next_minute_boundary() {
    let emu = Emu::start().await;
    emu.admin.install_rate_limit_preset(RateLimitPreset::GcpCompute).await.unwrap();
    let (refused, sent, received) = until_refused_at(&emu, reqwest::Method::GET, "/v1/region", 403).await;
    let retry: u64 = header(&refused, "retry-after").unwrap().parse().unwrap();
    points_at_a_boundary(retry, 60, sent, received);
    let error = envelope(refused).await;
    assert_eq!(error.code, "rateLimitExceeded");
    assert!(error.message.contains("usageLimits"), "{}", error.message);
    let write = call(&emu, reqwest::Method::POST, "/v1/instances/i-none/terminate").await;
    assert_eq!(write.status(), 404, "writes are counted apart");
}

/// While a preset is installed, a request over a quota is refused as its cloud refuses it (status and code, as
/// `GET /v1/rate-limit-presets` lists them), the message still naming the quota; without one, the emulator's
/// own 422. The audit log records the answer the caller got.
#[tokio::test]
async fn a_quota_refusal_takes_the_installed_presets_shape() {
    let emu = Emu::start().await;
    emu.admin.set_quota(QuotaName::Instances, 0).await.unwrap();
    let create = async || {
        let req = CreateInstanceRequest { name: "over".into(), ..Default::default() };
        let e = emu.user.create_instance(&req, None).await.unwrap_err();
        let message = match &e {
            ClientError::Api(api) => api.message.clone(),
            other => panic!("{other}"),
        };
        assert!(message.contains("fakecloud quota set instances"), "{message}");
        (e.status().unwrap(), e.code().unwrap().to_string())
    };
    assert_eq!(create().await, (422, codes::INSTANCE_LIMIT_EXCEEDED.to_string()));
    for (preset, status, code) in [
        (RateLimitPreset::AwsEc2, 400, "InstanceLimitExceeded"),
        (RateLimitPreset::AwsElb, 400, "InstanceLimitExceeded"),
        (RateLimitPreset::AzureArm, 409, "OperationNotAllowed"),
        (RateLimitPreset::GcpCompute, 403, "QUOTA_EXCEEDED"),
    ] {
        emu.admin.install_rate_limit_preset(preset).await.unwrap();
        assert_eq!(create().await, (status, code.to_string()), "{preset}");
        let listed = emu.admin.list_rate_limit_presets().await.unwrap().items;
        let info = listed.iter().find(|p| p.name == preset).unwrap();
        let refusal = info.quota_refusals.iter().find(|r| r.quota == QuotaName::Instances).unwrap();
        assert_eq!((refusal.status, refusal.code.as_str()), (status, code), "{preset}: as listed");
        let audit = emu.admin.audit(&Default::default()).await.unwrap().items;
        let last = audit.iter().filter(|e| e.operation == "CreateInstance").max_by_key(|e| e.seq).unwrap();
        assert_eq!((last.status, last.error_code.as_deref()), (status, Some(code)), "{preset}: audited");
    }
    emu.admin.clear_rate_limit_presets().await.unwrap();
    assert_eq!(create().await, (422, codes::INSTANCE_LIMIT_EXCEEDED.to_string()));
}

/// The listing: every preset, the one installed marked, its limits as installing sets them (each per token),
/// every quota's refusal; admin only.
#[tokio::test]
async fn the_presets_are_listed_with_their_limits_and_quota_refusals() {
    let emu = Emu::start().await;
    let installed = emu.admin.install_rate_limit_preset(RateLimitPreset::AzureArm).await.unwrap().items;
    let listed = emu.admin.list_rate_limit_presets().await.unwrap().items;
    assert_eq!(listed.iter().map(|p| p.name).collect::<Vec<_>>(), RateLimitPreset::ALL);
    for p in &listed {
        assert_eq!(p.installed, p.name == RateLimitPreset::AzureArm, "{}", p.name);
        assert_eq!(p.quota_refusals.len(), QuotaName::ALL.len(), "{}", p.name);
        assert!(p.limits.iter().all(|l| l.limit.per_token && l.id.starts_with(&format!("{}-", p.name))));
    }
    let azure = &listed[2];
    let ids = |v: Vec<&str>| v.into_iter().map(String::from).collect::<Vec<_>>();
    assert_eq!(
        azure.limits.iter().map(|l| l.id.clone()).collect::<Vec<_>>(),
        ids(installed.iter().map(|l| l.id.as_str()).collect())
    );
    let refused = emu.user.list_rate_limit_presets().await.unwrap_err();
    assert_eq!(refused.status(), Some(403));
}

/// A preset's buckets are per token, as a cloud's are per account: the admin token (the cloud's own machinery,
/// such as the simulated kubelets) spending its bucket leaves the user's whole.
#[tokio::test]
async fn a_presets_buckets_are_per_token() {
    let emu = Emu::start().await;
    emu.admin.install_rate_limit_preset(RateLimitPreset::AwsElb).await.unwrap();
    let mut refused = false;
    for _ in 0..CALLS_MAX {
        let resp = reqwest::Client::new()
            .get(format!("{}/v1/load-balancers", emu.url()))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap();
        if resp.status() == 400 {
            refused = true;
            break;
        }
    }
    assert!(refused, "the admin's describe bucket never ran out");
    assert_eq!(call(&emu, reqwest::Method::GET, "/v1/load-balancers").await.status(), 200, "the user's is whole");
}

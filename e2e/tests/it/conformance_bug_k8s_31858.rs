//! Bug pack: kubernetes/kubernetes#31858 ("Request throttling for AWS") — once EC2 answered a cluster's calls
//! `RequestLimitExceeded`, the controller manager inserted the same delay before every one of its AWS calls, for
//! every controller, and the account's other users saw the whole cluster slow down. That is cloud-provider-aws's
//! `CrossRequestRetryDelay` (kubernetes#19335, retry_handler.go): the SDK tries a call three times, and each call
//! that fails all three with `RequestLimitExceeded` counts; before each call the CCM then sleeps 60 s times the
//! recent fraction of such calls (whole seconds, none under a tenth), process-wide, ELB's calls included.
//!
//! Staged as `scenarios/aws-request-limit-storm.yaml` does it: the CCM's EC2 reads refused `RequestLimitExceeded`
//! for a while. Asserted in the audit log, against the CCM's own calls in the same case before the storm: the
//! refused calls were each tried again in place (the SDK's retries), and afterwards the CCM's calls thin out (a
//! third of the rate or less, with a silence between two calls 5 s longer than any before).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use fakecloud_api::{AuditEntry, CreateFaultRuleRequest, FaultAction, FaultMatch, FaultTrigger};
use fakecloud_e2e::{Setup, called_at, case};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");
/// How long the storm lasts at least; the scenario's default. The CCM's count of recent calls decays by a fifth
/// every 20 s, so it is about a hundred times its call rate plus what earlier work left: under a 30 s storm the
/// failed calls stayed near the tenth below which no delay comes; under 60 s, locally, the CCM waited 8–9 s
/// before each call. On kind its steady reads are one route period's (10 s), so the storm lasts twelve of them.
const STORM: Duration = Duration::from_secs(60);
/// How much longer than any before the storm the longest silence between two of the CCM's calls must be after
/// it. Its periodic reads leave under a second locally and one route period (10 s) on kind; after the storm the
/// silences measured 8–9 s locally and 18 s on kind.
const LONGER: SignedDuration = SignedDuration::from_secs(5);

/// The calls in `[from, to)`.
fn between(calls: &[AuditEntry], from: Timestamp, to: Timestamp) -> Vec<&AuditEntry> {
    calls.iter().filter(|e| (from..to).contains(&called_at(e))).collect()
}

/// The longest time between two calls of `calls`, which are in order.
fn longest_silence(calls: &[&AuditEntry]) -> SignedDuration {
    calls.windows(2).map(|w| called_at(w[1]).duration_since(called_at(w[0]))).max().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_limit_storm_slows_every_call_of_the_ccm() {
    let why = "CrossRequestRetryDelay, the delay it inserts before every AWS call, is its own";
    case("bug-31858", Setup::new(CCM).only_for_aws(why), async |env| {
        env.initialized_nodes("k31858", 2).await;
        // The window each side of the storm: ten route periods, the CCM's steady reads (at least 30 s).
        let window = (env.timing.route_period * 10).max(Duration::from_secs(30));
        let storm = (env.timing.route_period * 12).max(STORM);
        tokio::time::sleep(window).await;
        let rule = CreateFaultRuleRequest {
            id: Some(env.name("ec2-request-limit")),
            matcher: FaultMatch {
                operations: vec!["DescribeInstances".into(), "DescribeRouteTables".into()],
                roles: vec!["user".into()],
                ..Default::default()
            },
            action: FaultAction::Error {
                status: 503,
                code: "RequestLimitExceeded".into(),
                message: Some("Request limit exceeded.".into()),
                headers: Default::default(),
            },
            trigger: FaultTrigger { duration_seconds: Some(storm.as_secs_f64()), ..Default::default() },
            position: None,
        };
        let storm_start = Timestamp::now();
        let rule = env.cloud.add_fault(&rule).await.unwrap();
        tokio::time::sleep(storm).await;
        let storm_end = Timestamp::now();
        tokio::time::sleep(window).await;

        let calls = env.ccm_audit().await;
        let window = SignedDuration::try_from(window).unwrap();
        let before = between(&calls, storm_start - window, storm_start);
        let after = between(&calls, storm_end, storm_end + window);
        let refused: Vec<&AuditEntry> = calls.iter().filter(|e| e.fault.as_deref() == Some(rule.id.as_str())).collect();
        eprintln!(
            "bug-31858: {} calls in the {window:#} before the storm (longest silence {:#}), {} refused in it, {} in \
             the {window:#} after (longest silence {:#})",
            before.len(),
            longest_silence(&before),
            refused.len(),
            after.len(),
            longest_silence(&after)
        );
        assert!(refused.iter().all(|e| e.error_code.as_deref() == Some("RequestLimitExceeded")), "{refused:#?}");
        // The SDK's standard retryer: three attempts of each call, so a refused read is refused again.
        let retried = refused.windows(2).filter(|w| w[0].operation == w[1].operation).count();
        assert!(refused.len() >= 3 && retried >= 2, "the SDK retries each refused call in place: {refused:#?}");
        assert!(before.len() >= 10, "the CCM's steady reads before the storm: {}", before.len());
        assert!(
            after.len() * 3 <= before.len(),
            "a third of the calls or fewer: {} then {}",
            before.len(),
            after.len()
        );
        let (was, is) = (longest_silence(&before), longest_silence(&after));
        assert!(is >= was + LONGER, "a silence {LONGER:#} longer than any before ({was:#}): {is:#}");
    })
    .await;
}

//! Real clouds' throttling as sets of rate limits, defined once here. Each limit's id starts with its preset's
//! name; installing a preset replaces every preset's limits and leaves the others alone. Operations map onto
//! ours: reads are GETs, writes the rest, EC2's RunInstances is `CreateInstance`, ELB's describe calls are the
//! load balancer reads. While a preset's limits are in force, a request over a quota is refused as that cloud
//! refuses it too ([`quota_refusal`]).

use fakecloud_api::{QuotaName, RateLimitKind, RateLimitPreset, RateLimitScope, SetRateLimitRequest};

/// EC2 answers a throttled call 503 `RequestLimitExceeded`, without `Retry-After`: the SDKs back off on their
/// own. (EC2 throttling guide, <https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-throttling.html>.)
fn ec2(capacity: u32, refill_per_second: f64) -> SetRateLimitRequest {
    SetRateLimitRequest {
        capacity,
        refill_per_second: Some(refill_per_second),
        status: 503,
        code: Some("RequestLimitExceeded".into()),
        message: Some("Request limit exceeded.".into()),
        retry_after: false,
        ..SetRateLimitRequest::default()
    }
}

/// ELB answers 400 with the code `Throttling` (as issue #26 gives it; the ELB throttling guide,
/// <https://docs.aws.amazon.com/elasticloadbalancing/latest/userguide/elb-api-throttling.html>, names it
/// `ThrottlingException`, the SDKs' name) and the guide's message "Rate exceeded", without `Retry-After`.
fn elb(operations: &[&str], capacity: u32, refill_per_second: f64) -> SetRateLimitRequest {
    SetRateLimitRequest {
        scope: RateLimitScope::Operations,
        operations: operations.iter().map(|op| op.to_string()).collect(),
        capacity,
        refill_per_second: Some(refill_per_second),
        status: 400,
        code: Some("Throttling".into()),
        message: Some("Rate exceeded".into()),
        retry_after: false,
        ..SetRateLimitRequest::default()
    }
}

/// Azure Resource Manager's subscription buckets: 429 `SubscriptionRequestsThrottled` with `Retry-After`, and
/// what is left in `x-ms-ratelimit-remaining-subscription-{reads,writes}` on every answer (ARM's "Request
/// limits and throttling", <https://learn.microsoft.com/azure/azure-resource-manager/management/request-limits-and-throttling>;
/// the code as MicrosoftDocs/azure-docs#105248 quotes it).
fn arm(scope: RateLimitScope, capacity: u32, refill_per_second: f64, header: &str) -> SetRateLimitRequest {
    SetRateLimitRequest {
        scope,
        capacity,
        refill_per_second: Some(refill_per_second),
        status: 429,
        code: Some("SubscriptionRequestsThrottled".into()),
        remaining_header: Some(header.into()),
        ..SetRateLimitRequest::default()
    }
}

/// GCP Compute Engine: 403 with the reason `rateLimitExceeded` (domain `usageLimits`), in per-minute windows
/// aligned to the clock: "if a project reaches a quota limit at 10:00:15, the quota refills at the start of
/// the next synchronized interval, such as 10:01:00" (<https://cloud.google.com/compute/api-quota>).
/// `Retry-After` is on here as the seconds to that minute's end, so a client that honours it waits exactly
/// as long as GCP makes it.
fn gce(scope: RateLimitScope, calls_per_minute: u32) -> SetRateLimitRequest {
    SetRateLimitRequest {
        scope,
        kind: RateLimitKind::FixedWindow,
        capacity: calls_per_minute,
        refill_per_second: None,
        window_seconds: Some(60),
        status: 403,
        code: Some("rateLimitExceeded".into()),
        message: Some("Rate Limit Exceeded (domain usageLimits)".into()),
        ..SetRateLimitRequest::default()
    }
}

/// The preset's limits, by id, in the order they are checked: the first to refuse a call answers it (a call
/// later limits would have refused takes none of their tokens).
pub fn limits(preset: RateLimitPreset) -> Vec<(String, SetRateLimitRequest)> {
    let limits = match preset {
        RateLimitPreset::AwsEc2 => vec![
            // Request buckets per action class, per account and region, as issue #26 gives them from the EC2
            // throttling guide: non-mutating (Describe*) 100 tokens refilled 20/s; mutating 50 refilled 5/s.
            ("non-mutating", SetRateLimitRequest { scope: RateLimitScope::Reads, ..ec2(100, 20.0) }),
            ("mutating", SetRateLimitRequest { scope: RateLimitScope::Writes, ..ec2(50, 5.0) }),
            // Resource buckets, taken besides the request bucket (the guide's "resource rate limiting"):
            // RunInstances 1,000 instances refilled 2/s ...
            ("run-instances", operation("CreateInstance", ec2(1000, 2.0))),
            // ... and TerminateInstances 1,000 refilled 20/s.
            ("terminate-instances", operation("TerminateInstance", ec2(1000, 20.0))),
        ],
        RateLimitPreset::AwsElb => vec![
            // The ELB guide: non-mutating (Describe*) calls 40 tokens refilled 10/s. The native reads, and by name
            // classic ELB's Describe* calls that stand for no native operation (`aws/elb/operations.rs`).
            (
                "describe",
                elb(
                    &[
                        "ListLoadBalancers",
                        "GetLoadBalancer",
                        "DescribeLoadBalancerAttributes",
                        "DescribeLoadBalancerPolicies",
                        "DescribeTags",
                    ],
                    40,
                    10.0,
                ),
            ),
            // An assumption, not a documented number: the guide's table of mutating buckets is not quoted in
            // the issue, so the writes get 20 tokens refilled 2/s, tighter than the describe calls as on EC2.
            // Classic ELB's writes that stand for no native operation count here by name.
            (
                "mutating",
                elb(
                    &[
                        "CreateLoadBalancer",
                        "UpdateLoadBalancer",
                        "DeleteLoadBalancer",
                        "AddTags",
                        "RemoveTags",
                        "ApplySecurityGroupsToLoadBalancer",
                        "AttachLoadBalancerToSubnets",
                        "DetachLoadBalancerFromSubnets",
                        "ModifyLoadBalancerAttributes",
                        "CreateLoadBalancerPolicy",
                        "DeleteLoadBalancerPolicy",
                        "SetLoadBalancerPoliciesOfListener",
                        "SetLoadBalancerPoliciesForBackendServer",
                    ],
                    20,
                    2.0,
                ),
            ),
        ],
        RateLimitPreset::AzureArm => vec![
            // ARM's token buckets per subscription and region: reads 250 refilled 25/s ...
            (
                "subscription-reads",
                arm(RateLimitScope::Reads, 250, 25.0, "x-ms-ratelimit-remaining-subscription-reads"),
            ),
            // ... writes 200 refilled 10/s.
            (
                "subscription-writes",
                arm(RateLimitScope::Writes, 200, 10.0, "x-ms-ratelimit-remaining-subscription-writes"),
            ),
            // The compute resource provider's own policy on costly reads of machines, a 3-minute window:
            // `x-ms-ratelimit-remaining-resource: Microsoft.Compute/HighCostGet3Min;159` after the first call
            // (so 160 calls, as issue #26 gives it). Its refusal is a 429 `OperationNotAllowed` WITHOUT
            // Retry-After, which cloud-provider-azure#792 treated as not retriable; the code and message are
            // the compute provider's (quoted in Azure/aks-engine#2295). The window's alignment to the clock is
            // an assumption: the provider reports a start time per window, not a rule.
            (
                "compute-high-cost-get",
                SetRateLimitRequest {
                    scope: RateLimitScope::Operations,
                    operations: vec!["GetInstance".into(), "ListInstances".into()],
                    kind: RateLimitKind::FixedWindow,
                    capacity: 160,
                    refill_per_second: None,
                    window_seconds: Some(180),
                    status: 429,
                    code: Some("OperationNotAllowed".into()),
                    message: Some(
                        "The server rejected the request because too many requests have been received for this \
                         subscription. (HighCostGet3Min)"
                            .into(),
                    ),
                    retry_after: false,
                    remaining_header: Some("x-ms-ratelimit-remaining-resource".into()),
                    remaining_format: Some("Microsoft.Compute/HighCostGet3Min;{remaining}".into()),
                    ..SetRateLimitRequest::default()
                },
            ),
        ],
        RateLimitPreset::GcpCompute => vec![
            // The rate quotas page's defaults per project: read requests (`*.get`, `*.list`) 1,500 a minute ...
            ("reads", gce(RateLimitScope::Reads, 1500)),
            // ... and the mutation methods ("Queries", `compute.googleapis.com/default`) 1,500 a minute.
            ("writes", gce(RateLimitScope::Writes, 1500)),
        ],
    };
    // Each limit per token: a cloud's buckets are per account, and the emulator's two tokens are two callers —
    // the user's (the CCM's) and the admin's, which the cloud's own machinery uses (the simulated kubelets list
    // instances several times a second, enough alone to spend Azure's 160 instance reads per 3 minutes). One
    // shared bucket would throttle the CCM for calls it never made.
    limits
        .into_iter()
        .map(|(name, spec)| (format!("{preset}-{name}"), SetRateLimitRequest { per_token: true, ..spec }))
        .collect()
}

/// How the preset's cloud refuses a request over `quota`: its status and code.
pub fn quota_refusal(preset: RateLimitPreset, quota: QuotaName) -> (u16, &'static str) {
    use QuotaName::*;
    match preset {
        // EC2's error codes for its resource limits (instances, routes per table, Elastic IPs, rules per
        // security group, which is what a load balancer's source ranges become) and ELB's for load balancers,
        // listeners and targets: all client errors, 400 (the EC2 API's "Error codes" and the ELB API's errors).
        RateLimitPreset::AwsEc2 | RateLimitPreset::AwsElb => (
            400,
            match quota {
                Instances => "InstanceLimitExceeded",
                RoutesPerRouteTable => "RouteLimitExceeded",
                PublicIps => "AddressLimitExceeded",
                SourceRangesPerLoadBalancer | RulesPerSecurityGroup => "RulesPerSecurityGroupLimitExceeded",
                LoadBalancers => "TooManyLoadBalancers",
                ListenersPerLoadBalancer => "TooManyListeners",
                BackendsPerLoadBalancer => "TooManyTargets",
            },
        ),
        RateLimitPreset::AzureArm => match quota {
            // Compute's core quota: 409 `OperationNotAllowed` "Operation could not be completed as it results in
            // exceeding approved ... Cores quota" (ARM's "Resolve errors for resource quotas"; the status as
            // Azure/karpenter-provider-azure#192 quotes the answer).
            Instances => (409, "OperationNotAllowed"),
            // The network provider's public IP limit: 400 `PublicIPCountLimitReached` (as
            // kubernetes/test-infra#16564 quotes it).
            PublicIps => (400, "PublicIPCountLimitReached"),
            // An assumption: the network provider's other limits answer 400 as its public IP limit does; their
            // codes are not sourced here, so they keep the emulator's.
            other => (400, other.exceeded_code()),
        },
        // Compute Engine's resource quotas: 403 `QUOTA_EXCEEDED` (as issue #26 gives it), whatever the quota.
        RateLimitPreset::GcpCompute => (403, "QUOTA_EXCEEDED"),
    }
}

/// The preset in force: the one a limit among `ids` belongs to (installing a preset removes every other's).
pub fn installed<'a>(ids: impl IntoIterator<Item = &'a str>) -> Option<RateLimitPreset> {
    ids.into_iter().find_map(|id| RateLimitPreset::ALL.into_iter().find(|p| of(*p, id)))
}

/// Whether the limit `id` is one of `preset`'s (named `<preset>-...`).
fn of(preset: RateLimitPreset, id: &str) -> bool {
    id.strip_prefix(preset.name()).is_some_and(|rest| rest.starts_with('-'))
}

fn operation(name: &str, spec: SetRateLimitRequest) -> SetRateLimitRequest {
    SetRateLimitRequest { scope: RateLimitScope::Operation, operation: Some(name.into()), ..spec }
}

/// Whether a limit belongs to a preset (by its id's prefix).
pub fn is_preset_limit(id: &str) -> bool {
    installed([id]).is_some()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::faults::rate_limits::ActiveLimit;

    /// Every preset's limits pass the checks a limit set over the API gets, against the operations of both faces.
    #[test]
    fn every_preset_limit_is_valid_and_named_after_its_preset() {
        let operations = crate::http::with_faces(crate::http::operation_names(), &crate::aws::operation_names());
        for preset in RateLimitPreset::ALL {
            let limits = limits(preset);
            assert!(!limits.is_empty(), "{preset}");
            for (id, spec) in limits {
                assert!(id.starts_with(&format!("{preset}-")) && is_preset_limit(&id), "{id}");
                crate::validate::NAME.check("id", &id).unwrap();
                if let Err(e) = ActiveLimit::new(&id, spec, &operations) {
                    panic!("{id}: {e}");
                }
            }
        }
        assert!(!is_preset_limit("aws-ec2") && !is_preset_limit("writes") && !is_preset_limit("aws-ec2x-1"));
    }

    /// The preset in force is found by its limits' names; a quota refusal's status is a client error's.
    #[test]
    fn the_installed_preset_and_its_quota_refusals() {
        assert_eq!(installed(["mine", "gcp-compute-writes"]), Some(RateLimitPreset::GcpCompute));
        assert_eq!(installed(["mine", "aws-ec2x-1", "gcp-computer"]), None);
        for preset in RateLimitPreset::ALL {
            for quota in QuotaName::ALL {
                let (status, code) = quota_refusal(preset, quota);
                assert!((400..500).contains(&status) && status != 429 && !code.is_empty(), "{preset} {quota}");
            }
        }
    }
}

//! Classic ELB's actions as the fault engine sees them: the native operation each stands for, in one table, and
//! whether it reads. A fault rule or rate limit naming either the action (`DescribeLoadBalancers`) or its native
//! operation (`ListLoadBalancers`) applies to it; the `aws-elb` preset's buckets name both.

/// Each action the face answers (`super::ACTIONS`, every one: `api.rs`'s test checks) and the native operation it does;
/// `None` where the native API has none (tags, subnets, security groups, attributes and policies are classic
/// ELB's own record, `store::classic_elb`).
const STANDS_FOR: &[(&str, Option<&str>)] = &[
    ("AddTags", None),
    ("ApplySecurityGroupsToLoadBalancer", None),
    ("AttachLoadBalancerToSubnets", None),
    // The native health check, and the record's timeout and thresholds.
    ("ConfigureHealthCheck", Some("UpdateLoadBalancer")),
    ("CreateLoadBalancer", Some("CreateLoadBalancer")),
    ("CreateLoadBalancerListeners", Some("UpdateLoadBalancer")),
    ("CreateLoadBalancerPolicy", None),
    ("DeleteLoadBalancer", Some("DeleteLoadBalancer")),
    ("DeleteLoadBalancerListeners", Some("UpdateLoadBalancer")),
    ("DeleteLoadBalancerPolicy", None),
    ("DeregisterInstancesFromLoadBalancer", Some("UpdateLoadBalancer")),
    // The backends' health is what the native GET shows.
    ("DescribeInstanceHealth", Some("GetLoadBalancer")),
    ("DescribeLoadBalancerAttributes", None),
    ("DescribeLoadBalancerPolicies", None),
    // Whether it names load balancers or not: it answers a list, as the native list does.
    ("DescribeLoadBalancers", Some("ListLoadBalancers")),
    ("DescribeTags", None),
    ("DetachLoadBalancerFromSubnets", None),
    ("ModifyLoadBalancerAttributes", None),
    ("RegisterInstancesWithLoadBalancer", Some("UpdateLoadBalancer")),
    ("RemoveTags", None),
    ("SetLoadBalancerPoliciesForBackendServer", None),
    ("SetLoadBalancerPoliciesOfListener", None),
];

/// The native operation `action` stands for.
pub fn native(action: &str) -> Option<&'static str> {
    STANDS_FOR.iter().find(|(a, _)| *a == action).and_then(|(_, native)| *native)
}

/// Whether `action` only reads: ELB's non-mutating actions are its `Describe*` (the ELB throttling guide's
/// classes, <https://docs.aws.amazon.com/elasticloadbalancing/latest/userguide/elb-api-throttling.html>).
pub fn reads(action: &str) -> bool {
    action.starts_with("Describe")
}

/// The actions' names, which fault rules and rate limits may use beside the native operations'.
pub fn names() -> impl Iterator<Item = &'static str> {
    STANDS_FOR.iter().map(|(action, _)| *action)
}

//! Classic ELB's actions as the fault engine sees them: the native operation each stands for, in one table. A fault rule or rate limit naming either the action (`DescribeLoadBalancers`) or its native
//! operation (`ListLoadBalancers`) applies to it; the `aws-elb` preset's buckets name both.

/// Each action the face answers (`super::ACTIONS`, every one: `actions.rs`'s test checks) and the native operation it does;
/// `None` where the native API has none (tags, subnets, security groups, attributes and policies are classic
/// ELB's own record, `store::classic_elb`).
pub(crate) const STANDS_FOR: &[(&str, Option<&str>)] = &[
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

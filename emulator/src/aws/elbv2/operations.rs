//! ELBv2's actions as the fault engine sees them: the native operation each stands for.
//! An NLB is a native load balancer, so the calls that make, read, change or delete one (its listeners and
//! target groups included: they change its native row) stand for the native load balancer's operations, and
//! the `aws-elb` preset's buckets count them.

/// Each action the face answers (`super::ACTIONS`, every one: `actions.rs`'s test checks) and the native operation it does.
pub(crate) const STANDS_FOR: &[(&str, Option<&str>)] = &[
    // Tags, attributes and security groups are the face's own: the native API has none of them.
    ("AddTags", None),
    ("CreateListener", Some("UpdateLoadBalancer")),
    ("CreateLoadBalancer", Some("CreateLoadBalancer")),
    // A target group alone has no native effect until a listener forwards to it ...
    ("CreateTargetGroup", None),
    ("DeleteListener", Some("UpdateLoadBalancer")),
    ("DeleteLoadBalancer", Some("DeleteLoadBalancer")),
    ("DeleteTargetGroup", None),
    // ... but its targets and health check are the native backends and health check of the one that uses it.
    ("DeregisterTargets", Some("UpdateLoadBalancer")),
    ("DescribeListeners", Some("GetLoadBalancer")),
    ("DescribeLoadBalancerAttributes", None),
    // Named or not: it answers a list.
    ("DescribeLoadBalancers", Some("ListLoadBalancers")),
    ("DescribeTags", None),
    ("DescribeTargetGroupAttributes", None),
    ("DescribeTargetGroups", Some("ListLoadBalancers")),
    // The data plane's health, as the native GET shows it.
    ("DescribeTargetHealth", Some("GetLoadBalancer")),
    ("ModifyListener", Some("UpdateLoadBalancer")),
    ("ModifyLoadBalancerAttributes", None),
    ("ModifyTargetGroup", Some("UpdateLoadBalancer")),
    ("ModifyTargetGroupAttributes", None),
    ("RegisterTargets", Some("UpdateLoadBalancer")),
    ("RemoveTags", None),
    ("SetSecurityGroups", None),
];

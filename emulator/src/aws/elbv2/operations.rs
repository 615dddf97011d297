//! ELBv2's actions as the fault engine sees them: the native operation each stands for, and whether it reads.
//! An NLB is a native load balancer, so the calls that make, read, change or delete one (its listeners and
//! target groups included: they change its native row) stand for the native load balancer's operations, and
//! the `aws-elb` preset's buckets count them.

/// Each action the face answers (`super::ACTIONS`, every one: a test checks) and the native operation it does.
const STANDS_FOR: &[(&str, Option<&str>)] = &[
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

pub fn native(action: &str) -> Option<&'static str> {
    STANDS_FOR.iter().find(|(a, _)| *a == action).and_then(|(_, native)| *native)
}

/// Whether `action` only reads: ELB's non-mutating actions are its `Describe*` (its API reference's throttling
/// classes), which the `aws-elb` preset's describe bucket counts.
pub fn reads(action: &str) -> bool {
    action.starts_with("Describe")
}

pub fn names() -> impl Iterator<Item = &'static str> {
    STANDS_FOR.iter().map(|(action, _)| *action)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every action answered has one row, naming one of the native API's operations or none.
    #[test]
    fn every_action_stands_for_one_native_operation() {
        let natives = crate::http::operation_names();
        for action in super::super::ACTIONS {
            assert_eq!(names().filter(|a| a == action).count(), 1, "{action} has one row in STANDS_FOR");
            if let Some(native) = native(action) {
                assert!(natives.iter().any(|n| n == native), "{action} stands for {native}, not a native operation");
            }
        }
        for action in names() {
            assert!(super::super::ACTIONS.contains(&action), "{action} is in STANDS_FOR but not answered");
        }
        assert!(reads("DescribeTargetHealth") && !reads("RegisterTargets"));
    }
}

//! EC2's actions as the fault engine sees them: the native operation each stands for, in one table, and whether
//! it reads. A fault rule or rate limit naming either the action (`DescribeInstances`) or its native operation
//! (`ListInstances`) applies to it; a service outage follows the native operation's service.

/// Each action the face answers (`super::ACTIONS`, every one: `api.rs`'s test checks) and the native operation it does;
/// `None` where the native API has none (tags, which it sets only with an instance; the source/destination check,
/// which nothing in the cloud models; security groups, which only this face has).
const STANDS_FOR: &[(&str, Option<&str>)] = &[
    ("AuthorizeSecurityGroupIngress", None),
    ("CreateRoute", Some("CreateRoute")),
    ("CreateSecurityGroup", None),
    ("CreateTags", None),
    ("DeleteRoute", Some("DeleteRoute")),
    ("DeleteSecurityGroup", None),
    ("DeleteTags", None),
    // The region's zones, its VPC and its subnets are what the native API's region tells.
    ("DescribeAvailabilityZones", Some("GetRegion")),
    // Whether it names instances or not: it answers a list, as the native list does.
    ("DescribeInstances", Some("ListInstances")),
    ("DescribeRouteTables", Some("ListRouteTables")),
    ("DescribeSecurityGroups", None),
    ("DescribeSubnets", Some("GetRegion")),
    ("DescribeTags", None),
    ("DescribeVpcs", Some("GetRegion")),
    ("ModifyInstanceAttribute", None),
    ("RevokeSecurityGroupIngress", None),
    ("RunInstances", Some("CreateInstance")),
    ("StartInstances", Some("StartInstance")),
    ("StopInstances", Some("StopInstance")),
    ("TerminateInstances", Some("TerminateInstance")),
];

/// The native operation `action` stands for.
pub fn native(action: &str) -> Option<&'static str> {
    STANDS_FOR.iter().find(|(a, _)| *a == action).and_then(|(_, native)| *native)
}

/// Whether `action` only reads: EC2's non-mutating actions are `Describe*`, `Get*`, `List*` and `Search*` (its
/// throttling guide's classes, <https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-throttling.html>), the
/// reads a rate limit of scope `reads` and the `aws-ec2` preset's non-mutating bucket count.
pub fn reads(action: &str) -> bool {
    ["Describe", "Get", "List", "Search"].iter().any(|p| action.starts_with(p))
}

/// The actions' names, which fault rules and rate limits may use beside the native operations'.
pub fn names() -> impl Iterator<Item = &'static str> {
    STANDS_FOR.iter().map(|(action, _)| *action)
}

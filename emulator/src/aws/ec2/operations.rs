//! EC2's actions as the fault engine sees them: the native operation each stands for, in one table. A
//! fault rule or rate limit naming either the action (`DescribeInstances`) or its native operation
//! (`ListInstances`) applies to it; a service outage follows the native operation's service.

/// Each action the face answers (`super::ACTIONS`, every one: `actions.rs`'s test checks) and the native operation it does;
/// `None` where the native API has none (tags, which it sets only with an instance; the source/destination check,
/// which nothing in the cloud models; security groups, which only this face has).
pub(crate) const STANDS_FOR: &[(&str, Option<&str>)] = &[
    // Which table a zone's subnet uses: the native API shows it (a table's `zones`) but sets it only here.
    ("AssociateRouteTable", None),
    ("AuthorizeSecurityGroupIngress", None),
    ("CreateRoute", Some("CreateRoute")),
    ("CreateRouteTable", Some("CreateRouteTable")),
    ("CreateSecurityGroup", None),
    ("CreateTags", None),
    ("DeleteRoute", Some("DeleteRoute")),
    ("DeleteRouteTable", Some("DeleteRouteTable")),
    ("DeleteSecurityGroup", None),
    ("DeleteTags", None),
    // The region's zones, its VPC and its subnets are what the native API's region tells.
    ("DescribeAvailabilityZones", Some("GetRegion")),
    // The instances' place in the network: the cloud models none (an empty answer, as AWS's for most types).
    ("DescribeInstanceTopology", Some("ListInstances")),
    // Whether it names instances or not: it answers a list, as the native list does.
    ("DescribeInstances", Some("ListInstances")),
    ("DescribeRouteTables", Some("ListRouteTables")),
    ("DescribeSecurityGroups", None),
    ("DescribeSubnets", Some("GetRegion")),
    ("DescribeTags", None),
    ("DescribeVpcs", Some("GetRegion")),
    ("DisassociateRouteTable", None),
    ("ModifyInstanceAttribute", None),
    ("RevokeSecurityGroupIngress", None),
    ("RunInstances", Some("CreateInstance")),
    ("StartInstances", Some("StartInstance")),
    ("StopInstances", Some("StopInstance")),
    ("TerminateInstances", Some("TerminateInstance")),
];

//! EC2's operations on the cloud: which actions the face answers, and each one's parameters and answer, read
//! through the store as the native API's are.

mod filter;
mod instances;
mod lifecycle;
pub(super) mod network;
mod operations;
mod routes;
mod security_groups;
mod tag_rules;
mod tags;
mod zones;

use axum::http::StatusCode;

use super::credentials::Keys;
use super::error::{AwsError, Result};
use super::named::{self, Named};
use super::query::Params;
use super::xml::Node;
use crate::config::Topology;
use crate::faults::Subject;
use crate::http::AppState;
use crate::store;
use crate::store::instances::Action;

/// The VPC and its subnets, as classic ELB names them too (and the VPC's ID, whose default group the cloud makes).
pub use self::network::vpc_id;
pub(super) use self::network::{subnet_id, zone_of};
pub(super) use self::operations::STANDS_FOR;

/// The actions answered, by name (what the audit log and metrics call them too).
pub(super) const ACTIONS: &[&str] = &[
    "AssociateRouteTable",
    "AuthorizeSecurityGroupIngress",
    "CreateRoute",
    "CreateRouteTable",
    "CreateSecurityGroup",
    "CreateTags",
    "DeleteRoute",
    "DeleteRouteTable",
    "DeleteSecurityGroup",
    "DeleteTags",
    "DescribeAvailabilityZones",
    "DescribeInstanceTopology",
    "DescribeInstances",
    "DescribeRouteTables",
    "DescribeSecurityGroups",
    "DescribeSubnets",
    "DescribeTags",
    "DescribeVpcs",
    "DisassociateRouteTable",
    "ModifyInstanceAttribute",
    "RevokeSecurityGroupIngress",
    "RunInstances",
    "StartInstances",
    "StopInstances",
    "TerminateInstances",
];

/// What an EC2 call names, for the fault engine (see `about`): an instance, a security group, a route table (or
/// a resource a tag call names, of any of these kinds), or what a launch or a new group asks for.
pub(super) fn about(topo: &Topology, action: &str, p: &Params) -> Named {
    let one = match action {
        "RunInstances" => {
            let subnet_zone = || Some(network::zone_of(topo, p.peek("SubnetId")?)?.to_string());
            let zone = p.peek("Placement.AvailabilityZone").map(str::to_string).or_else(subnet_zone);
            return Named::Create(Subject { name: None, zone, tags: named::tags(p, "TagSpecification.") });
        }
        "CreateSecurityGroup" => {
            let name = p.peek("GroupName").map(str::to_string);
            return Named::Create(Subject { name, zone: None, tags: named::tags(p, "TagSpecification.") });
        }
        "CreateRoute" | "DeleteRoute" | "DeleteRouteTable" | "AssociateRouteTable" => p.peek("RouteTableId"),
        "ModifyInstanceAttribute" => p.peek("InstanceId"),
        "CreateTags" | "DeleteTags" => named::only(p, "ResourceId"),
        _ => named::only(p, "InstanceId").or_else(|| named::only(p, "GroupId")).or_else(|| p.peek("GroupId")),
    };
    match one {
        Some(id) if id.starts_with("rtb-") => Named::Resource(routes::native_id(topo, id).to_string()),
        Some(id) => Named::Resource(id.to_string()),
        None => Named::Nothing,
    }
}

/// Answer `action` (one of [`ACTIONS`]) with `params` (`Action` and `Version` taken): the elements of its answer.
pub async fn call(st: &AppState, keys: &Keys, action: &'static str, mut params: Params) -> Result<Vec<Node>> {
    // The caller may do everything the AWS face does: a dry run always would have succeeded.
    if params.bool("DryRun")? {
        return Err(AwsError::new(
            StatusCode::PRECONDITION_FAILED,
            "DryRunOperation",
            "Request would have succeeded, but DryRun flag is set.",
        ));
    }
    let cfg = &st.cfg;
    let p = &mut params;
    let answer = match action {
        "AssociateRouteTable" => routes::associate(st, p).await?,
        "AuthorizeSecurityGroupIngress" => security_groups::authorize(st, p).await?,
        "CreateRoute" => routes::create(st, p).await?,
        "CreateRouteTable" => routes::create_table(st, keys, p).await?,
        "CreateSecurityGroup" => security_groups::create(st, keys, p).await?,
        "CreateTags" => tags::create(st, p).await?,
        "DeleteRoute" => routes::delete(st, p).await?,
        "DeleteRouteTable" => routes::delete_table(st, p).await?,
        "DeleteSecurityGroup" => security_groups::delete(st, p).await?,
        "DeleteTags" => tags::delete(st, p).await?,
        "DescribeAvailabilityZones" => zones::describe(cfg, p)?,
        "DescribeInstanceTopology" => instances::describe_topology(p)?,
        "DescribeInstances" => instances::describe(st, keys, p).await?,
        "DescribeRouteTables" => routes::describe(st, keys, p).await?,
        "DescribeSecurityGroups" => security_groups::describe(st, keys, p).await?,
        "DescribeSubnets" => network::describe_subnets(cfg, keys, &store::tags::others(&st.db).await?, p)?,
        "DescribeTags" => tags::describe(st, p).await?,
        "DescribeVpcs" => network::describe_vpcs(cfg, keys, &store::tags::others(&st.db).await?, p)?,
        "DisassociateRouteTable" => routes::disassociate(st, p).await?,
        "ModifyInstanceAttribute" => lifecycle::modify_attribute(st, p).await?,
        "RevokeSecurityGroupIngress" => security_groups::revoke(st, p).await?,
        "RunInstances" => lifecycle::run(st, keys, p).await?,
        "StartInstances" => lifecycle::change_state(st, Action::Start, p).await?,
        "StopInstances" => lifecycle::change_state(st, Action::Stop, p).await?,
        "TerminateInstances" => lifecycle::change_state(st, Action::Terminate, p).await?,
        _ => return Err(AwsError::client("InvalidAction", format!("The action {action} is not valid for EC2"))),
    };
    params.finish()?;
    Ok(answer)
}

//! EC2's operations on the cloud: which actions the face answers, and each one's parameters and answer, read
//! through the store as the native API's are.

mod filter;
mod instances;
mod lifecycle;
pub(super) mod network;
mod operations;
mod routes;
mod security_groups;
mod tags;
mod zones;

use axum::http::StatusCode;

use super::credentials::Keys;
use super::error::{AwsError, Result};
use super::query::Params;
use super::xml::Node;
use crate::http::AppState;
use crate::store;
use crate::store::instances::Action;

pub(super) use self::network::subnet_id;
/// The VPC and its subnets, as classic ELB names them too (and the VPC's ID, whose default group the cloud makes).
pub use self::network::vpc_id;
pub(super) use self::operations::STANDS_FOR;

/// The actions answered, by name (what the audit log and metrics call them too).
pub(super) const ACTIONS: &[&str] = &[
    "AuthorizeSecurityGroupIngress",
    "CreateRoute",
    "CreateSecurityGroup",
    "CreateTags",
    "DeleteRoute",
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
    "ModifyInstanceAttribute",
    "RevokeSecurityGroupIngress",
    "RunInstances",
    "StartInstances",
    "StopInstances",
    "TerminateInstances",
];

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
        "AuthorizeSecurityGroupIngress" => security_groups::authorize(st, p).await?,
        "CreateRoute" => routes::create(st, p).await?,
        "CreateSecurityGroup" => security_groups::create(st, keys, p).await?,
        "CreateTags" => tags::create(st, p).await?,
        "DeleteRoute" => routes::delete(st, p).await?,
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

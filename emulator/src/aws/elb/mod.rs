//! Classic Elastic Load Balancing (`elasticloadbalancing`, API version 2012-06-01, issue #50): what
//! cloud-provider-aws calls for a Service of type LoadBalancer without the `nlb` annotation. A load balancer made
//! here is a row of the native `load_balancers` table (`store::classic_elb` and `store::load_balancers`), so the
//! native API, the console, the audit log and the data plane see it; what classic ELB has and the native model
//! lacks is `store::classic_elb`'s record beside it.

mod attributes;
mod common;
mod health;
mod instances;
mod listeners;
mod load_balancers;
mod network;
mod operations;
mod policies;
mod tags;

use super::credentials::Keys;
use super::error::{AwsError, Result};
use super::named::{self, Named};
use super::query::Params;
use super::xml::Node;
use crate::faults::Subject;
use crate::http::AppState;

pub(super) use self::operations::STANDS_FOR;

/// The actions answered, by name: every call cloud-provider-aws v1.37.1 makes on classic ELB (its `ELB`
/// interface in `aws.go`), and the reads and tags a user's test makes beside them.
pub(super) const ACTIONS: &[&str] = &[
    "AddTags",
    "ApplySecurityGroupsToLoadBalancer",
    "AttachLoadBalancerToSubnets",
    "ConfigureHealthCheck",
    "CreateLoadBalancer",
    "CreateLoadBalancerListeners",
    "CreateLoadBalancerPolicy",
    "DeleteLoadBalancer",
    "DeleteLoadBalancerListeners",
    "DeleteLoadBalancerPolicy",
    "DeregisterInstancesFromLoadBalancer",
    "DescribeInstanceHealth",
    "DescribeLoadBalancerAttributes",
    "DescribeLoadBalancerPolicies",
    "DescribeLoadBalancers",
    "DescribeTags",
    "DetachLoadBalancerFromSubnets",
    "ModifyLoadBalancerAttributes",
    "RegisterInstancesWithLoadBalancer",
    "RemoveTags",
    "SetLoadBalancerPoliciesForBackendServer",
    "SetLoadBalancerPoliciesOfListener",
];

/// What a classic ELB call names, for the fault engine (see `about`): its load balancer, or what a create asks
/// for.
pub(super) async fn about(st: &AppState, action: &str, p: &Params) -> Named {
    let name = match action {
        "CreateLoadBalancer" => {
            let name = p.peek("LoadBalancerName").map(str::to_string);
            return Named::Create(Subject { name, zone: None, tags: named::tags(p, "Tags.member.") });
        }
        "DescribeLoadBalancers" | "DescribeTags" => named::only(p, "LoadBalancerNames.member"),
        _ => p.peek("LoadBalancerName"),
    };
    match name {
        Some(name) => named::load_balancer_named(st, name).await,
        None => Named::Nothing,
    }
}

/// Answer `action` (one of [`ACTIONS`]) with `params` (`Action` and `Version` taken): the elements of its result.
pub async fn call(st: &AppState, keys: &Keys, action: &'static str, mut params: Params) -> Result<Vec<Node>> {
    let p = &mut params;
    let answer = match action {
        "AddTags" => tags::add(st, p).await?,
        "ApplySecurityGroupsToLoadBalancer" => network::apply_security_groups(st, p).await?,
        "AttachLoadBalancerToSubnets" => network::attach_subnets(st, p).await?,
        "ConfigureHealthCheck" => health::configure(st, p).await?,
        "CreateLoadBalancer" => load_balancers::create(st, p).await?,
        "CreateLoadBalancerListeners" => listeners::create(st, p).await?,
        "CreateLoadBalancerPolicy" => policies::create(st, p).await?,
        "DeleteLoadBalancer" => load_balancers::delete(st, p).await?,
        "DeleteLoadBalancerListeners" => listeners::delete(st, p).await?,
        "DeleteLoadBalancerPolicy" => policies::delete(st, p).await?,
        "DeregisterInstancesFromLoadBalancer" => instances::deregister(st, p).await?,
        "DescribeInstanceHealth" => health::describe(st, p).await?,
        "DescribeLoadBalancerAttributes" => attributes::describe(st, p).await?,
        "DescribeLoadBalancerPolicies" => policies::describe(st, p).await?,
        "DescribeLoadBalancers" => load_balancers::describe(st, keys, p).await?,
        "DescribeTags" => tags::describe(st, p).await?,
        "DetachLoadBalancerFromSubnets" => network::detach_subnets(st, p).await?,
        "ModifyLoadBalancerAttributes" => attributes::modify(st, p).await?,
        "RegisterInstancesWithLoadBalancer" => instances::register(st, p).await?,
        "RemoveTags" => tags::remove(st, p).await?,
        "SetLoadBalancerPoliciesForBackendServer" => policies::set_for_backend(st, p).await?,
        "SetLoadBalancerPoliciesOfListener" => policies::set_of_listener(st, p).await?,
        _ => return Err(AwsError::client("InvalidAction", format!("The action {action} is not valid for ELB"))),
    };
    params.finish()?;
    Ok(answer)
}

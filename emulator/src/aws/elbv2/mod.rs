//! Elastic Load Balancing v2 (API version 2015-12-01), network load balancers only: the calls the AWS CCM
//! (cloud-provider-aws) makes for a Service of `aws-load-balancer-type: nlb`, on the store's NLBs
//! (`store::elbv2`: each one a native load balancer, its target groups and listeners mapped onto it).

mod arn;
mod attributes;
mod common;
mod health;
mod listeners;
mod load_balancers;
mod lookup;
mod operations;
mod tags;
mod target_groups;

use super::credentials::Keys;
use super::error::{AwsError, Result};
use super::named::{self, Named};
use super::query::Params;
use super::xml::Node;
use crate::faults::Subject;
use crate::http::AppState;

pub(super) use self::operations::STANDS_FOR;

/// The actions answered, by name.
pub(super) const ACTIONS: &[&str] = &[
    "AddTags",
    "CreateListener",
    "CreateLoadBalancer",
    "CreateTargetGroup",
    "DeleteListener",
    "DeleteLoadBalancer",
    "DeleteTargetGroup",
    "DeregisterTargets",
    "DescribeListeners",
    "DescribeLoadBalancerAttributes",
    "DescribeLoadBalancers",
    "DescribeTags",
    "DescribeTargetGroupAttributes",
    "DescribeTargetGroups",
    "DescribeTargetHealth",
    "ModifyListener",
    "ModifyLoadBalancerAttributes",
    "ModifyTargetGroup",
    "ModifyTargetGroupAttributes",
    "RegisterTargets",
    "RemoveTags",
    "SetSecurityGroups",
];

/// What an ELBv2 call names, for the fault engine (see `about`): a load balancer (a listener's is its load
/// balancer's), a target group, or what a create asks for.
pub(super) async fn about(st: &AppState, keys: &Keys, action: &str, p: &Params) -> Named {
    if let "CreateLoadBalancer" | "CreateTargetGroup" = action {
        let name = p.peek("Name").map(str::to_string);
        return Named::Create(Subject { name, zone: None, tags: named::tags(p, "Tags.member.") });
    }
    if action == "DescribeLoadBalancers"
        && let Some(name) = named::only(p, "Names.member")
    {
        return named::load_balancer_named(st, name).await;
    }
    let arns = arn::Arns::new(&st.cfg.topology.region, &keys.account_id);
    let resource = named::only(p, "ResourceArns.member");
    let lb = p.peek("LoadBalancerArn").or_else(|| named::only(p, "LoadBalancerArns.member"));
    let group = p.peek("TargetGroupArn").or_else(|| named::only(p, "TargetGroupArns.member"));
    // One that cannot be read now is about nothing a rule names.
    let found = if let Some(arn) = lb.or(resource.filter(|r| arns.load_balancer_hex(r).is_ok())) {
        lookup::nlb(st, &arns, arn).await.map(|n| n.lb_id).ok()
    } else if let Some(arn) = group.or(resource) {
        arns.target_group_id(arn).ok().filter(|id| !id.is_empty())
    } else if let Some(arn) = p.peek("ListenerArn") {
        lookup::listener(st, &arns, arn).await.map(|(_, n)| n.lb_id).ok()
    } else {
        None
    };
    found.map_or(Named::Nothing, Named::Resource)
}

/// Answer `action` (one of [`ACTIONS`]) with `params` (`Action` and `Version` taken).
pub async fn call(st: &AppState, keys: &Keys, action: &'static str, mut params: Params) -> Result<Vec<Node>> {
    let arns = arn::Arns::new(&st.cfg.topology.region, &keys.account_id);
    let p = &mut params;
    let answer = match action {
        "AddTags" => tags::add(st, &arns, p).await?,
        "CreateListener" => listeners::create(st, &arns, p).await?,
        "CreateLoadBalancer" => load_balancers::create(st, &arns, p).await?,
        "CreateTargetGroup" => target_groups::create(st, &arns, p).await?,
        "DeleteListener" => listeners::delete(st, &arns, p).await?,
        "DeleteLoadBalancer" => load_balancers::delete(st, &arns, p).await?,
        "DeleteTargetGroup" => target_groups::delete(st, &arns, p).await?,
        "DeregisterTargets" => target_groups::deregister(st, &arns, p).await?,
        "DescribeListeners" => listeners::describe(st, &arns, p).await?,
        "DescribeLoadBalancerAttributes" => attributes::describe_load_balancer(st, &arns, p).await?,
        "DescribeLoadBalancers" => load_balancers::describe(st, &arns, p).await?,
        "DescribeTags" => tags::describe(st, &arns, p).await?,
        "DescribeTargetGroupAttributes" => attributes::describe_target_group(st, &arns, p).await?,
        "DescribeTargetGroups" => target_groups::describe(st, &arns, p).await?,
        "DescribeTargetHealth" => health::describe(st, &arns, p).await?,
        "ModifyListener" => listeners::modify(st, &arns, p).await?,
        "ModifyLoadBalancerAttributes" => attributes::modify_load_balancer(st, &arns, p).await?,
        "ModifyTargetGroup" => target_groups::modify(st, &arns, p).await?,
        "ModifyTargetGroupAttributes" => attributes::modify_target_group(st, &arns, p).await?,
        "RegisterTargets" => target_groups::register(st, &arns, p).await?,
        "RemoveTags" => tags::remove(st, &arns, p).await?,
        "SetSecurityGroups" => load_balancers::set_security_groups(st, &arns, p).await?,
        _ => return Err(AwsError::client("InvalidAction", format!("The action {action} is not valid for ELBv2"))),
    };
    params.finish()?;
    Ok(answer)
}

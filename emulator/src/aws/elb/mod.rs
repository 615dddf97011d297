//! Classic Elastic Load Balancing (`elasticloadbalancing`, API version 2012-06-01, issue #50): what
//! cloud-provider-aws calls for a Service of type LoadBalancer without the `nlb` annotation. A load balancer made
//! here is a row of the native `load_balancers` table (`store::classic_elb` and `store::load_balancers`), so the
//! native API, the console, the audit log and the data plane see it; what classic ELB has and the native model
//! lacks is `store::classic_elb`'s record beside it.

mod attributes;
mod health;
mod instances;
mod listeners;
mod load_balancers;
mod network;
mod operations;
mod policies;
mod tags;

use super::api::Api;
use super::credentials::Keys;
use super::error::{AwsError, Result};
use super::query::Params;
use super::xml::Node;
use crate::error::ApiError;
use crate::http::AppState;
use crate::store::classic_elb::{self, Classic, Listed};
use fakecloud_api::{LoadBalancer, UpdateLoadBalancerRequest};

pub use self::operations::{names, native, reads};

/// The service name both Elastic Load Balancing APIs are signed for (told apart by `Version`).
pub const SERVICE: &str = "elasticloadbalancing";
pub const VERSION: &str = "2012-06-01";
pub const XMLNS: &str = "http://elasticloadbalancing.amazonaws.com/doc/2012-06-01/";

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

/// `action` if the face answers it, as a name that outlives the request.
pub fn action(action: &str) -> Option<&'static str> {
    ACTIONS.iter().find(|a| **a == action).copied()
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

/// The cloud's error as classic ELB answers it (the face's `?` would make it EC2's).
pub(super) fn elb(e: ApiError) -> AwsError {
    AwsError::of(e, Api::Elb)
}

/// A refusal of a change: the cloud's (answered as ELB answers it) or the face's own.
enum Refusal {
    Cloud(ApiError),
    Face(AwsError),
}

impl From<ApiError> for Refusal {
    fn from(e: ApiError) -> Self {
        Self::Cloud(e)
    }
}

/// Change the load balancer named `name` and its record in one transaction (`store::classic_elb::change`), with
/// `change` refusing in ELB's words.
async fn change<F>(st: &AppState, name: &str, change: F) -> Result<Listed>
where
    F: FnOnce(&LoadBalancer, &mut Classic) -> Result<Option<UpdateLoadBalancerRequest>>,
{
    classic_elb::change(&st.db, name, |lb, classic| change(lb, classic).map_err(Refusal::Face)).await.map_err(|r| {
        match r {
            Refusal::Cloud(e) => elb(e),
            Refusal::Face(e) => e,
        }
    })
}

/// A request ELB refuses as malformed: `ValidationError`, its common code for a bad parameter.
fn validation(message: impl Into<String>) -> AwsError {
    AwsError::client("ValidationError", message)
}

/// A change classic ELB refuses for the load balancer's configuration: 409, as botocore's model gives it.
fn invalid_configuration(message: impl Into<String>) -> AwsError {
    AwsError::new(axum::http::StatusCode::CONFLICT, "InvalidConfigurationRequest", message)
}

/// A parameter the call needs and lacks (`name` as the request would give it).
fn missing(name: &str) -> AwsError {
    AwsError::client("MissingParameter", format!("The request must contain the parameter {name}"))
}

/// The `LoadBalancerName` a call is about.
fn name(params: &mut Params) -> Result<String> {
    params.required("LoadBalancerName")
}

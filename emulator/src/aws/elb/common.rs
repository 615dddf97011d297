//! What classic ELB's actions share: the load balancer a call names, a change to it and its record in one
//! transaction, ELB's refusals, and its lists of strings.

use std::collections::BTreeMap;

use fakecloud_api::{LoadBalancer, UpdateLoadBalancerRequest};

use crate::aws::api::Api;
use crate::aws::error::{AwsError, Result};
use crate::aws::query::Params;
use crate::aws::xml::{Node, el, text};
use crate::error::ApiError;
use crate::http::AppState;
use crate::store::classic_elb::{self, Classic, Listed};

/// The cloud's error as classic ELB answers it (the face's `?` would make it EC2's).
pub fn elb(e: ApiError) -> AwsError {
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
pub async fn change<F>(st: &AppState, name: &str, change: F) -> Result<Listed>
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
pub fn validation(message: impl Into<String>) -> AwsError {
    AwsError::client("ValidationError", message)
}

/// A change classic ELB refuses for the load balancer's configuration: 409, as botocore's model gives it.
pub fn invalid_configuration(message: impl Into<String>) -> AwsError {
    AwsError::new(axum::http::StatusCode::CONFLICT, "InvalidConfigurationRequest", message)
}

/// A parameter the call needs and lacks (`name` as the request would give it).
pub fn missing(name: &str) -> AwsError {
    AwsError::client("MissingParameter", format!("The request must contain the parameter {name}"))
}

/// The `LoadBalancerName` a call is about.
pub fn name(params: &mut Params) -> Result<String> {
    params.required("LoadBalancerName")
}

/// A list of strings: `<name><member>…</member>…</name>`.
pub fn members_of(name: &'static str, values: &[String]) -> Node {
    el(name, values.iter().map(|v| text("member", v.clone())).collect())
}

/// Every load balancer the caller names, or a refusal for the first that is not there.
pub async fn named(st: &AppState, names: &[String]) -> Result<BTreeMap<String, LoadBalancer>> {
    let found = classic_elb::list(&st.db, names, 0, names.len() as i64).await.map_err(elb)?;
    let by_name: BTreeMap<String, LoadBalancer> = found.into_iter().map(|l| (l.lb.name.clone(), l.lb)).collect();
    match names.iter().find(|n| !by_name.contains_key(*n)) {
        Some(missing) => Err(elb(classic_elb::not_found(missing))),
        None => Ok(by_name),
    }
}

//! RegisterInstancesWithLoadBalancer and DeregisterInstancesFromLoadBalancer: the native load balancer's
//! backends, checked as the native update checks them (an unknown instance, or one not running, is refused).

use fakecloud_api::UpdateLoadBalancerRequest;

use super::common::{change, missing, name};
use crate::aws::error::{AwsError, Result};
use crate::aws::query::Params;
use crate::aws::xml::{Node, members, text};
use crate::http::AppState;

/// The IDs of `Instances.member.N.InstanceId`.
pub(super) fn ids(params: &mut Params) -> Result<Vec<String>> {
    params
        .member_structures("Instances")?
        .into_iter()
        .map(|mut i| {
            let id = i.required("InstanceId")?;
            i.finish()?;
            Ok(id)
        })
        .collect()
}

/// An instance the load balancer cannot take or does not have: `InvalidInstance`.
pub(super) fn invalid(id: &str) -> AwsError {
    AwsError::client("InvalidInstance", format!("The instance {id} is not registered with the load balancer"))
}

fn answer(backends: &[String]) -> Vec<Node> {
    vec![members("Instances", backends.iter().map(|i| vec![text("InstanceId", i.clone())]))]
}

fn requested(params: &mut Params) -> Result<Vec<String>> {
    let ids = ids(params)?;
    if ids.is_empty() {
        return Err(missing("Instances.member.1"));
    }
    Ok(ids)
}

/// Instances registered already stay; the answer is every instance registered after the call.
pub async fn register(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let name = name(params)?;
    let ids = requested(params)?;
    params.finish()?;
    let listed = change(st, &name, |lb, _| {
        let mut backends = lb.backends.clone();
        for id in ids {
            if !backends.contains(&id) {
                backends.push(id);
            }
        }
        Ok(Some(UpdateLoadBalancerRequest { backends: Some(backends), ..Default::default() }))
    })
    .await?;
    Ok(answer(&listed.lb.backends))
}

/// An instance that is not registered is refused, and none is deregistered.
pub async fn deregister(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let name = name(params)?;
    let ids = requested(params)?;
    params.finish()?;
    let listed = change(st, &name, |lb, _| {
        if let Some(id) = ids.iter().find(|i| !lb.backends.contains(i)) {
            return Err(invalid(id));
        }
        let backends = lb.backends.iter().filter(|b| !ids.contains(b)).cloned().collect();
        Ok(Some(UpdateLoadBalancerRequest { backends: Some(backends), ..Default::default() }))
    })
    .await?;
    Ok(answer(&listed.lb.backends))
}

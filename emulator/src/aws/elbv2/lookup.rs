//! The load balancer, target group or listener an ARN names, or ELB's not-found for it.

use super::arn::Arns;
use crate::aws::api::Api;
use crate::aws::error::{AwsError, Result};
use crate::http::AppState;
use crate::store::elbv2::{self, Listener, Nlb, TargetGroup};

fn of(e: crate::error::ApiError) -> AwsError {
    AwsError::of(e, Api::Elbv2)
}

/// The NLB an ARN names.
pub async fn nlb(st: &AppState, arns: &Arns, arn: &str) -> Result<Nlb> {
    let not_found = || AwsError::client("LoadBalancerNotFound", format!("Load balancer '{arn}' not found"));
    let hex = arns.load_balancer_hex(arn)?.ok_or_else(not_found)?;
    let all = elbv2::load_balancers(&st.db).await.map_err(of)?;
    all.into_iter().find(|n| n.arn_id == hex).ok_or_else(not_found)
}

/// The target group an ARN names.
pub async fn group(st: &AppState, arns: &Arns, arn: &str) -> Result<TargetGroup> {
    let id = arns.target_group_id(arn)?;
    elbv2::target_group(&st.db, &id)
        .await
        .map_err(of)?
        .ok_or_else(|| AwsError::client("TargetGroupNotFound", format!("Target group '{arn}' not found")))
}

/// The listener an ARN names, and its NLB.
pub async fn listener(st: &AppState, arns: &Arns, arn: &str) -> Result<(Listener, Nlb)> {
    let id = arns.listener_id(arn)?;
    let not_found = || AwsError::client("ListenerNotFound", format!("Listener '{arn}' not found"));
    let l = elbv2::listeners(&st.db, None).await.map_err(of)?.into_iter().find(|l| l.id == id).ok_or_else(not_found)?;
    let nlb = elbv2::load_balancers(&st.db)
        .await
        .map_err(of)?
        .into_iter()
        .find(|n| n.lb_id == l.lb_id)
        .ok_or_else(not_found)?;
    Ok((l, nlb))
}

//! An NLB's own row, written and dropped in the native load balancer's create and delete
//! (`store::load_balancers`), whichever face makes or deletes it.

use std::collections::BTreeMap;

use crate::db::Tx;
use crate::error::{ApiError, Result};
use crate::store::security_groups;
use crate::store::tags::Resource;
use crate::store::tags::{forget, write_new};

pub(super) fn json<T: serde::Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| ApiError::internal(e.to_string()))
}

/// What an NLB has beside its native row, as CreateLoadBalancer gives it.
#[derive(Debug, Clone)]
pub struct NewNlb {
    pub arn_id: String,
    pub ip_address_type: String,
    pub subnets: Vec<String>,
    pub security_groups: Vec<String>,
    pub attributes: BTreeMap<String, String>,
    pub tags: BTreeMap<String, String>,
}

/// The NLB's own row, in its native row's insert's transaction.
pub(crate) async fn insert_load_balancer(tx: &mut Tx, lb_id: &str, nlb: &NewNlb) -> Result<()> {
    sqlx::query(
        "INSERT INTO elbv2_load_balancers (lb_id, arn_id, ip_address_type, subnets, attributes) \
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(lb_id)
    .bind(&nlb.arn_id)
    .bind(&nlb.ip_address_type)
    .bind(json(&nlb.subnets)?)
    .bind(json(&nlb.attributes)?)
    .execute(&mut **tx)
    .await?;
    security_groups::attach_load_balancer(tx, lb_id, &nlb.security_groups).await?;
    write_new(tx, &Resource::LoadBalancer(lb_id.to_string()), &nlb.tags).await
}

/// Drop what the face keeps of the load balancer `lb_id` (its row, listeners and their tags), in the
/// transaction that deletes it; nothing for a load balancer that is not an NLB.
pub(crate) async fn forget_load_balancer(tx: &mut Tx, lb_id: &str) -> Result<()> {
    let listeners: Vec<String> =
        sqlx::query_scalar("SELECT id FROM elbv2_listeners WHERE lb_id = $1").bind(lb_id).fetch_all(&mut **tx).await?;
    for id in listeners.iter().map(String::as_str).chain([lb_id]) {
        forget(tx, id).await?;
    }
    sqlx::query("DELETE FROM elbv2_listeners WHERE lb_id = $1").bind(lb_id).execute(&mut **tx).await?;
    sqlx::query("DELETE FROM elbv2_load_balancers WHERE lb_id = $1").bind(lb_id).execute(&mut **tx).await?;
    Ok(())
}

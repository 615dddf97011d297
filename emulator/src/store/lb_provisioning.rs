//! How long new load balancers stay `provisioning`, scriptable at run time: for every load balancer, or for those
//! created with one name (which wins), else the start flag's `--lb-provision-delay`. Kept in the database, so an
//! acknowledged setting survives a restart; a create reads it, so it applies to load balancers created after it.

use std::time::Duration;

use fakecloud_api::limits::LB_PROVISION_SECONDS_MAX;
use fakecloud_api::{LbProvisioning, SetLbProvisioningRequest};

use crate::config::Config;
use crate::db::{Db, ms};
use crate::error::Result;
use crate::validate;

/// The row of the setting for every load balancer (a load balancer's name is never empty).
const EVERY: &str = "";

/// The delay a load balancer named `name` gets if it is created now.
pub async fn delay_for(db: &Db, cfg: &Config, name: &str) -> Result<Duration> {
    // Its own name sorts after the empty one: the last row is the most specific setting.
    let set: Option<i64> = sqlx::query_scalar(
        "SELECT delay_ms FROM lb_provisioning WHERE load_balancer IN ($1, '') ORDER BY load_balancer DESC LIMIT 1",
    )
    .bind(name)
    .fetch_optional(db.reader())
    .await?;
    Ok(set.map_or(cfg.timings.lb_provision_delay, |d| Duration::from_millis(d.max(0).unsigned_abs())))
}

pub async fn get(db: &Db, cfg: &Config) -> Result<LbProvisioning> {
    let rows: Vec<(String, i64)> =
        sqlx::query_as("SELECT load_balancer, delay_ms FROM lb_provisioning").fetch_all(db.reader()).await?;
    let mut out = LbProvisioning {
        default_seconds: cfg.timings.lb_provision_delay.as_secs_f64(),
        seconds: None,
        load_balancers: Default::default(),
    };
    for (name, delay_ms) in rows {
        let seconds = delay_ms as f64 / 1000.0;
        if name == EVERY {
            out.seconds = Some(seconds);
        } else {
            out.load_balancers.insert(name, seconds);
        }
    }
    Ok(out)
}

/// The checks a setting gets, without making it (also for a scenario file, checked whole before it runs).
pub fn check(req: &SetLbProvisioningRequest) -> Result<()> {
    validate::in_range("seconds", req.seconds, 0.0, LB_PROVISION_SECONDS_MAX)?;
    if let Some(name) = &req.load_balancer {
        validate::NAME.check("load_balancer", name)?;
    }
    Ok(())
}

pub async fn set(db: &Db, cfg: &Config, req: &SetLbProvisioningRequest) -> Result<LbProvisioning> {
    check(req)?;
    sqlx::query(
        "INSERT INTO lb_provisioning (load_balancer, delay_ms) VALUES ($1, $2) \
         ON CONFLICT(load_balancer) DO UPDATE SET delay_ms = $2",
    )
    .bind(req.load_balancer.as_deref().unwrap_or(EVERY))
    .bind(ms(Duration::from_secs_f64(req.seconds)))
    .execute(db.writer())
    .await?;
    get(db, cfg).await
}

/// Back to the start flag: `load_balancer`'s setting, or (`None`) every setting.
pub async fn reset(db: &Db, cfg: &Config, load_balancer: Option<&str>) -> Result<LbProvisioning> {
    match load_balancer {
        Some(name) => {
            validate::NAME.check("load_balancer", name)?;
            sqlx::query("DELETE FROM lb_provisioning WHERE load_balancer = $1").bind(name).execute(db.writer()).await?
        }
        None => sqlx::query("DELETE FROM lb_provisioning").execute(db.writer()).await?,
    };
    get(db, cfg).await
}

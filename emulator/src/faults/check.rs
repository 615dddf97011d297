//! The checks each fault request gets when it is made, without making it — for a scenario file, checked whole
//! before its first step (`fakecloud scenario run`). What depends on the engine's state (an ID in use) is
//! left to the call itself.

use fakecloud_api::{CreateFaultRuleRequest, CreateLbFaultRuleRequest, SetRateLimitRequest, StartOutageRequest};

use super::lb_rules::ActiveLbRule;
use super::outages::ActiveOutage;
use super::rate_limits::ActiveLimit;
use super::rules::{ActiveRule, check_position};
use crate::db::now_ms;
use crate::error::Result;

/// An ID for a rule the request leaves unnamed (the engine would pick one).
const UNNAMED: &str = "unnamed";

pub fn rule(req: &CreateFaultRuleRequest, operations: &[String]) -> Result<()> {
    check_position(req.position)?;
    let id = req.id.clone().unwrap_or_else(|| UNNAMED.into());
    let (m, a, t) = (req.matcher.clone(), req.action.clone(), req.trigger.clone());
    ActiveRule::new(id, m, a, t, operations, 0, now_ms()).map(drop)
}

pub fn lb_rule(req: &CreateLbFaultRuleRequest) -> Result<()> {
    let id = req.id.clone().unwrap_or_else(|| UNNAMED.into());
    ActiveLbRule::new(id, req.matcher.clone(), req.action.clone(), req.trigger.clone(), 0, now_ms()).map(drop)
}

pub fn limit(id: &str, spec: &SetRateLimitRequest, operations: &[String]) -> Result<()> {
    crate::validate::NAME.check("id", id)?;
    ActiveLimit::new(id, spec.clone(), operations).map(drop)
}

/// `zones`: the region's, when known; without them a zone outage's zone is not checked.
pub fn outage(req: &StartOutageRequest, zones: Option<&[&str]>) -> Result<()> {
    let own: Vec<&str> = req.zone.iter().map(String::as_str).collect();
    ActiveOutage::new(UNNAMED.into(), req.clone(), zones.unwrap_or(&own), now_ms()).map(drop)
}

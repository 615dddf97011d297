//! DescribeLoadBalancerAttributes and ModifyLoadBalancerAttributes: kept in classic ELB's record and answered
//! as last given (a structure ModifyLoadBalancerAttributes names replaces the one kept; the others stay), so that
//! cloud-provider-aws, which compares the whole set with what it wants, finds it there after one change.
//!
//! None changes the data plane: it balances over the instances of every zone (cross-zone, always), closes
//! connections idle for `fakecloud serve --lb-idle-timeout` (350 s; not the attribute's), does not drain a
//! deregistered instance's connections, and writes no access log (there is no S3).

use super::common::{change, elb, invalid_configuration, name, validation};
use crate::aws::error::Result;
use crate::aws::query::Params;
use crate::aws::xml::{Node, el, members, text};
use crate::http::AppState;
use crate::store::classic_elb::{self, AccessLog, Attributes, ConnectionDraining};

/// The one additional attribute classic ELB has, and its values (the ELB guide's "desync mitigation mode").
const DESYNC: &str = "elb.http.desyncmitigationmode";
const DESYNC_MODES: [&str; 3] = ["monitor", "defensive", "strictest"];
const ADDITIONAL_MAX: usize = 10;

fn described(a: &Attributes) -> Node {
    let mut access_log = vec![text("Enabled", a.access_log.enabled.to_string())];
    access_log.extend(a.access_log.s3_bucket_name.clone().map(|b| text("S3BucketName", b)));
    access_log.extend(a.access_log.emit_interval.map(|i| text("EmitInterval", i.to_string())));
    access_log.extend(a.access_log.s3_bucket_prefix.clone().map(|p| text("S3BucketPrefix", p)));
    let mut draining = vec![text("Enabled", a.connection_draining.enabled.to_string())];
    draining.extend(a.connection_draining.timeout.map(|t| text("Timeout", t.to_string())));
    let mut attrs = vec![
        el("CrossZoneLoadBalancing", vec![text("Enabled", a.cross_zone.to_string())]),
        el("AccessLog", access_log),
        el("ConnectionDraining", draining),
        el("ConnectionSettings", vec![text("IdleTimeout", a.idle_timeout.to_string())]),
    ];
    // None given, none written: an empty list would read as a list to an SDK that compares it with none.
    if !a.additional.is_empty() {
        attrs.push(members(
            "AdditionalAttributes",
            a.additional.iter().map(|(k, v)| vec![text("Key", k.clone()), text("Value", v.clone())]),
        ));
    }
    el("LoadBalancerAttributes", attrs)
}

pub async fn describe(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let name = name(params)?;
    params.finish()?;
    let listed = classic_elb::get(&st.db, &name).await.map_err(elb)?;
    Ok(vec![described(&listed.classic.extras.attributes)])
}

/// The structure `name` of `attrs`, if given: its members, which `read` takes.
fn given<T>(attrs: &mut Params, name: &str, read: impl FnOnce(&mut Params) -> Result<T>) -> Result<Option<T>> {
    let mut s = attrs.structure(name);
    if s.is_empty() {
        return Ok(None);
    }
    let value = read(&mut s)?;
    s.finish()?;
    Ok(Some(value))
}

fn enabled(s: &mut Params) -> Result<bool> {
    s.flag("Enabled")?.ok_or_else(|| validation(format!("{} is required", s.name_of("Enabled"))))
}

/// What a ModifyLoadBalancerAttributes gives: each structure it names, and additional attributes by key.
#[derive(Default)]
struct Patch {
    cross_zone: Option<bool>,
    access_log: Option<AccessLog>,
    connection_draining: Option<ConnectionDraining>,
    idle_timeout: Option<u32>,
    additional: Vec<(String, String)>,
}

fn access_log(s: &mut Params) -> Result<AccessLog> {
    let log = AccessLog {
        enabled: enabled(s)?,
        s3_bucket_name: s.take("S3BucketName"),
        emit_interval: s.int("EmitInterval", 5, 60)?,
        s3_bucket_prefix: s.take("S3BucketPrefix"),
    };
    if let Some(i) = log.emit_interval.filter(|i| !matches!(i, 5 | 60)) {
        return Err(validation(format!("EmitInterval {i} is not valid: 5 or 60 minutes")));
    }
    if log.enabled && log.s3_bucket_name.is_none() {
        return Err(invalid_configuration("An access log needs an S3 bucket (AccessLog.S3BucketName)"));
    }
    Ok(log)
}

fn patch(attrs: &mut Params) -> Result<Patch> {
    let mut p = Patch {
        cross_zone: given(attrs, "CrossZoneLoadBalancing", enabled)?,
        access_log: given(attrs, "AccessLog", access_log)?,
        connection_draining: given(attrs, "ConnectionDraining", |s| {
            Ok(ConnectionDraining { enabled: enabled(s)?, timeout: s.int("Timeout", 1, 3600)? })
        })?,
        idle_timeout: given(attrs, "ConnectionSettings", |s| {
            s.int("IdleTimeout", 1, 3600)?.ok_or_else(|| validation("ConnectionSettings.IdleTimeout is required"))
        })?,
        ..Patch::default()
    };
    let additional = attrs.member_structures("AdditionalAttributes")?;
    if additional.len() > ADDITIONAL_MAX {
        return Err(validation(format!("At most {ADDITIONAL_MAX} AdditionalAttributes")));
    }
    for mut a in additional {
        let (key, value) = (a.required("Key")?, a.required("Value")?);
        a.finish()?;
        if key != DESYNC || !DESYNC_MODES.contains(&value.as_str()) {
            return Err(validation(format!(
                "Additional attribute {key}={value} is not valid: classic ELB has {DESYNC}, one of {}",
                DESYNC_MODES.join(", ")
            )));
        }
        p.additional.push((key, value));
    }
    attrs.finish()?;
    Ok(p)
}

impl Patch {
    fn apply(self, current: &mut Attributes) {
        current.cross_zone = self.cross_zone.unwrap_or(current.cross_zone);
        if let Some(log) = self.access_log {
            current.access_log = log;
        }
        if let Some(draining) = self.connection_draining {
            current.connection_draining = draining;
        }
        current.idle_timeout = self.idle_timeout.unwrap_or(current.idle_timeout);
        for (key, value) in self.additional {
            current.additional.retain(|(k, _)| *k != key);
            current.additional.push((key, value));
        }
    }
}

pub async fn modify(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let name = name(params)?;
    let patch = patch(&mut params.structure("LoadBalancerAttributes"))?;
    params.finish()?;
    let listed = change(st, &name, |_, classic| {
        patch.apply(&mut classic.extras.attributes);
        Ok(None)
    })
    .await?;
    Ok(vec![text("LoadBalancerName", name), described(&listed.classic.extras.attributes)])
}

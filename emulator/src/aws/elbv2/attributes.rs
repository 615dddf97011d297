//! Describe/ModifyLoadBalancerAttributes and Describe/ModifyTargetGroupAttributes: the NLB attributes the AWS CCM
//! reconciles and the target group attributes it may set, stored and answered. What takes effect:
//! `deletion_protection.enabled` (DeleteLoadBalancer refuses) and `deregistration_delay.timeout_seconds` (how
//! long a deregistered target shows `draining`; the data plane stops giving it new connections at once). The
//! rest changes nothing in the data plane: it spreads over every zone's targets (cross-zone, always), speaks no
//! Proxy Protocol, writes no access logs, and as a proxy shows itself as the client.

use std::collections::BTreeMap;

use super::arn::Arns;
use super::common::validation;
use super::lookup::{group, nlb};
use crate::aws::api::Api;
use crate::aws::error::{AwsError, Result};
use crate::aws::query::Params;
use crate::aws::xml::{Node, members, text};
use crate::http::AppState;
use crate::store::elbv2::{self, DEREGISTRATION_DELAY_SECONDS, GroupChange};

/// What a value may be.
enum Rule {
    Bool,
    Text,
    /// An integer in this range.
    Int(i64, i64),
    OneOf(&'static [&'static str]),
}

/// An NLB's attributes, their defaults and rules (ELB's `LoadBalancerAttribute` reference, for NLBs).
const LOAD_BALANCER: &[(&str, &str, Rule)] = &[
    ("access_logs.s3.bucket", "", Rule::Text),
    ("access_logs.s3.enabled", "false", Rule::Bool),
    ("access_logs.s3.prefix", "", Rule::Text),
    ("deletion_protection.enabled", "false", Rule::Bool),
    (
        "dns_record.client_routing_policy",
        "any_availability_zone",
        Rule::OneOf(&["availability_zone_affinity", "partial_availability_zone_affinity", "any_availability_zone"]),
    ),
    ("load_balancing.cross_zone.enabled", "false", Rule::Bool),
    ("zonal_shift.config.enabled", "false", Rule::Bool),
];

/// An NLB target group's attributes, their defaults (for an instance group of TCP) and rules.
const TARGET_GROUP: &[(&str, &str, Rule)] = &[
    ("deregistration_delay.connection_termination.enabled", "false", Rule::Bool),
    ("deregistration_delay.timeout_seconds", "300", Rule::Int(0, 3600)),
    (
        "load_balancing.cross_zone.enabled",
        "use_load_balancer_configuration",
        Rule::OneOf(&["true", "false", "use_load_balancer_configuration"]),
    ),
    ("preserve_client_ip.enabled", "true", Rule::Bool),
    ("proxy_protocol_v2.enabled", "false", Rule::Bool),
    ("stickiness.enabled", "false", Rule::Bool),
    ("stickiness.type", "source_ip", Rule::OneOf(&["source_ip"])),
];

fn defaults(table: &[(&str, &str, Rule)]) -> BTreeMap<String, String> {
    table.iter().map(|(k, v, _)| (k.to_string(), v.to_string())).collect()
}

pub fn load_balancer_defaults() -> BTreeMap<String, String> {
    defaults(LOAD_BALANCER)
}

pub fn target_group_defaults() -> BTreeMap<String, String> {
    debug_assert_eq!(DEREGISTRATION_DELAY_SECONDS, 300);
    defaults(TARGET_GROUP)
}

/// `Attributes.member.N.Key`/`Value` applied over `current`, each checked against `table`.
fn changed(
    table: &[(&str, &str, Rule)],
    current: &BTreeMap<String, String>,
    params: &mut Params,
) -> Result<BTreeMap<String, String>> {
    let mut next = current.clone();
    let list = params.structures("Attributes.member")?;
    if list.is_empty() {
        return Err(validation("At least one attribute must be specified (Attributes.member.1.Key)"));
    }
    for mut a in list {
        let key = a.required("Key")?;
        let value = a.take("Value").unwrap_or_default();
        a.finish()?;
        let rule = table
            .iter()
            .find(|(k, _, _)| *k == key)
            .map(|(_, _, r)| r)
            .ok_or_else(|| AwsError::client("InvalidConfigurationRequest", format!("Key {key} not valid")))?;
        let ok = match rule {
            Rule::Bool => value == "true" || value == "false",
            Rule::Text => true,
            Rule::Int(min, max) => value.parse::<i64>().is_ok_and(|n| (*min..=*max).contains(&n)),
            Rule::OneOf(values) => values.contains(&value.as_str()),
        };
        if !ok {
            return Err(AwsError::client(
                "InvalidConfigurationRequest",
                format!("'{value}' is not a valid value for attribute {key}"),
            ));
        }
        next.insert(key, value);
    }
    if next.get("access_logs.s3.enabled").map(String::as_str) == Some("true")
        && next.get("access_logs.s3.bucket").is_none_or(String::is_empty)
    {
        return Err(AwsError::client(
            "InvalidConfigurationRequest",
            "The value of 'access_logs.s3.bucket' cannot be empty while access logs are enabled",
        ));
    }
    Ok(next)
}

fn answer(attributes: &BTreeMap<String, String>) -> Vec<Node> {
    vec![members("Attributes", attributes.iter().map(|(k, v)| vec![text("Key", k.clone()), text("Value", v.clone())]))]
}

fn of(e: crate::error::ApiError) -> AwsError {
    AwsError::of(e, Api::Elbv2)
}

pub async fn describe_load_balancer(st: &AppState, arns: &Arns, params: &mut Params) -> Result<Vec<Node>> {
    let arn = params.required("LoadBalancerArn")?;
    params.finish()?;
    let nlb = nlb(st, arns, &arn).await?;
    Ok(answer(&nlb.attributes().map_err(of)?))
}

pub async fn modify_load_balancer(st: &AppState, arns: &Arns, params: &mut Params) -> Result<Vec<Node>> {
    let arn = params.required("LoadBalancerArn")?;
    let nlb = nlb(st, arns, &arn).await?;
    let next = changed(LOAD_BALANCER, &nlb.attributes().map_err(of)?, params)?;
    params.finish()?;
    let nlb = elbv2::set_load_balancer(&st.db, &nlb.arn_id, Some(&next), None).await.map_err(of)?;
    Ok(answer(&nlb.attributes().map_err(of)?))
}

pub async fn describe_target_group(st: &AppState, arns: &Arns, params: &mut Params) -> Result<Vec<Node>> {
    let arn = params.required("TargetGroupArn")?;
    params.finish()?;
    Ok(answer(&group(st, arns, &arn).await?.attributes))
}

pub async fn modify_target_group(st: &AppState, arns: &Arns, params: &mut Params) -> Result<Vec<Node>> {
    let arn = params.required("TargetGroupArn")?;
    let group = group(st, arns, &arn).await?;
    let next = changed(TARGET_GROUP, &group.attributes, params)?;
    params.finish()?;
    if group.protocol != "TCP"
        && group.protocol != "TLS"
        && next.get("preserve_client_ip.enabled").map(String::as_str) == Some("false")
    {
        return Err(AwsError::client(
            "InvalidConfigurationRequest",
            "Client IP preservation cannot be disabled for UDP and TCP_UDP target groups",
        ));
    }
    let changed = elbv2::change_target_group(&st.db, &group.id, GroupChange::Attributes(&next)).await.map_err(of)?;
    Ok(answer(&changed.attributes))
}

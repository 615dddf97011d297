//! CreateTargetGroup, DescribeTargetGroups, ModifyTargetGroup, DeleteTargetGroup, RegisterTargets and
//! DeregisterTargets: instance target groups of TCP, UDP, TCP_UDP or TLS, kept by `store::elbv2`, whose targets
//! and health check become the native load balancer's once a listener forwards to them.

use std::collections::BTreeMap;

use super::arn::{self, Arns};
use super::common::{check_name, page, validation};
use super::lookup::{group, nlb};
use super::{attributes, tags};
use crate::aws::api::Api;
use crate::aws::ec2::network;
use crate::aws::error::{AwsError, Result};
use crate::aws::query::Params;
use crate::aws::xml::{Node, el, members, text};
use crate::http::AppState;
use crate::store::elbv2::{self, GroupChange, HealthSettings, Target, TargetGroup};

/// NLB's target group protocols.
const PROTOCOLS: &[&str] = &["TCP", "UDP", "TCP_UDP", "TLS"];

fn of(e: crate::error::ApiError) -> AwsError {
    AwsError::of(e, Api::Elbv2)
}

fn invalid_configuration(message: impl Into<String>) -> AwsError {
    AwsError::client("InvalidConfigurationRequest", message)
}

/// The health check settings `params` give, over `base` (a new group's defaults, or its current ones).
fn health(params: &mut Params, base: HealthSettings, protocol: &str) -> Result<HealthSettings> {
    let mut h = base;
    if let Some(p) = params.take("HealthCheckProtocol") {
        h.protocol = match p.as_str() {
            "TCP" | "HTTP" => p,
            "HTTPS" => {
                return Err(invalid_configuration(
                    "Health check protocol HTTPS is not supported: fakecloud's health checks are TCP or HTTP",
                ));
            }
            other => return Err(validation(format!("Health check protocol '{other}' is not valid"))),
        };
    }
    if protocol == "UDP" && h.protocol == "UDP" {
        return Err(invalid_configuration("Health check protocol cannot be UDP"));
    }
    if let Some(port) = params.take("HealthCheckPort") {
        if port != "traffic-port" && !port.parse::<u16>().is_ok_and(|p| p > 0) {
            return Err(validation(format!("Health check port '{port}' must be 'traffic-port' or 1 to 65535")));
        }
        h.port = port;
    }
    if params.flag("HealthCheckEnabled")? == Some(false) {
        return Err(invalid_configuration(
            "Health checks cannot be disabled for target groups of target type 'instance'",
        ));
    }
    h.interval_seconds = params.int("HealthCheckIntervalSeconds", 5, 300)?.unwrap_or(h.interval_seconds);
    h.timeout_seconds = params.int("HealthCheckTimeoutSeconds", 2, 120)?.unwrap_or(h.timeout_seconds);
    h.healthy_threshold = params.int("HealthyThresholdCount", 2, 10)?.unwrap_or(h.healthy_threshold);
    h.unhealthy_threshold = params.int("UnhealthyThresholdCount", 2, 10)?.unwrap_or(h.unhealthy_threshold);
    if let Some(path) = params.take("HealthCheckPath") {
        if !path.starts_with('/') || path.len() > 1024 {
            return Err(validation(format!(
                "Health check path '{path}' must start with '/' (at most 1024 characters)"
            )));
        }
        h.path = Some(path);
    }
    let mut matcher = params.structure("Matcher");
    if let Some(code) = matcher.take("HttpCode") {
        h.matcher = Some(code);
    }
    matcher.finish()?;
    if h.protocol == "TCP" {
        if h.path.is_some() || h.matcher.is_some() {
            return Err(invalid_configuration("A health check path and matcher are for HTTP health checks only"));
        }
    } else {
        h.path.get_or_insert_with(|| "/".into());
        h.matcher.get_or_insert_with(|| "200-399".into());
    }
    Ok(h)
}

/// A new NLB target group's health check: ELB's defaults for a network load balancer.
fn defaults() -> HealthSettings {
    HealthSettings {
        protocol: "TCP".into(),
        port: "traffic-port".into(),
        path: None,
        interval_seconds: 30,
        timeout_seconds: 10,
        healthy_threshold: 5,
        unhealthy_threshold: 2,
        matcher: None,
    }
}

pub async fn create(st: &AppState, arns: &Arns, params: &mut Params) -> Result<Vec<Node>> {
    let topo = &st.cfg.topology;
    let name = params.required("Name")?;
    check_name("Target group", &name)?;
    let protocol = params.required("Protocol")?;
    if !PROTOCOLS.contains(&protocol.as_str()) {
        return Err(invalid_configuration(format!(
            "Target group protocol '{protocol}' is not supported: fakecloud answers network load balancers, whose \
             target groups are TCP, UDP, TCP_UDP or TLS"
        )));
    }
    let port = params.int("Port", 1, 65535)?.ok_or_else(|| validation("A port must be specified"))?;
    let vpc_id = params.required("VpcId")?;
    if vpc_id != network::vpc_id(topo) {
        return Err(validation(format!("The VPC ID '{vpc_id}' is not found")));
    }
    match params.take("TargetType").as_deref() {
        None | Some("instance") => {}
        Some(other) => {
            return Err(invalid_configuration(format!(
                "Target type '{other}' is not supported: fakecloud's target groups hold instances"
            )));
        }
    }
    if params.take("IpAddressType").is_some_and(|t| t != "ipv4") {
        return Err(invalid_configuration("Target groups of IP address type other than ipv4 are not supported"));
    }
    let health = health(params, defaults(), &protocol)?;
    let tags = tags::parse(params)?;
    params.finish()?;
    let group = TargetGroup {
        id: format!("{}{}", arn::GROUP_PREFIX, arn::new_hex()),
        name,
        protocol,
        port: u16::try_from(port).map_err(|_| validation("Port must be 1 to 65535"))?,
        vpc_id,
        health,
        attributes: attributes::target_group_defaults(),
        targets: Vec::new(),
        created_at: 0,
        lb_id: None,
    };
    elbv2::create_target_group(&st.db, &group, &tags).await.map_err(of)?;
    let made = self::group(st, arns, &arns.target_group(&group.name, &group.id)).await?;
    Ok(vec![members("TargetGroups", [shape(st, arns, &made).await?])])
}

/// A target group as ELB describes it.
async fn shape(st: &AppState, arns: &Arns, g: &TargetGroup) -> Result<Vec<Node>> {
    let h = &g.health;
    let mut lbs = Vec::new();
    if let Some(lb_id) = &g.lb_id {
        let all = elbv2::load_balancers(&st.db).await.map_err(of)?;
        lbs.extend(
            all.iter().filter(|n| &n.lb_id == lb_id).map(|n| text("member", arns.load_balancer(&n.name, &n.arn_id))),
        );
    }
    let mut shape = vec![
        text("TargetGroupArn", arns.target_group(&g.name, &g.id)),
        text("TargetGroupName", g.name.clone()),
        text("Protocol", g.protocol.clone()),
        text("Port", g.port.to_string()),
        text("VpcId", g.vpc_id.clone()),
        text("HealthCheckProtocol", h.protocol.clone()),
        text("HealthCheckPort", h.port.clone()),
        text("HealthCheckEnabled", "true"),
        text("HealthCheckIntervalSeconds", h.interval_seconds.to_string()),
        text("HealthCheckTimeoutSeconds", h.timeout_seconds.to_string()),
        text("HealthyThresholdCount", h.healthy_threshold.to_string()),
        text("UnhealthyThresholdCount", h.unhealthy_threshold.to_string()),
    ];
    shape.extend(h.path.clone().map(|p| text("HealthCheckPath", p)));
    shape.extend(h.matcher.clone().map(|m| el("Matcher", vec![text("HttpCode", m)])));
    shape.extend([el("LoadBalancerArns", lbs), text("TargetType", "instance"), text("IpAddressType", "ipv4")]);
    Ok(shape)
}

pub async fn describe(st: &AppState, arns: &Arns, params: &mut Params) -> Result<Vec<Node>> {
    let lb_arn = params.take("LoadBalancerArn");
    let names = params.list("Names.member")?;
    let wanted = params.list("TargetGroupArns.member")?;
    if [lb_arn.is_some(), !names.is_empty(), !wanted.is_empty()].iter().filter(|x| **x).count() > 1 {
        return Err(validation("Only one of LoadBalancerArn, TargetGroupArns and Names can be specified"));
    }
    let all = elbv2::target_groups(&st.db).await.map_err(of)?;
    let not_found =
        |w: &str| AwsError::client("TargetGroupNotFound", format!("One or more target groups not found: '{w}'"));
    let chosen: Vec<&TargetGroup> = if let Some(arn) = lb_arn {
        let n = nlb(st, arns, &arn).await?;
        all.iter().filter(|g| g.lb_id.as_deref() == Some(n.lb_id.as_str())).collect()
    } else if !names.is_empty() {
        names.iter().map(|w| all.iter().find(|g| &g.name == w).ok_or_else(|| not_found(w))).collect::<Result<_>>()?
    } else if !wanted.is_empty() {
        let mut chosen = Vec::new();
        for w in &wanted {
            let id = arns.target_group_id(w)?;
            chosen.push(all.iter().find(|g| g.id == id).ok_or_else(|| not_found(w))?);
        }
        chosen
    } else {
        all.iter().collect()
    };
    let (page, next) = page(chosen, params)?;
    let mut described = Vec::new();
    for g in page {
        described.push(shape(st, arns, g).await?);
    }
    let mut answer = vec![members("TargetGroups", described)];
    answer.extend(next.map(|m| text("NextMarker", m)));
    Ok(answer)
}

pub async fn modify(st: &AppState, arns: &Arns, params: &mut Params) -> Result<Vec<Node>> {
    let arn = params.required("TargetGroupArn")?;
    let current = group(st, arns, &arn).await?;
    let health = health(params, current.health.clone(), &current.protocol)?;
    params.finish()?;
    let changed = elbv2::change_target_group(&st.db, &current.id, GroupChange::Health(&health)).await.map_err(of)?;
    Ok(vec![members("TargetGroups", [shape(st, arns, &changed).await?])])
}

pub async fn delete(st: &AppState, arns: &Arns, params: &mut Params) -> Result<Vec<Node>> {
    let arn = params.required("TargetGroupArn")?;
    params.finish()?;
    // ELB answers the deletion of a target group that is not there as done.
    let id = arns.target_group_id(&arn)?;
    match elbv2::delete_target_group(&st.db, &id).await {
        Err(e) if e.code == elbv2::code::TARGET_GROUP_NOT_FOUND => Ok(Vec::new()),
        r => r.map(|()| Vec::new()).map_err(of),
    }
}

/// `Targets.member.N`: instance IDs and ports (the group's own when left out); at least one.
fn targets(params: &mut Params, group: &TargetGroup) -> Result<Vec<Target>> {
    let mut targets = Vec::new();
    for mut t in params.structures("Targets.member")? {
        let id = t.required("Id")?;
        let port =
            t.int("Port", 1, 65535)?.map_or(Ok(group.port), u16::try_from).map_err(|_| validation("bad port"))?;
        // A zone of the target's own is for IP targets outside the VPC; an instance's is its own.
        if t.take("AvailabilityZone").is_some() {
            return Err(validation("An Availability Zone cannot be specified for targets of type 'instance'"));
        }
        t.finish()?;
        targets.push(Target { id, port, draining_until: None });
    }
    if targets.is_empty() {
        return Err(validation("At least one target must be specified (Targets.member.1.Id)"));
    }
    let mut seen = BTreeMap::new();
    for t in &targets {
        if seen.insert((t.id.as_str(), t.port), ()).is_some() {
            return Err(validation(format!("Target '{}' on port {} is listed twice", t.id, t.port)));
        }
    }
    Ok(targets)
}

pub async fn register(st: &AppState, arns: &Arns, params: &mut Params) -> Result<Vec<Node>> {
    change_targets(st, arns, params, true).await
}

pub async fn deregister(st: &AppState, arns: &Arns, params: &mut Params) -> Result<Vec<Node>> {
    change_targets(st, arns, params, false).await
}

async fn change_targets(st: &AppState, arns: &Arns, params: &mut Params, register: bool) -> Result<Vec<Node>> {
    let arn = params.required("TargetGroupArn")?;
    let current = group(st, arns, &arn).await?;
    let targets = targets(params, &current)?;
    params.finish()?;
    let change = if register { GroupChange::Register(&targets) } else { GroupChange::Deregister(&targets) };
    elbv2::change_target_group(&st.db, &current.id, change).await.map_err(of)?;
    tracing::info!(target_group = %current.name, register, n = targets.len(), "targets changed through the AWS face");
    Ok(Vec::new())
}

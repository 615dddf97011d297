//! CreateLoadBalancer, DescribeLoadBalancers, DeleteLoadBalancer and SetSecurityGroups: NLBs as native load
//! balancers (`store::elbv2`), with what AWS has beside (subnets, security groups, attributes) kept by the face.

use fakecloud_api::{CreateLoadBalancerRequest, Scheme};

use super::arn::{self, Arns};
use super::common::{check_name, page, validation};
use super::lookup::nlb;
use super::{attributes, tags};
use crate::aws::api::Api;
use crate::aws::ec2::network;
use crate::aws::error::{AwsError, Result};
use crate::aws::query::Params;
use crate::aws::xml::{Node, el, members, text};
use crate::config::Topology;
use crate::db::rfc3339;
use crate::http::AppState;
use crate::store::elbv2::{self, NewNlb, Nlb};

/// The security group IDs `SecurityGroups.member.N` gives, in their form (the store refuses one that does not
/// exist, and the data plane enforces their rules).
fn security_groups(params: &mut Params) -> Result<Vec<String>> {
    let groups = params.list("SecurityGroups.member")?;
    for g in &groups {
        let hex = g.strip_prefix("sg-").unwrap_or("");
        if hex.is_empty() || hex.len() > 17 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(AwsError::client("InvalidSecurityGroup", format!("Security group '{g}' does not exist")));
        }
    }
    Ok(groups)
}

/// The subnets `Subnets.member.N` or `SubnetMappings.member.N.SubnetId` name: the region's, one a zone.
fn subnets(topo: &Topology, params: &mut Params) -> Result<Vec<String>> {
    let mut ids = params.list("Subnets.member")?;
    for mut m in params.structures("SubnetMappings.member")? {
        ids.push(m.required("SubnetId")?);
        m.finish()?;
    }
    if ids.is_empty() {
        return Err(validation("At least one subnet must be specified (Subnets or SubnetMappings)"));
    }
    let mut zones = Vec::new();
    for id in &ids {
        let zone = network::zone_of(topo, id)
            .ok_or_else(|| AwsError::client("SubnetNotFound", format!("The subnet ID '{id}' was not found")))?;
        if zones.contains(&zone) {
            return Err(AwsError::client(
                "InvalidConfigurationRequest",
                format!(
                    "A load balancer cannot be attached to multiple subnets in the same Availability Zone ({zone})"
                ),
            ));
        }
        zones.push(zone);
    }
    Ok(ids)
}

pub async fn create(st: &AppState, arns: &Arns, params: &mut Params) -> Result<Vec<Node>> {
    let name = params.required("Name")?;
    check_name("Load balancer", &name)?;
    if name.starts_with("internal-") {
        return Err(validation("Load balancer names cannot start with 'internal-'"));
    }
    // AWS's default type is `application`: only an NLB is made here.
    match params.take("Type").as_deref() {
        Some("network") => {}
        other => {
            return Err(AwsError::client(
                "InvalidConfigurationRequest",
                format!(
                    "Load balancer type '{}' is not supported: fakecloud's Elastic Load Balancing v2 makes network \
                     load balancers only (Type=network)",
                    other.unwrap_or("application")
                ),
            ));
        }
    }
    let scheme = match params.take("Scheme").as_deref() {
        None | Some("internet-facing") => Scheme::InternetFacing,
        Some("internal") => Scheme::Internal,
        Some(other) => return Err(AwsError::client("InvalidScheme", format!("Scheme '{other}' is not valid"))),
    };
    let ip_address_type = match params.take("IpAddressType").as_deref() {
        None | Some("ipv4") => "ipv4".to_string(),
        Some(other) => {
            return Err(AwsError::client(
                "InvalidConfigurationRequest",
                format!("IP address type '{other}' is not supported: fakecloud's load balancers have IPv4 addresses"),
            ));
        }
    };
    let subnets = subnets(&st.cfg.topology, params)?;
    let security_groups = security_groups(params)?;
    let tags = tags::parse(params)?;
    params.finish()?;
    let nlb = NewNlb {
        arn_id: arn::new_hex(),
        ip_address_type,
        subnets,
        security_groups,
        attributes: attributes::load_balancer_defaults(),
        tags,
    };
    let req = CreateLoadBalancerRequest { name: name.clone(), scheme, ..CreateLoadBalancerRequest::default() };
    let lb = elbv2::create_load_balancer(&st.db, &st.cfg, &req, &nlb).await.map_err(|e| AwsError::of(e, Api::Elbv2))?;
    tracing::info!(load_balancer = %lb.id, name, "NLB created through the AWS face");
    let made = elbv2::load_balancers(&st.db).await.map_err(|e| AwsError::of(e, Api::Elbv2))?;
    let made = made.iter().find(|n| n.lb_id == lb.id).ok_or_else(|| AwsError::internal("the new NLB is missing"))?;
    Ok(vec![members("LoadBalancers", [shape(st, arns, made)?])])
}

/// An NLB as ELB describes it.
fn shape(st: &AppState, arns: &Arns, n: &Nlb) -> Result<Vec<Node>> {
    let topo = &st.cfg.topology;
    let of = |e| AwsError::of(e, Api::Elbv2);
    let zones = n
        .subnets()
        .map_err(of)?
        .into_iter()
        .filter_map(|s| network::zone_of(topo, &s).map(|z| vec![text("ZoneName", z), text("SubnetId", s.clone())]));
    let state = if n.state == "active" { "active" } else { "provisioning" };
    let groups = n.security_groups.iter().cloned().map(|g| text("member", g)).collect();
    Ok(vec![
        text("LoadBalancerArn", arns.load_balancer(&n.name, &n.arn_id)),
        text("DNSName", n.dns_name.clone()),
        text("CreatedTime", rfc3339(n.created_at)),
        text("LoadBalancerName", n.name.clone()),
        text("Scheme", n.scheme.clone()),
        text("VpcId", network::vpc_id(topo)),
        el("State", vec![text("Code", state)]),
        text("Type", "network"),
        members("AvailabilityZones", zones.collect::<Vec<_>>()),
        el("SecurityGroups", groups),
        text("IpAddressType", n.ip_address_type.clone()),
    ])
}

pub async fn describe(st: &AppState, arns: &Arns, params: &mut Params) -> Result<Vec<Node>> {
    let names = params.list("Names.member")?;
    let wanted_arns = params.list("LoadBalancerArns.member")?;
    if !names.is_empty() && !wanted_arns.is_empty() {
        return Err(validation("Load balancer names and load balancer ARNs cannot be specified at the same time"));
    }
    let mut all = elbv2::load_balancers(&st.db).await.map_err(|e| AwsError::of(e, Api::Elbv2))?;
    // One whose creation lags is not there yet, as the native list has it.
    let unseen = crate::faults::effects::unseen(st.faults()).await;
    all.retain(|n| !unseen.contains(&n.lb_id));
    let chosen: Vec<&Nlb> = if !names.is_empty() {
        pick(&all, &names, |n| n.name.clone())?
    } else if !wanted_arns.is_empty() {
        for arn in &wanted_arns {
            arns.load_balancer_hex(arn)?;
        }
        pick(&all, &wanted_arns, |n| arns.load_balancer(&n.name, &n.arn_id))?
    } else {
        all.iter().collect()
    };
    let (page, next) = page(chosen, params)?;
    let described = page.into_iter().map(|n| shape(st, arns, n)).collect::<Result<Vec<_>>>()?;
    let mut answer = vec![members("LoadBalancers", described)];
    answer.extend(next.map(|m| text("NextMarker", m)));
    Ok(answer)
}

/// The NLBs whose `key` is one of `wanted`, each of which must be one, as ELB answers a list of names or ARNs.
fn pick<'a>(all: &'a [Nlb], wanted: &[String], key: impl Fn(&Nlb) -> String) -> Result<Vec<&'a Nlb>> {
    wanted
        .iter()
        .map(|w| {
            all.iter().find(|n| key(n) == *w).ok_or_else(|| {
                AwsError::client("LoadBalancerNotFound", format!("One or more load balancers not found: '{w}'"))
            })
        })
        .collect()
}

pub async fn delete(st: &AppState, arns: &Arns, params: &mut Params) -> Result<Vec<Node>> {
    let arn = params.required("LoadBalancerArn")?;
    params.finish()?;
    // "If the load balancer does not exist or has already been deleted, the call succeeds" (ELB's reference).
    let n = match nlb(st, arns, &arn).await {
        Err(e) if e.code == "LoadBalancerNotFound" => return Ok(Vec::new()),
        r => r?,
    };
    elbv2::delete_load_balancer(&st.db, &st.cfg, &n.arn_id).await.map_err(|e| AwsError::of(e, Api::Elbv2))?;
    tracing::info!(load_balancer = %n.lb_id, "NLB deleted through the AWS face");
    Ok(Vec::new())
}

pub async fn set_security_groups(st: &AppState, arns: &Arns, params: &mut Params) -> Result<Vec<Node>> {
    let arn = params.required("LoadBalancerArn")?;
    let groups = security_groups(params)?;
    params.finish()?;
    let n = nlb(st, arns, &arn).await?;
    // AWS's rule: an NLB made without security groups cannot be given some later, nor can all be taken away.
    let had = n.security_groups.clone();
    if had.is_empty() != groups.is_empty() {
        return Err(AwsError::client(
            "InvalidConfigurationRequest",
            "A network load balancer created without security groups cannot be given any, and one created with \
             security groups must keep at least one",
        ));
    }
    let n = elbv2::set_load_balancer(&st.db, &n.arn_id, None, Some(&groups))
        .await
        .map_err(|e| AwsError::of(e, Api::Elbv2))?;
    let kept = n.security_groups.clone();
    Ok(vec![el("SecurityGroupIds", kept.into_iter().map(|g| text("member", g)).collect())])
}

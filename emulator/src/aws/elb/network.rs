//! Where a load balancer is placed and who may reach it: its subnets (AttachLoadBalancerToSubnets,
//! DetachLoadBalancerFromSubnets) and security groups (ApplySecurityGroupsToLoadBalancer), kept in classic
//! ELB's record and answered.
//!
//! Subnets change nothing in the data plane: a load balancer's address comes from its scheme's pool, whatever
//! its subnets, and it sends to its instances in every zone. The security groups are kept (the record's
//! `security_groups` column) for the security groups' own link to load balancers, which the data plane is to
//! enforce; until then they are answered and allow every client.

use super::common::{change, invalid_configuration, members_of, missing, name, validation};
use crate::aws::ec2::{subnet_id, zone_of};
use crate::aws::error::{AwsError, Result};
use crate::aws::query::Params;
use crate::aws::xml::Node;
use crate::config::Topology;
use crate::http::AppState;

/// The most security groups classic ELB takes on one load balancer (its quotas: 5).
const GROUPS_MAX: usize = 5;

/// The zones of `subnets`, in their order.
pub(super) fn zones_of(topo: &Topology, subnets: &[String]) -> Vec<String> {
    subnets.iter().filter_map(|s| zone_of(topo, s)).map(str::to_string).collect()
}

/// Subnets that exist, at most one a zone (AWS's rule), in order.
fn check_subnets(topo: &Topology, subnets: &[String]) -> Result<()> {
    let mut zones = Vec::new();
    for s in subnets {
        let zone = zone_of(topo, s)
            .ok_or_else(|| AwsError::client("SubnetNotFound", format!("The subnet ID '{s}' does not exist")))?;
        if zones.contains(&zone) {
            return Err(invalid_configuration(format!(
                "LoadBalancer attached to multiple subnets in AZ {zone}: one subnet a zone"
            )));
        }
        zones.push(zone);
    }
    Ok(())
}

/// A new load balancer's subnets: those given, or the given zones' (one subnet a zone here), one or the other.
pub(super) fn placed(topo: &Topology, zones: &[String], subnets: &[String]) -> Result<Vec<String>> {
    match (zones.is_empty(), subnets.is_empty()) {
        (true, true) => Err(validation("Either AvailabilityZones or Subnets must be specified")),
        (false, false) => Err(validation("Only one of Subnets or AvailabilityZones may be specified")),
        (true, false) => {
            check_subnets(topo, subnets)?;
            Ok(subnets.to_vec())
        }
        (false, true) => {
            let mut placed: Vec<String> = Vec::new();
            for z in zones {
                if topo.zone_pool(z).is_none() {
                    return Err(validation(format!("Invalid Availability Zone: {z}")));
                }
                let s = subnet_id(topo, z);
                if !placed.contains(&s) {
                    placed.push(s);
                }
            }
            Ok(placed)
        }
    }
}

/// Security group IDs as EC2 shapes them (`sg-` and 8 or 17 hex digits), each once; at most [`GROUPS_MAX`].
pub(super) fn groups(given: Vec<String>) -> Result<Vec<String>> {
    if given.len() > GROUPS_MAX {
        return Err(validation(format!("A load balancer has at most {GROUPS_MAX} security groups")));
    }
    let mut out: Vec<String> = Vec::new();
    for g in given {
        let hex = g.strip_prefix("sg-").unwrap_or("");
        if !matches!(hex.len(), 8 | 17) || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            let shown: String = g.chars().take(64).collect();
            return Err(AwsError::client("InvalidSecurityGroup", format!("Invalid security group ID '{shown}'")));
        }
        if !out.contains(&g) {
            out.push(g);
        }
    }
    Ok(out)
}

fn subnets_answer(subnets: &[String]) -> Vec<Node> {
    vec![members_of("Subnets", subnets)]
}

fn requested_subnets(params: &mut Params) -> Result<Vec<String>> {
    let subnets = params.members("Subnets")?;
    if subnets.is_empty() {
        return Err(missing("Subnets.member.1"));
    }
    Ok(subnets)
}

/// Subnets it has already stay; the answer is every subnet it has after the call.
pub async fn attach_subnets(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let topo = &st.cfg.topology;
    let name = name(params)?;
    let subnets = requested_subnets(params)?;
    params.finish()?;
    let listed = change(st, &name, |_, classic| {
        let mut all = classic.subnets.clone();
        all.extend(subnets.into_iter().filter(|s| !classic.subnets.contains(s)));
        check_subnets(topo, &all)?;
        classic.subnets = all;
        Ok(None)
    })
    .await?;
    Ok(subnets_answer(&listed.classic.subnets))
}

/// Subnets it does not have are passed over, as AWS does.
pub async fn detach_subnets(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let name = name(params)?;
    let subnets = requested_subnets(params)?;
    params.finish()?;
    let listed = change(st, &name, |_, classic| {
        classic.subnets.retain(|s| !subnets.contains(s));
        Ok(None)
    })
    .await?;
    Ok(subnets_answer(&listed.classic.subnets))
}

/// The groups given replace the load balancer's, as AWS's call does.
pub async fn apply_security_groups(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let name = name(params)?;
    let given = groups(params.members("SecurityGroups")?)?;
    if given.is_empty() {
        return Err(missing("SecurityGroups.member.1"));
    }
    params.finish()?;
    let listed = change(st, &name, |_, classic| {
        classic.security_groups = given;
        Ok(None)
    })
    .await?;
    Ok(vec![members_of("SecurityGroups", &listed.classic.security_groups)])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn subnets_are_the_zones_one_a_zone_and_groups_are_ec2_shaped() {
        let topo = Topology::default();
        let zones: Vec<String> = topo.zones.iter().map(|(z, _)| z.clone()).collect();
        let subnets: Vec<String> = zones.iter().map(|z| subnet_id(&topo, z)).collect();
        assert_eq!(placed(&topo, &zones[..1], &[]).unwrap(), subnets[..1]);
        assert_eq!(placed(&topo, &[], &subnets).unwrap(), subnets);
        assert_eq!(zones_of(&topo, &subnets), zones);
        let code = |r: Result<Vec<String>>| r.unwrap_err().code.to_string();
        assert_eq!(code(placed(&topo, &[], &[])), "ValidationError");
        assert_eq!(code(placed(&topo, &zones, &subnets)), "ValidationError");
        assert_eq!(code(placed(&topo, &["nowhere-1z".into()], &[])), "ValidationError");
        assert_eq!(code(placed(&topo, &[], &["subnet-0123456789abcdef0".into()])), "SubnetNotFound");
        assert_eq!(code(placed(&topo, &[], &[subnets[0].clone(), subnets[0].clone()])), "InvalidConfigurationRequest");
        assert_eq!(groups(vec!["sg-0123456789abcdef0".into(), "sg-12345678".into()]).unwrap().len(), 2);
        for bad in ["sg-1", "sg-0123456789ABCDEF0", "group", "sg-0123456789abcdefg"] {
            assert_eq!(code(groups(vec![bad.into()])), "InvalidSecurityGroup", "{bad}");
        }
        assert_eq!(code(groups((0..6).map(|i| format!("sg-1234567{i}")).collect())), "ValidationError");
    }
}

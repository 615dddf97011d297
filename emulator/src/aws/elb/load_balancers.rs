//! CreateLoadBalancer, DescribeLoadBalancers and DeleteLoadBalancer, and a load balancer as classic ELB
//! describes it (`LoadBalancerDescription`, botocore's `elb/2012-06-01` model).

use fakecloud_api::{CreateLoadBalancerRequest, Forwarding, HealthCheck, HealthCheckProtocol, Scheme, SessionAffinity};
use sha2::{Digest, Sha256};

use super::common::{elb, members_of, name, validation};
use super::{health, listeners, network, tags};
use crate::aws::credentials::Keys;
use crate::aws::error::{AwsError, Result};
use crate::aws::query::Params;
use crate::aws::xml::{Node, el, members, text};
use crate::config::Topology;
use crate::http::AppState;
use crate::store::classic_elb::{self, Classic, Extras, HealthMeta, Listed};
use crate::store::load_balancers;

/// The longest name classic ELB takes (its CreateLoadBalancer reference: "a maximum of 32 characters").
const NAME_MAX: usize = 32;
/// The most load balancers one DescribeLoadBalancers answers (its `PageSize`, 1 to 400).
const PAGE_MAX: u32 = 400;

/// A name as classic ELB takes it: 1 to 32 letters, digits or hyphens, not starting or ending with a hyphen.
fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= NAME_MAX
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        return Ok(());
    }
    let shown: String = name.chars().take(64).collect();
    Err(validation(format!(
        "LoadBalancerName '{shown}' is not valid: it must be 1 to {NAME_MAX} letters, digits or hyphens, and must not \
         begin or end with a hyphen"
    )))
}

fn scheme(given: Option<String>) -> Result<Scheme> {
    match given.as_deref() {
        None | Some("internet-facing") => Ok(Scheme::InternetFacing),
        Some("internal") => Ok(Scheme::Internal),
        Some(other) => Err(AwsError::client(
            "InvalidScheme",
            format!("Invalid scheme '{other}': it must be 'internet-facing' or 'internal'"),
        )),
    }
}

pub async fn create(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let topo = &st.cfg.topology;
    let name = name(params)?;
    check_name(&name)?;
    let (native, metas) = listeners::parse_all(params.member_structures("Listeners")?)?;
    if native.is_empty() {
        return Err(validation("A load balancer needs at least one listener (Listeners.member.1)"));
    }
    let zones = params.members("AvailabilityZones")?;
    let subnets = params.members("Subnets")?;
    let subnets = network::placed(topo, &zones, &subnets)?;
    let security_groups = network::groups(params.members("SecurityGroups")?)?;
    let scheme = scheme(params.take("Scheme"))?;
    let tags = tags::parse(params.member_structures("Tags")?)?;
    params.finish()?;
    // AWS checks a new load balancer as its default health check does (the ELB guide's "Health checks for your
    // Classic Load Balancer"): TCP on the first listener's instance port, every 30 seconds.
    let first_port = native.first().map_or(80, |l| l.backend_port);
    let req = CreateLoadBalancerRequest {
        name,
        scheme,
        listeners: native,
        backends: Vec::new(),
        health_check: Some(HealthCheck {
            protocol: HealthCheckProtocol::Tcp,
            port: first_port,
            path: None,
            interval_seconds: health::DEFAULT_INTERVAL,
        }),
        // Who may connect is the security groups' to say.
        source_ranges: Vec::new(),
        session_affinity: SessionAffinity::None,
        // Classic ELB is a proxy: the instance sees the load balancer as the client.
        forwarding: Forwarding::Proxy,
        requested_ip: None,
    };
    let classic = Classic {
        subnets,
        security_groups,
        extras: Extras {
            listeners: metas,
            health_check: Some(HealthMeta {
                target: format!("TCP:{first_port}"),
                timeout: health::DEFAULT_TIMEOUT,
                healthy_threshold: health::DEFAULT_HEALTHY,
                unhealthy_threshold: health::DEFAULT_UNHEALTHY,
            }),
            ..Extras::default()
        },
    };
    let lb = classic_elb::create(&st.db, &st.cfg, &req, &classic, &tags).await.map_err(elb)?;
    tracing::info!(id = %lb.id, name = %lb.name, "classic ELB load balancer created");
    Ok(lb.dns_name.map(|d| text("DNSName", d)).into_iter().collect())
}

/// Deleting a load balancer that is not there succeeds, as AWS's does (the CCM's delete is retried until it is).
pub async fn delete(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let name = name(params)?;
    params.finish()?;
    let listed = classic_elb::list(&st.db, std::slice::from_ref(&name), 0, 1).await.map_err(elb)?;
    if let Some(found) = listed.first() {
        load_balancers::delete(&st.db, &st.cfg, &found.lb.id).await.map_err(elb)?;
    }
    Ok(Vec::new())
}

pub async fn describe(st: &AppState, keys: &Keys, params: &mut Params) -> Result<Vec<Node>> {
    let names = params.members("LoadBalancerNames")?;
    let marker = params.take("Marker");
    let page_size = params.int("PageSize", 1, PAGE_MAX)?.unwrap_or(PAGE_MAX);
    params.finish()?;
    // The marker is the last listed load balancer's place (`seq`): its own, an opaque string to the caller.
    let after: i64 = match marker.as_deref() {
        None => 0,
        Some(m) => m.parse().map_err(|_| validation(format!("Invalid Marker '{m}'")))?,
    };
    // One whose creation lags is not there yet, as the native list has it.
    let unseen = crate::faults::effects::unseen(st.faults()).await;
    let mut listed = if names.is_empty() {
        let mut all = classic_elb::list(&st.db, &[], after, i64::from(page_size) + 1).await.map_err(elb)?;
        all.retain(|l| !unseen.contains(&l.lb.id));
        all
    } else {
        let mut found = classic_elb::list(&st.db, &names, after, names.len() as i64).await.map_err(elb)?;
        found.retain(|l| !unseen.contains(&l.lb.id));
        // Every name must be there, as AWS answers: the CCM looks for this code to tell "none yet".
        if let Some(missing) = names.iter().find(|n| !found.iter().any(|l| &l.lb.name == *n)) {
            return Err(elb(classic_elb::not_found(missing)));
        }
        found
    };
    let more = listed.len() > page_size as usize;
    listed.truncate(page_size as usize);
    let next = more.then(|| listed.last().map(|l| l.seq.to_string())).flatten();
    let topo = &st.cfg.topology;
    let mut answer = vec![members("LoadBalancerDescriptions", listed.iter().map(|l| description(topo, keys, l)))];
    answer.extend(next.map(|m| text("NextMarker", m)));
    Ok(answer)
}

/// The ID of the hosted zone the region's load balancers' names would be in: AWS gives each region's its own
/// (`Z35SXDOTRQ7X7K` for us-east-1); here one derived from the region, the same at every start.
fn hosted_zone_id(topo: &Topology) -> String {
    let hash = Sha256::new().chain_update(b"fakecloud elb hosted zone\0").chain_update(topo.region.as_bytes());
    let digits = data_encoding::BASE32_NOPAD.encode(&hash.finalize());
    format!("Z{}", &digits[..13])
}

/// A load balancer as DescribeLoadBalancers answers it.
fn description(topo: &Topology, keys: &Keys, listed: &Listed) -> Vec<Node> {
    let (lb, classic) = (&listed.lb, &listed.classic);
    let mut d = vec![text("LoadBalancerName", lb.name.clone())];
    if let Some(dns) = &lb.dns_name {
        d.push(text("DNSName", dns.clone()));
        // AWS gives an internal load balancer no canonical name of its own.
        if lb.scheme == Scheme::InternetFacing {
            d.push(text("CanonicalHostedZoneName", dns.clone()));
        }
    }
    d.push(text("CanonicalHostedZoneNameID", hosted_zone_id(topo)));
    d.push(members("ListenerDescriptions", listeners::described(lb, &classic.extras)));
    d.push(el(
        "Policies",
        vec![
            el("AppCookieStickinessPolicies", Vec::new()),
            el("LBCookieStickinessPolicies", Vec::new()),
            members_of("OtherPolicies", &classic.extras.policies.iter().map(|p| p.name.clone()).collect::<Vec<_>>()),
        ],
    ));
    d.push(members(
        "BackendServerDescriptions",
        classic
            .extras
            .backend_policies
            .iter()
            .map(|(port, names)| vec![text("InstancePort", port.to_string()), members_of("PolicyNames", names)]),
    ));
    d.push(members_of("AvailabilityZones", &network::zones_of(topo, &classic.subnets)));
    d.push(members_of("Subnets", &classic.subnets));
    d.push(text("VPCId", crate::aws::ec2::vpc_id(topo)));
    d.push(members("Instances", lb.backends.iter().map(|i| vec![text("InstanceId", i.clone())])));
    d.push(el("HealthCheck", health::described(lb, &classic.extras)));
    // The group ELB's own traffic comes from; with no names for groups yet, its first group's ID.
    let group = classic.security_groups.first().cloned().unwrap_or_else(|| "default".into());
    d.push(el("SourceSecurityGroup", vec![text("OwnerAlias", keys.account_id.clone()), text("GroupName", group)]));
    d.push(members_of("SecurityGroups", &classic.security_groups));
    d.push(text("CreatedTime", lb.created_at.clone()));
    d.push(text("Scheme", lb.scheme.as_str()));
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_classic_elbs_rules() {
        for ok in ["a", "web-1", &"a".repeat(32), "A1-b2"] {
            check_name(ok).unwrap_or_else(|e| panic!("{ok}: {e:?}"));
        }
        for bad in ["", "-a", "a-", &"a".repeat(33), "a_b", "a.b", "ä"] {
            assert_eq!(check_name(bad).map_err(|e| e.code.to_string()), Err("ValidationError".into()), "{bad}");
        }
    }

    #[test]
    fn a_hosted_zone_id_is_the_regions_own_and_looks_like_aws() {
        let topo = Topology::default();
        let id = hosted_zone_id(&topo);
        assert_eq!((id.len(), id.starts_with('Z')), (14, true), "{id}");
        assert!(id.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit()), "{id}");
        assert_eq!(id, hosted_zone_id(&topo));
    }
}

//! DescribeInstances: the cloud's instances as EC2's, one reservation each, filtered and paged as EC2 does.

use std::net::IpAddr;

use fakecloud_api::{Instance, InstanceState, Market};

use super::security_groups::Membership;
use super::{filter, network};
use crate::aws::credentials::Keys;
use crate::aws::error::{AwsError, Result};
use crate::aws::query::{Filter, Params};
use crate::aws::xml::{Node, el, items, text};
use crate::config::Topology;
use crate::http::AppState;
use crate::store;
use crate::store::instances::Among;

/// The longest instance ID looked at: far past EC2's (`i-` and 17 hex digits).
const ID_MAX_BYTES: usize = 64;

pub async fn describe(st: &AppState, keys: &Keys, params: &mut Params) -> Result<Vec<Node>> {
    let ids = params.list("InstanceId")?;
    let filters = params.filters()?;
    let max_results = params.int("MaxResults", 5, 1000)?;
    let token = params.take("NextToken");
    if max_results.is_some() && !ids.is_empty() {
        return Err(AwsError::client(
            "InvalidParameterCombination",
            "The parameter instancesSet cannot be used with the parameter maxResults",
        ));
    }
    check_ids(&ids)?;
    filter::check(&filters, |n| {
        matches!(
            n,
            "instance-id"
                | "private-dns-name"
                | "private-ip-address"
                | "instance-state-name"
                | "instance-state-code"
                | "availability-zone"
                | "instance-type"
                | "instance-lifecycle"
                | "vpc-id"
                | "subnet-id"
        ) || filter::is_tag(n)
    })?;
    // The token is the position of the last instance of the page before.
    let after: i64 = Params::next_token(token.as_deref())?;
    let among = among(&ids, &filters, &st.cfg.topology.region);
    let vpc = network::vpc_id(&st.cfg.topology);
    let (mut all, groups) = store::instances::all_with_groups(&st.db, &st.cfg, &among, &vpc).await?;
    // As the native list shows them: a dark zone's stopped, a lagging write not seen yet.
    crate::faults::effects::as_read(st.faults(), &mut all).await;
    let missing: Vec<&str> =
        ids.iter().filter(|id| !all.iter().any(|(_, i)| &i.id == *id)).map(String::as_str).collect();
    match missing.as_slice() {
        [] => {}
        [one] => {
            return Err(AwsError::client(
                "InvalidInstanceID.NotFound",
                format!("The instance ID '{one}' does not exist"),
            ));
        }
        many => {
            return Err(AwsError::client(
                "InvalidInstanceID.NotFound",
                format!("The instance IDs '{}' do not exist", many.join(", ")),
            ));
        }
    }
    let topo = &st.cfg.topology;
    let mut chosen = all.into_iter().filter(|(seq, i)| {
        *seq > after && (ids.is_empty() || ids.contains(&i.id)) && filters.iter().all(|f| passes(f, i, topo))
    });
    let page: Vec<(i64, Instance)> = match max_results {
        Some(n) => chosen.by_ref().take(n as usize).collect(),
        None => chosen.by_ref().collect(),
    };
    let next = match (page.last(), chosen.next()) {
        (Some((seq, _)), Some(_)) => Some(seq.to_string()),
        _ => None,
    };
    let membership = Membership::of(groups);
    let reservations: Vec<Vec<Node>> = page.iter().map(|(_, i)| reservation(i, &membership, keys, topo)).collect();
    let mut answer = vec![items("reservationSet", reservations)];
    if let Some(next) = next {
        answer.push(text("nextToken", next));
    }
    Ok(answer)
}

/// DescribeInstanceTopology: where instances sit in AWS's network (its blocks and spines). AWS answers it only
/// for some accelerated instance types and lists none of another type; the cloud's types are none of those, so
/// the answer is an empty `instanceSet`, and cloud-provider-aws, which asks when it initializes a Node, marks the
/// type as having no topology, as on AWS.
pub fn describe_topology(params: &mut Params) -> Result<Vec<Node>> {
    let ids = params.list("InstanceId")?;
    check_ids(&ids)?;
    params.list("GroupName")?;
    let filters = params.filters()?;
    filter::check(&filters, |n| matches!(n, "availability-zone" | "instance-type" | "zone-id"))?;
    params.int("MaxResults", 1, 100)?;
    if params.take("NextToken").is_some() {
        return Err(AwsError::client("InvalidPaginationToken", "The pagination token is invalid or has expired"));
    }
    Ok(vec![items("instanceSet", [])])
}

/// Instance IDs as EC2 takes them (`i-…`), else `InvalidInstanceID.Malformed`.
pub fn check_ids(ids: &[String]) -> Result<()> {
    match ids.iter().find(|id| !id.starts_with("i-") || id.len() > ID_MAX_BYTES) {
        Some(bad) => {
            let shown: String = bad.chars().take(ID_MAX_BYTES).collect();
            Err(AwsError::client("InvalidInstanceID.Malformed", format!("Invalid id: \"{shown}\"")))
        }
        None => Ok(()),
    }
}

/// `i` passes filter `f` (whose name is checked: [`filter::check`]).
fn passes(f: &Filter, i: &Instance, topo: &Topology) -> bool {
    let one = |v: &str| filter::any(&f.values, v);
    match f.name.as_str() {
        "instance-id" => one(&i.id),
        "private-dns-name" => one(&private_dns_name(i)),
        "private-ip-address" => one(&i.private_ip.to_string()),
        "instance-state-name" => one(state_name(i.state)),
        "instance-state-code" => one(&state_code(i.state).to_string()),
        "availability-zone" => one(&i.zone),
        "instance-type" => one(&i.instance_type),
        "instance-lifecycle" => i.market == Market::Spot && one("spot"),
        "vpc-id" => one(&network::vpc_id(topo)),
        "subnet-id" => one(&network::subnet_id(topo, &i.zone)),
        _ => filter::tags_pass(f, &i.tags),
    }
}

/// EC2's state name: fakecloud's states are EC2's.
pub fn state_name(s: InstanceState) -> &'static str {
    s.as_str()
}

/// EC2's state code (the low byte of EC2's 16-bit code).
pub fn state_code(s: InstanceState) -> u8 {
    match s {
        InstanceState::Pending => 0,
        InstanceState::Running => 16,
        InstanceState::ShuttingDown => 32,
        InstanceState::Terminated => 48,
        InstanceState::Stopping => 64,
        InstanceState::Stopped => 80,
    }
}

fn private_dns_name(i: &Instance) -> String {
    fakecloud_api::net::private_dns_name(&i.id, i.private_ip, &i.region)
}

/// The instances a call can only be about, so that naming one of thousands reads one (cloud-provider-aws finds a
/// Node's instance by its private DNS name on each sync): those `InstanceId.N` names, else those a filter names
/// without a wildcard by ID, private address or IP-based private DNS name. The filters are still applied after.
fn among(ids: &[String], filters: &[Filter], region: &str) -> Among {
    if !ids.is_empty() {
        return Among::Ids(ids.to_vec());
    }
    let exact = |f: &&Filter| !f.values.iter().any(|v| v.contains(['*', '?']));
    for f in filters.iter().filter(exact) {
        match f.name.as_str() {
            "instance-id" => return Among::Ids(f.values.clone()),
            "private-ip-address" => return Among::PrivateIps(f.values.clone()),
            "private-dns-name" => {
                let ips: Option<Vec<String>> = f
                    .values
                    .iter()
                    .map(|v| crate::dns::instance_name_address(v, region).map(|ip| ip.to_string()))
                    .collect();
                // A name of another form (an IPv6 instance's) is matched by reading them all.
                if let Some(ips) = ips {
                    return Among::PrivateIps(ips);
                }
            }
            _ => {}
        }
    }
    Among::All
}

/// One reservation holding `i`, as EC2 answers an instance launched alone.
fn reservation(i: &Instance, membership: &Membership, keys: &Keys, topo: &Topology) -> Vec<Node> {
    reservation_of(std::slice::from_ref(i), membership, keys, topo)
}

/// The reservation of `launched` (at least one), named after the first: the cloud keeps no reservations, so
/// DescribeInstances shows each instance in one of its own.
pub fn reservation_of(launched: &[Instance], membership: &Membership, keys: &Keys, topo: &Topology) -> Vec<Node> {
    let first = launched.first().map_or("", |i| i.id.strip_prefix("i-").unwrap_or(&i.id));
    vec![
        text("reservationId", format!("r-{first}")),
        text("ownerId", keys.account_id.clone()),
        items("groupSet", []),
        items("instancesSet", launched.iter().map(|i| instance(i, membership, keys, topo))),
    ]
}

fn instance(i: &Instance, membership: &Membership, keys: &Keys, topo: &Topology) -> Vec<Node> {
    let mut fields = vec![
        text("instanceId", i.id.clone()),
        el("instanceState", vec![text("code", state_code(i.state).to_string()), text("name", state_name(i.state))]),
        text("privateDnsName", private_dns_name(i)),
        text("dnsName", ""),
        text("amiLaunchIndex", "0"),
        text("instanceType", i.instance_type.clone()),
        text("launchTime", i.created_at.clone()),
        el(
            "placement",
            vec![text("availabilityZone", i.zone.clone()), text("groupName", ""), text("tenancy", "default")],
        ),
        el("monitoring", vec![text("state", "disabled")]),
        text("subnetId", network::subnet_id(topo, &i.zone)),
        text("vpcId", network::vpc_id(topo)),
        membership.group_set(&i.id),
    ];
    if let IpAddr::V4(v4) = i.private_ip {
        fields.push(text("privateIpAddress", v4.to_string()));
    }
    if let Some(v6) = i.ipv6_address.map(IpAddr::V6).or(i.private_ip.is_ipv6().then_some(i.private_ip)) {
        fields.push(text("ipv6Address", v6.to_string()));
    }
    fields.push(items("networkInterfaceSet", network_interface(i, membership, keys, topo)));
    if i.market == Market::Spot {
        fields.push(text("instanceLifecycle", "spot"));
    }
    if let Some(reason) = &i.state_reason {
        fields.push(el("stateReason", vec![text("code", reason.clone()), text("message", reason.clone())]));
    }
    fields.push(filter::tag_set(&i.tags));
    fields
}

/// The instance's one network interface, its primary (device 0), in use until it is terminated, as EC2 answers
/// it: cloud-provider-aws reads a Node's internal addresses from the interfaces in use
/// (`extractIPv4NodeAddresses`), not from `privateIpAddress`.
fn network_interface(i: &Instance, membership: &Membership, keys: &Keys, topo: &Topology) -> Option<Vec<Node>> {
    if matches!(i.state, InstanceState::Terminated) {
        return None;
    }
    let eni = network::id("eni", &[&topo.region, &i.id]);
    // A locally administered unicast MAC (02:…), from the interface ID's hex digits.
    let hex = &eni["eni-".len()..];
    let mac: Vec<&str> = std::iter::once("02").chain((0..5).map(|b| &hex[2 * b..2 * b + 2])).collect();
    let dns = private_dns_name(i);
    let (v4, v6) = match i.private_ip {
        IpAddr::V4(v4) => (Some(v4), i.ipv6_address),
        IpAddr::V6(v6) => (None, Some(v6)),
    };
    let mut fields = vec![
        text("networkInterfaceId", eni.clone()),
        text("subnetId", network::subnet_id(topo, &i.zone)),
        text("vpcId", network::vpc_id(topo)),
        text("ownerId", keys.account_id.clone()),
        // An instance's primary interface has an empty description on AWS.
        text("description", ""),
        text("status", "in-use"),
        text("macAddress", mac.join(":")),
        text("privateDnsName", dns.clone()),
        membership.group_set(&i.id),
        el(
            "attachment",
            vec![
                text("attachmentId", network::id("eni-attach", &[&topo.region, &i.id])),
                text("deviceIndex", "0"),
                text("networkCardIndex", "0"),
                text("status", "attached"),
                text("attachTime", i.created_at.clone()),
                text("deleteOnTermination", "true"),
            ],
        ),
        items(
            "privateIpAddressesSet",
            v4.map(|a| {
                vec![
                    text("privateIpAddress", a.to_string()),
                    text("privateDnsName", dns.clone()),
                    text("primary", "true"),
                ]
            }),
        ),
        items("ipv6AddressesSet", v6.map(|a| vec![text("ipv6Address", a.to_string())])),
        text("interfaceType", "interface"),
    ];
    if let Some(v4) = v4 {
        fields.push(text("privateIpAddress", v4.to_string()));
    }
    Some(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(name: &str, values: &[&str]) -> Filter {
        Filter { name: name.into(), values: values.iter().map(|v| v.to_string()).collect() }
    }

    #[test]
    fn a_call_naming_instances_reads_only_those() {
        let ids = vec!["i-1".to_string()];
        assert_eq!(among(&ids, &[filter("private-ip-address", &["10.0.1.5"])], "r"), Among::Ids(ids.clone()));
        let dns = filter("private-dns-name", &["ip-10-0-1-5.r.compute.internal", "ip-10-0-2-6.r.compute.internal"]);
        let state = filter("instance-state-name", &["running"]);
        assert_eq!(
            among(&[], &[state.clone(), dns], "r"),
            Among::PrivateIps(vec!["10.0.1.5".into(), "10.0.2.6".into()])
        );
        assert_eq!(
            among(&[], &[filter("instance-id", &["i-1", "i-2"])], "r"),
            Among::Ids(vec!["i-1".into(), "i-2".into()])
        );
        // A wildcard, another region's name or an IPv6 instance's name could match what no exact key finds.
        for unsure in [
            filter("instance-id", &["i-*"]),
            filter("private-dns-name", &["ip-10-0-1-5.*"]),
            filter("private-dns-name", &["i-1.r.compute.internal"]),
        ] {
            assert_eq!(among(&[], &[state.clone(), unsure], "r"), Among::All);
        }
    }
}

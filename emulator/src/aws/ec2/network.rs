//! The cloud's one VPC and its zones' subnets (the topology's, `config::Topology`) as EC2's: DescribeVpcs and
//! DescribeSubnets, and the IDs the instances name. The IDs are derived from the topology, so they are the same
//! on every start of the same cloud.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use super::{filter, zones};
use crate::aws::credentials::Keys;
use crate::aws::error::{AwsError, Result};
use crate::aws::query::Params;
use crate::aws::xml::{Node, el, items, text};
use crate::config::{Config, Topology};

/// `vpc-` and 17 hex digits, as EC2's.
pub fn vpc_id(topo: &Topology) -> String {
    id("vpc", &[&topo.region, &topo.vpc.to_string()])
}

/// The subnet of `zone`.
pub fn subnet_id(topo: &Topology, zone: &str) -> String {
    id("subnet", &[&topo.region, zone])
}

/// The zone whose subnet is `id`.
pub fn zone_of<'t>(topo: &'t Topology, id: &str) -> Option<&'t str> {
    topo.zones.iter().map(|(z, _)| z.as_str()).find(|z| subnet_id(topo, z) == id)
}

/// The zone whose subnet is `id`, or EC2's refusal of a subnet that does not exist.
pub fn zone_of_subnet<'t>(topo: &'t Topology, id: &str) -> Result<&'t str> {
    zone_of(topo, id)
        .ok_or_else(|| AwsError::client("InvalidSubnetID.NotFound", format!("The subnet ID '{id}' does not exist")))
}

/// `id` if it is the cloud's VPC, else EC2's refusal.
pub fn check_vpc(topo: &Topology, id: &str) -> Result<()> {
    if id == vpc_id(topo) {
        return Ok(());
    }
    Err(AwsError::client("InvalidVpcID.NotFound", format!("The vpc ID '{id}' does not exist")))
}

/// `prefix-` and 17 hex digits derived from `parts`, as EC2's IDs look: the same for the same parts.
pub fn id(prefix: &str, parts: &[&str]) -> String {
    let mut hash = Sha256::new().chain_update(b"fakecloud ec2 id\0").chain_update(prefix.as_bytes());
    for p in parts {
        hash = hash.chain_update(b"\0").chain_update(p.as_bytes());
    }
    format!("{prefix}-{}", &data_encoding::HEXLOWER.encode(&hash.finalize())[..17])
}

/// `NextToken` on an operation whose answers are one page: no token was handed out, so none is valid.
fn one_page(params: &mut Params) -> Result<()> {
    params.int("MaxResults", 5, 1000)?;
    match params.take("NextToken") {
        Some(_) => Err(AwsError::client("InvalidPaginationToken", "The pagination token is invalid or has expired")),
        None => Ok(()),
    }
}

/// IDs a request names that do not exist: EC2's `…NotFound` for them.
fn check_ids(named: &[String], exist: &[String], code: &'static str, what: &str) -> Result<()> {
    let missing: Vec<&str> = named.iter().filter(|n| !exist.contains(n)).map(String::as_str).collect();
    match missing.as_slice() {
        [] => Ok(()),
        [one] => Err(AwsError::client(code, format!("The {what} ID '{one}' does not exist"))),
        many => Err(AwsError::client(code, format!("The {what} IDs '{}' do not exist", many.join(", ")))),
    }
}

/// Tags by resource ID (`store::tags::others`).
pub type Tags = BTreeMap<String, BTreeMap<String, String>>;

pub fn describe_vpcs(cfg: &Config, keys: &Keys, tagged: &Tags, params: &mut Params) -> Result<Vec<Node>> {
    let topo = &cfg.topology;
    let ids = params.list("VpcId")?;
    let filters = params.filters()?;
    one_page(params)?;
    filter::check(&filters, |n| {
        matches!(n, "vpc-id" | "cidr" | "cidr-block-association.cidr-block" | "state" | "is-default" | "owner-id")
            || filter::is_tag(n)
    })?;
    let id = vpc_id(topo);
    let no_tags = BTreeMap::new();
    let vpc_tags = tagged.get(&id).unwrap_or(&no_tags);
    check_ids(&ids, std::slice::from_ref(&id), "InvalidVpcID.NotFound", "vpc")?;
    let cidr = topo.vpc.to_string();
    let passes = filters.iter().all(|f| {
        let value = match f.name.as_str() {
            n if filter::is_tag(n) => return filter::tags_pass(f, vpc_tags),
            "vpc-id" => id.as_str(),
            "state" => "available",
            "is-default" => "false",
            "owner-id" => keys.account_id.as_str(),
            _ => cidr.as_str(),
        };
        filter::any(&f.values, value)
    });
    let vpc = vec![
        text("vpcId", id.clone()),
        text("ownerId", keys.account_id.clone()),
        text("state", "available"),
        text("cidrBlock", cidr.clone()),
        items(
            "cidrBlockAssociationSet",
            [vec![
                text("cidrBlock", cidr.clone()),
                text("associationId", format!("vpc-cidr-assoc-{}", &id["vpc-".len()..])),
                el("cidrBlockState", vec![text("state", "associated")]),
            ]],
        ),
        text("instanceTenancy", "default"),
        text("isDefault", "false"),
        filter::tag_set(vpc_tags),
    ];
    Ok(vec![items("vpcSet", passes.then_some(vpc))])
}

pub fn describe_subnets(cfg: &Config, keys: &Keys, tagged: &Tags, params: &mut Params) -> Result<Vec<Node>> {
    let topo = &cfg.topology;
    let ids = params.list("SubnetId")?;
    let filters = params.filters()?;
    one_page(params)?;
    filter::check(&filters, |n| {
        matches!(
            n,
            "subnet-id"
                | "vpc-id"
                | "availability-zone"
                | "availability-zone-id"
                | "cidr-block"
                | "cidr"
                | "state"
                | "owner-id"
                | "default-for-az"
        ) || filter::is_tag(n)
    })?;
    let no_tags = BTreeMap::new();
    let vpc = vpc_id(topo);
    let all: Vec<String> = topo.zones.iter().map(|(z, _)| subnet_id(topo, z)).collect();
    check_ids(&ids, &all, "InvalidSubnetID.NotFound", "subnet")?;
    let subnets = topo.zones.iter().enumerate().filter_map(|(i, (zone, pool))| {
        let id = subnet_id(topo, zone);
        let zone_id = zones::zone_id(&topo.region, i);
        let cidr = pool.net.to_string();
        let named = ids.is_empty() || ids.contains(&id);
        let subnet_tags = tagged.get(&id).unwrap_or(&no_tags);
        let passes = filters.iter().all(|f| {
            let value = match f.name.as_str() {
                n if filter::is_tag(n) => return filter::tags_pass(f, subnet_tags),
                "subnet-id" => id.as_str(),
                "vpc-id" => vpc.as_str(),
                "availability-zone" => zone.as_str(),
                "availability-zone-id" => zone_id.as_str(),
                "state" => "available",
                "owner-id" => keys.account_id.as_str(),
                "default-for-az" => "false",
                _ => cidr.as_str(),
            };
            filter::any(&f.values, value)
        });
        (named && passes).then(|| {
            vec![
                text("subnetId", id.clone()),
                text("subnetArn", format!("arn:aws:ec2:{}:{}:subnet/{id}", topo.region, keys.account_id)),
                text("state", "available"),
                text("ownerId", keys.account_id.clone()),
                text("vpcId", vpc.clone()),
                text("cidrBlock", cidr.clone()),
                text("availabilityZone", zone.clone()),
                text("availabilityZoneId", zone_id.clone()),
                text("defaultForAz", "false"),
                text("mapPublicIpOnLaunch", "false"),
                filter::tag_set(subnet_tags),
            ]
        })
    });
    Ok(vec![items("subnetSet", subnets.collect::<Vec<_>>())])
}

//! Security groups: DescribeSecurityGroups, CreateSecurityGroup, DeleteSecurityGroup,
//! AuthorizeSecurityGroupIngress and RevokeSecurityGroupIngress on the store's groups (`store::security_groups`),
//! and the groups DescribeInstances and RunInstances show. Egress is not modelled: every group shows EC2's
//! default rule (all traffic out), which is what the cloud does.

use std::collections::BTreeMap;

use ipnet::IpNet;

use super::{filter, network, tag_rules};
use crate::aws::credentials::Keys;
use crate::aws::error::{AwsError, Result};
use crate::aws::query::{Filter, Params};
use crate::aws::xml::{Node, items, text};
use crate::http::AppState;
use crate::store;
use crate::store::security_groups::{Group, InstanceGroups, IpProtocol, Rule, Source};

/// The longest group ID looked at: far past EC2's (`sg-` and 17 hex digits).
const ID_MAX_BYTES: usize = 64;
/// EC2's bound on a group's name and description, in characters.
const TEXT_MAX_CHARS: usize = 255;

/// Group IDs as EC2 takes them (`sg-…`), else `InvalidGroupId.Malformed`.
pub fn check_ids(ids: &[String]) -> Result<()> {
    match ids.iter().find(|id| !id.starts_with("sg-") || id.len() > ID_MAX_BYTES) {
        Some(bad) => {
            let shown: String = bad.chars().take(ID_MAX_BYTES).collect();
            Err(AwsError::client("InvalidGroupId.Malformed", format!("Invalid id: \"{shown}\" (expecting \"sg-...\")")))
        }
        None => Ok(()),
    }
}

fn name_not_found(name: &str, vpc: &str) -> AwsError {
    AwsError::client("InvalidGroup.NotFound", format!("The security group '{name}' does not exist in VPC '{vpc}'"))
}

/// Which groups each instance is in, as DescribeInstances and RunInstances show them.
pub struct Membership(InstanceGroups);

impl Membership {
    /// The groups of the instances `ids`, read for them alone (a page of DescribeInstances, a launch).
    pub async fn load(st: &AppState, ids: &[String]) -> Result<Self> {
        let vpc = network::vpc_id(&st.cfg.topology);
        Ok(Self(store::security_groups::of_instances(&st.db, ids, &vpc).await?))
    }

    /// The groups read with the instances (`store::instances::all_with_groups`).
    pub fn of(groups: InstanceGroups) -> Self {
        Self(groups)
    }

    /// `<groupSet>` of instance `id`.
    pub fn group_set(&self, id: &str) -> Node {
        let InstanceGroups { names, default, joined } = &self.0;
        let ids: Vec<&String> = match joined.get(id) {
            Some(ids) => ids.iter().collect(),
            None => default.iter().collect(),
        };
        items(
            "groupSet",
            ids.into_iter().map(|g| {
                vec![text("groupId", g.clone()), text("groupName", names.get(g).cloned().unwrap_or_default())]
            }),
        )
    }
}

fn passes(f: &Filter, g: &Group, owner: &str) -> bool {
    let one = |v: &str| filter::any(&f.values, v);
    match f.name.as_str() {
        "group-id" => one(&g.id),
        "group-name" => one(&g.name),
        "vpc-id" => one(&g.vpc_id),
        "description" => one(&g.description),
        "owner-id" => one(owner),
        // A group whose ingress admits another group's members (cloud-provider-aws looks up which node groups
        // admit a load balancer's).
        "ip-permission.group-id" => g.rules.iter().any(|r| matches!(&r.source, Source::Group(id) if one(id))),
        _ => filter::tags_pass(f, &g.tags),
    }
}

pub async fn describe(st: &AppState, keys: &Keys, params: &mut Params) -> Result<Vec<Node>> {
    let ids = params.list("GroupId")?;
    let names = params.list("GroupName")?;
    let filters = params.filters()?;
    let max_results = params.int("MaxResults", 5, 1000)?;
    let token = params.take("NextToken");
    check_ids(&ids)?;
    filter::check(&filters, |n| {
        matches!(n, "group-id" | "group-name" | "vpc-id" | "description" | "owner-id" | "ip-permission.group-id")
            || filter::is_tag(n)
    })?;
    // The token is how many groups the pages before have passed over.
    let skip: usize = Params::next_token(token.as_deref())?;
    let all = store::security_groups::list(&st.db).await?;
    if let Some(missing) = ids.iter().find(|id| !all.iter().any(|g| &g.id == *id)) {
        return Err(AwsError::client(
            "InvalidGroup.NotFound",
            format!("The security group '{missing}' does not exist"),
        ));
    }
    let vpc = network::vpc_id(&st.cfg.topology);
    if let Some(missing) = names.iter().find(|n| !all.iter().any(|g| &g.name == *n)) {
        return Err(name_not_found(missing, &vpc));
    }
    let mut chosen = all
        .iter()
        .filter(|g| {
            (ids.is_empty() || ids.contains(&g.id))
                && (names.is_empty() || names.contains(&g.name))
                && filters.iter().all(|f| passes(f, g, &keys.account_id))
        })
        .skip(skip);
    let page: Vec<&Group> = match max_results {
        Some(n) => chosen.by_ref().take(n as usize).collect(),
        None => chosen.by_ref().collect(),
    };
    let region = &st.cfg.topology.region;
    let shown = page.iter().map(|g| group(g, region, &keys.account_id)).collect::<Vec<_>>();
    let mut answer = vec![items("securityGroupInfo", shown)];
    if chosen.next().is_some() {
        answer.push(text("nextToken", (skip + page.len()).to_string()));
    }
    Ok(answer)
}

fn arn(region: &str, owner: &str, id: &str) -> String {
    format!("arn:aws:ec2:{region}:{owner}:security-group/{id}")
}

fn group(g: &Group, region: &str, owner: &str) -> Vec<Node> {
    let everywhere = vec![
        text("ipProtocol", "-1"),
        items("groups", []),
        items("ipRanges", [vec![text("cidrIp", "0.0.0.0/0")]]),
        items("ipv6Ranges", []),
        items("prefixListIds", []),
    ];
    vec![
        text("ownerId", owner),
        text("groupId", g.id.clone()),
        text("groupName", g.name.clone()),
        text("groupDescription", g.description.clone()),
        text("vpcId", g.vpc_id.clone()),
        text("securityGroupArn", arn(region, owner, &g.id)),
        items("ipPermissions", permissions(&g.rules, owner)),
        items("ipPermissionsEgress", [everywhere]),
        filter::tag_set(&g.tags),
    ]
}

/// `rules` as EC2 shows them: one permission per protocol and port range, its sources listed in it.
fn permissions(rules: &[Rule], owner: &str) -> Vec<Vec<Node>> {
    let mut by_range: BTreeMap<(IpProtocol, i64, i64), Vec<&Rule>> = BTreeMap::new();
    for r in rules {
        by_range.entry((r.protocol, r.from_port, r.to_port)).or_default().push(r);
    }
    by_range
        .into_iter()
        .map(|((protocol, from, to), sources)| {
            let mut fields = vec![text("ipProtocol", protocol.as_str())];
            // EC2 shows no ports on a rule of every protocol.
            if protocol != IpProtocol::All {
                fields.push(text("fromPort", from.to_string()));
                fields.push(text("toPort", to.to_string()));
            }
            let (mut groups, mut v4, mut v6) = (Vec::new(), Vec::new(), Vec::new());
            for r in sources {
                let (list, mut item) = match &r.source {
                    Source::Group(id) => (&mut groups, vec![text("userId", owner), text("groupId", id.clone())]),
                    Source::Cidr(net @ IpNet::V4(_)) => (&mut v4, vec![text("cidrIp", net.to_string())]),
                    Source::Cidr(net @ IpNet::V6(_)) => (&mut v6, vec![text("cidrIpv6", net.to_string())]),
                };
                // EC2 leaves out a description never given.
                if !r.description.is_empty() {
                    item.push(text("description", r.description.clone()));
                }
                list.push(item);
            }
            fields.push(items("groups", groups));
            fields.push(items("ipRanges", v4));
            fields.push(items("ipv6Ranges", v6));
            fields.push(items("prefixListIds", []));
            fields
        })
        .collect()
}

/// A group's name or description: 1 to 255 characters.
fn check_text(name: &str, value: &str) -> Result<()> {
    let n = value.chars().count();
    if n == 0 || n > TEXT_MAX_CHARS {
        return Err(AwsError::invalid_value(format!(
            "Value for parameter {name} is invalid: it must be 1 to {TEXT_MAX_CHARS} characters long (got {n})"
        )));
    }
    Ok(())
}

pub async fn create(st: &AppState, keys: &Keys, params: &mut Params) -> Result<Vec<Node>> {
    let name = params.required("GroupName")?;
    // `GroupDescription` on the wire (the model's `Description` member); either is taken.
    let description = match (params.take("GroupDescription"), params.take("Description")) {
        (Some(d), None) | (None, Some(d)) => d,
        (None, None) => {
            return Err(AwsError::client(
                "MissingParameter",
                "The request must contain the parameter GroupDescription",
            ));
        }
        (Some(_), Some(_)) => {
            return Err(AwsError::client(
                "InvalidParameterCombination",
                "GroupDescription and Description cannot both be given",
            ));
        }
    };
    check_text("GroupName", &name)?;
    check_text("GroupDescription", &description)?;
    if name.to_ascii_lowercase().starts_with("sg-") {
        return Err(AwsError::invalid_value(format!("Group names may not be in the format sg-* ({name})")));
    }
    let vpc = network::vpc_id(&st.cfg.topology);
    if let Some(given) = params.take("VpcId") {
        network::check_vpc(&st.cfg.topology, &given)?;
    }
    let tags = tag_rules::specified(params, "security-group")?;
    params.finish()?;
    let made = store::security_groups::create(&st.db, &vpc, &name, &description, &tags).await?;
    let mut answer = vec![
        text("return", "true"),
        text("groupId", made.id.clone()),
        text("securityGroupArn", arn(&st.cfg.topology.region, &keys.account_id, &made.id)),
    ];
    if !made.tags.is_empty() {
        answer.push(filter::tag_set(&made.tags));
    }
    Ok(answer)
}

/// The group a write names: `GroupId`, or `GroupName` in the cloud's VPC.
async fn named(st: &AppState, params: &mut Params) -> Result<String> {
    if let Some(id) = params.take("GroupId") {
        params.take("GroupName");
        check_ids(std::slice::from_ref(&id))?;
        return Ok(id);
    }
    let name = params.take("GroupName").ok_or_else(|| {
        AwsError::client("MissingParameter", "The request must contain the parameter GroupId or GroupName")
    })?;
    let vpc = network::vpc_id(&st.cfg.topology);
    let all = store::security_groups::list(&st.db).await?;
    all.into_iter().find(|g| g.name == name && g.vpc_id == vpc).map(|g| g.id).ok_or_else(|| name_not_found(&name, &vpc))
}

pub async fn delete(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let id = named(st, params).await?;
    params.finish()?;
    store::security_groups::delete(&st.db, &id).await?;
    Ok(vec![text("return", "true"), text("groupId", id)])
}

pub async fn authorize(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let rules = rules(params)?;
    let id = named(st, params).await?;
    params.finish()?;
    store::security_groups::authorize(&st.db, &id, &rules).await?;
    Ok(vec![text("return", "true")])
}

pub async fn revoke(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let rules = rules(params)?;
    let id = named(st, params).await?;
    params.finish()?;
    store::security_groups::revoke(&st.db, &id, &rules).await?;
    Ok(vec![text("return", "true")])
}

/// The rules a request names: `IpPermissions.N`, or the legacy flat `IpProtocol`, `FromPort`, `ToPort`, `CidrIp`.
fn rules(params: &mut Params) -> Result<Vec<Rule>> {
    let listed = params.structures("IpPermissions")?;
    for legacy in ["SourceSecurityGroupName", "SourceSecurityGroupOwnerId"] {
        if params.take(legacy).is_some() {
            return Err(AwsError::invalid_value(format!(
                "{legacy} names a group of EC2-Classic or a default VPC; name the source group in \
                 IpPermissions.N.Groups.M.GroupId"
            )));
        }
    }
    let flat = ["IpProtocol", "FromPort", "ToPort", "CidrIp"].iter().any(|n| params.peek(n).is_some());
    let rules = match (listed.is_empty(), flat) {
        (false, true) => {
            return Err(AwsError::client(
                "InvalidParameterCombination",
                "The parameter 'IpPermissions' may not be used in combination with 'IpProtocol', 'FromPort', \
                 'ToPort' or 'CidrIp'",
            ));
        }
        (true, false) => {
            return Err(AwsError::client("MissingParameter", "The request must contain the parameter IpPermissions"));
        }
        (true, true) => {
            let (protocol, from, to) = ports(params)?;
            let cidr = params.required("CidrIp")?;
            vec![Rule {
                protocol,
                from_port: from,
                to_port: to,
                source: Source::Cidr(network_of(&cidr, "CidrIp", true)?),
                description: String::new(),
            }]
        }
        (false, false) => {
            let mut rules = Vec::new();
            for mut p in listed {
                rules.extend(permission(&mut p)?);
                p.finish()?;
            }
            rules
        }
    };
    Ok(rules)
}

/// One `IpPermissions.N`: a rule per source.
fn permission(p: &mut Params) -> Result<Vec<Rule>> {
    let (protocol, from_port, to_port) = ports(p)?;
    let mut sources = Vec::new();
    for mut r in p.structures("IpRanges")? {
        let cidr = r.required("CidrIp")?;
        let source = Source::Cidr(network_of(&cidr, &r.name_of("CidrIp"), true)?);
        sources.push((source, rule_description(&mut r)?));
        r.finish()?;
    }
    for mut r in p.structures("Ipv6Ranges")? {
        let cidr = r.required("CidrIpv6")?;
        let source = Source::Cidr(network_of(&cidr, &r.name_of("CidrIpv6"), false)?);
        sources.push((source, rule_description(&mut r)?));
        r.finish()?;
    }
    // `UserIdGroupPairs` is `Groups` on the wire, as the SDKs send it.
    for mut g in p.structures("Groups")? {
        g.take("UserId");
        if g.take("GroupName").is_some() {
            return Err(AwsError::invalid_value(format!(
                "{}: a group in a VPC is named by its ID (GroupId), not its name",
                g.name_of("GroupName")
            )));
        }
        let id = g.required("GroupId")?;
        check_ids(std::slice::from_ref(&id))?;
        sources.push((Source::Group(id), rule_description(&mut g)?));
        g.finish()?;
    }
    if sources.is_empty() {
        return Err(AwsError::client(
            "InvalidPermission.Malformed",
            format!("{}: a permission needs a source (IpRanges, Ipv6Ranges or Groups)", p.name_of("IpProtocol")),
        ));
    }
    Ok(sources
        .into_iter()
        .map(|(source, description)| Rule { protocol, from_port, to_port, source, description })
        .collect())
}

/// A source's `Description`, as EC2 takes it: up to 255 characters of letters, digits, spaces and
/// `._-:/()#,@[]+=&;{}!$*`; none is empty.
fn rule_description(p: &mut Params) -> Result<String> {
    let Some(d) = p.take("Description") else { return Ok(String::new()) };
    let allowed = |c: char| c.is_ascii_alphanumeric() || " ._-:/()#,@[]+=&;{}!$*".contains(c);
    if d.chars().count() > TEXT_MAX_CHARS || !d.chars().all(allowed) {
        return Err(AwsError::invalid_value(format!(
            "Invalid rule description for {}: up to {TEXT_MAX_CHARS} letters, digits, spaces and ._-:/()#,@[]+=&;{{}}!$*",
            p.name_of("Description")
        )));
    }
    Ok(d)
}

/// `IpProtocol`, `FromPort` and `ToPort` of a permission, as EC2 reads them: a port range for TCP and UDP (both
/// ports, 0 to 65535), a type and code for ICMP (-1: any), none for every protocol (`-1`).
fn ports(p: &mut Params) -> Result<(IpProtocol, i64, i64)> {
    let given = p.required("IpProtocol")?;
    let protocol = IpProtocol::parse(&given).ok_or_else(|| {
        AwsError::invalid_value(format!(
            "Invalid value '{given}' for IP protocol; fakecloud models tcp, udp, icmp and -1 (all)"
        ))
    })?;
    let mut port = |name: &str| -> Result<Option<i64>> {
        match p.take(name) {
            None => Ok(None),
            Some(v) => v
                .parse::<i64>()
                .map(Some)
                .map_err(|_| AwsError::invalid_value(format!("Invalid value '{v}' for {}", p.name_of(name)))),
        }
    };
    let (from, to) = (port("FromPort")?, port("ToPort")?);
    match protocol {
        IpProtocol::All => Ok((protocol, -1, -1)),
        IpProtocol::Icmp => {
            let (t, c) = (from.unwrap_or(-1), to.unwrap_or(-1));
            if !(-1..=255).contains(&t) || !(-1..=255).contains(&c) {
                return Err(AwsError::invalid_value(format!("Invalid ICMP type {t} or code {c}: -1 to 255")));
            }
            Ok((protocol, t, c))
        }
        IpProtocol::Tcp | IpProtocol::Udp => match (from, to) {
            (Some(f), Some(t)) if (0..=65535).contains(&f) && (0..=65535).contains(&t) && f <= t => {
                Ok((protocol, f, t))
            }
            (Some(f), Some(t)) => Err(AwsError::invalid_value(format!(
                "Invalid value for portRange: from port {f}, to port {t} (0 to 65535, from no higher than to)"
            ))),
            _ => Err(AwsError::invalid_value(format!(
                "Invalid value for portRange. Must specify both from and to ports with {}.",
                protocol.as_str().to_uppercase()
            ))),
        },
    }
}

/// A rule's network: IPv4 for `CidrIp`, IPv6 for `CidrIpv6`, with no host bits.
fn network_of(value: &str, name: &str, v4: bool) -> Result<IpNet> {
    let net: IpNet = value.parse().map_err(|_| {
        AwsError::invalid_value(format!(
            "Value ({value}) for parameter {name} is invalid. This is not a valid CIDR block."
        ))
    })?;
    if net.addr().is_ipv4() != v4 {
        return Err(AwsError::invalid_value(format!(
            "Value ({value}) for parameter {name} is invalid: it must be an IPv{} CIDR block",
            if v4 { 4 } else { 6 }
        )));
    }
    if net.trunc() != net {
        return Err(AwsError::client(
            "InvalidPermission.Malformed",
            format!("CIDR block {value} is malformed: it is not a network (did you mean {}?)", net.trunc()),
        ));
    }
    Ok(net)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn parse(form: &str) -> Result<Vec<Rule>> {
        let mut p = Params::parse("", form.as_bytes()).unwrap();
        let rules = rules(&mut p)?;
        p.finish()?;
        Ok(rules)
    }

    #[test]
    fn permissions_are_read_as_the_sdks_send_them() {
        let rules = parse(
            "IpPermissions.1.IpProtocol=tcp&IpPermissions.1.FromPort=80&IpPermissions.1.ToPort=443\
             &IpPermissions.1.IpRanges.1.CidrIp=10.0.0.0%2F8&IpPermissions.1.IpRanges.2.CidrIp=0.0.0.0%2F0\
             &IpPermissions.1.Groups.1.GroupId=sg-0123456789abcdef0&IpPermissions.1.Groups.1.UserId=123\
             &IpPermissions.2.IpProtocol=icmp&IpPermissions.2.FromPort=3&IpPermissions.2.ToPort=4\
             &IpPermissions.2.Ipv6Ranges.1.CidrIpv6=2001%3Adb8%3A%3A%2F32&IpPermissions.3.IpProtocol=-1\
             &IpPermissions.3.FromPort=0&IpPermissions.3.ToPort=9&IpPermissions.3.IpRanges.1.CidrIp=1.2.3.4%2F32",
        )
        .unwrap();
        let shown: Vec<(IpProtocol, i64, i64, String)> = rules
            .iter()
            .map(|r| {
                let s = match &r.source {
                    Source::Cidr(n) => n.to_string(),
                    Source::Group(g) => g.clone(),
                };
                (r.protocol, r.from_port, r.to_port, s)
            })
            .collect();
        assert_eq!(
            shown,
            [
                (IpProtocol::Tcp, 80, 443, "10.0.0.0/8".into()),
                (IpProtocol::Tcp, 80, 443, "0.0.0.0/0".into()),
                (IpProtocol::Tcp, 80, 443, "sg-0123456789abcdef0".into()),
                (IpProtocol::Icmp, 3, 4, "2001:db8::/32".into()),
                (IpProtocol::All, -1, -1, "1.2.3.4/32".into()),
            ]
        );
        let legacy = parse("IpProtocol=udp&FromPort=53&ToPort=53&CidrIp=10.1.0.0%2F16").unwrap();
        assert_eq!(legacy.len(), 1);
        assert_eq!((legacy[0].protocol, legacy[0].from_port), (IpProtocol::Udp, 53));
    }

    #[test]
    fn malformed_permissions_are_refused_with_ec2s_codes() {
        let code = |form: &str| parse(form).unwrap_err().code.to_string();
        let p = "IpPermissions.1.IpProtocol=tcp&IpPermissions.1.FromPort=80&IpPermissions.1.ToPort=80";
        assert_eq!(code(&format!("{p}&IpPermissions.1.IpRanges.1.CidrIp=10.0.0.1%2F8")), "InvalidPermission.Malformed");
        assert_eq!(code(&format!("{p}&IpPermissions.1.IpRanges.1.CidrIp=10.0.0.0%2F33")), "InvalidParameterValue");
        assert_eq!(
            code(&format!("{p}&IpPermissions.1.IpRanges.1.CidrIp=2001%3Adb8%3A%3A%2F32")),
            "InvalidParameterValue"
        );
        assert_eq!(code(p), "InvalidPermission.Malformed");
        assert_eq!(
            code(
                "IpPermissions.1.IpProtocol=tcp&IpPermissions.1.FromPort=90&IpPermissions.1.ToPort=80&IpPermissions.1.IpRanges.1.CidrIp=0.0.0.0%2F0"
            ),
            "InvalidParameterValue"
        );
        assert_eq!(
            code("IpPermissions.1.IpProtocol=tcp&IpPermissions.1.IpRanges.1.CidrIp=0.0.0.0%2F0"),
            "InvalidParameterValue"
        );
        assert_eq!(
            code("IpPermissions.1.IpProtocol=gre&IpPermissions.1.IpRanges.1.CidrIp=0.0.0.0%2F0"),
            "InvalidParameterValue"
        );
        assert_eq!(code(&format!("{p}&IpPermissions.1.Groups.1.GroupId=web")), "InvalidGroupId.Malformed");
        assert_eq!(
            code(&format!("{p}&IpPermissions.1.IpRanges.1.CidrIp=0.0.0.0%2F0&CidrIp=0.0.0.0%2F0")),
            "InvalidParameterCombination"
        );
        assert_eq!(code(&format!("{p}&IpPermissions.1.IpRanges.1.Colour=x")), "MissingParameter");
        assert_eq!(code(""), "MissingParameter");
    }
}

//! Security groups (issue #49): EC2's groups, their ingress rules, the instances in each and the load balancers
//! each guards. Every VPC has its `default` group, which cannot be deleted; an instance launched without groups
//! is in it (it has no row of its own). A load balancer attached to groups admits a client to a listener when
//! one of its groups' rules covers the listener's protocol and port from the client's network; the data plane
//! reads them with [`load_balancer_rules`]. Each write is one transaction: a request with one bad rule changes
//! nothing.

use std::collections::{BTreeMap, HashMap};

use fakecloud_api::{Protocol, QuotaName, codes};
use ipnet::IpNet;
use sqlx::Row;

use super::tags::{self, Resource};
use super::write::begin;
use crate::call;
use crate::db::{Db, Tx, new_id, now_ms, params};
use crate::error::{ApiError, Result, conflict_on_unique};

/// The name of each VPC's own group.
pub const DEFAULT: &str = "default";

/// What a rule admits, as EC2 names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IpProtocol {
    Tcp,
    Udp,
    Icmp,
    /// `-1`: every protocol and port.
    All,
}

impl IpProtocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tcp => "tcp",
            Self::Udp => "udp",
            Self::Icmp => "icmp",
            Self::All => "-1",
        }
    }

    /// EC2's names and their protocol numbers (`6`, `17`, `1`), `all` as `-1`.
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "tcp" | "6" => Some(Self::Tcp),
            "udp" | "17" => Some(Self::Udp),
            "icmp" | "1" => Some(Self::Icmp),
            "-1" | "all" => Some(Self::All),
            _ => None,
        }
    }
}

/// Where a rule admits traffic from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// A network, in canonical form (no host bits).
    Cidr(IpNet),
    /// The instances in a group, by its ID.
    Group(String),
}

impl Source {
    fn stored(&self) -> String {
        match self {
            Self::Cidr(net) => net.to_string(),
            Self::Group(id) => id.clone(),
        }
    }

    fn read(s: String) -> Result<Self> {
        if s.starts_with("sg-") {
            return Ok(Self::Group(s));
        }
        s.parse().map(Self::Cidr).map_err(|_| ApiError::internal(format!("stored rule source {s:?} is not a network")))
    }
}

/// One ingress rule: a protocol, a port range (an ICMP type and code; `-1` for any) and one source; and the
/// description its writer gave it, which is not part of what it admits (see [`Rule::same`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rule {
    pub protocol: IpProtocol,
    pub from_port: i64,
    pub to_port: i64,
    pub source: Source,
    pub description: String,
}

impl Rule {
    /// Whether it is `other` whatever each one's description says: EC2 refuses it as a duplicate, and revokes
    /// it when named without its description.
    pub fn same(&self, other: &Rule) -> bool {
        (self.protocol, self.from_port, self.to_port, &self.source)
            == (other.protocol, other.from_port, other.to_port, &other.source)
    }

    /// Whether it admits traffic to a listener of `protocol` on `port`: a rule of every protocol does, a TCP or
    /// UDP rule when the port is in its range; an ICMP rule admits no listener's traffic.
    pub fn covers(&self, protocol: Protocol, port: u16) -> bool {
        let in_range = || (self.from_port..=self.to_port).contains(&i64::from(port));
        match (self.protocol, protocol) {
            (IpProtocol::All, _) => true,
            (IpProtocol::Tcp, Protocol::Tcp) | (IpProtocol::Udp, Protocol::Udp) => in_range(),
            _ => false,
        }
    }

    /// A client network it admits to `protocol`/`port`: a rule from a group admits none (the data plane's
    /// clients are outside the cloud's instances).
    pub fn admits(&self, protocol: Protocol, port: u16) -> Option<IpNet> {
        match &self.source {
            Source::Cidr(net) if self.covers(protocol, port) => Some(*net),
            _ => None,
        }
    }

    fn describe(&self) -> String {
        format!(
            "peer: {}, {}, from port: {}, to port: {}, ALLOW",
            self.source.stored(),
            self.protocol.as_str().to_uppercase(),
            self.from_port,
            self.to_port
        )
    }
}

/// A group as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub id: String,
    pub name: String,
    pub description: String,
    pub vpc_id: String,
    pub rules: Vec<Rule>,
    pub tags: BTreeMap<String, String>,
}

fn not_found(id: &str) -> ApiError {
    ApiError::not_found(codes::SECURITY_GROUP_NOT_FOUND, format!("The security group '{id}' does not exist"))
}

/// Make `vpc_id`'s `default` group if it has none, with EC2's rule admitting everything from the group itself.
pub async fn ensure_default(tx: &mut Tx, vpc_id: &str) -> Result<()> {
    let id = new_id("sg");
    let made = sqlx::query(
        "INSERT INTO security_groups (id, name, description, vpc_id, created_at) VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT DO NOTHING",
    )
    .bind(&id)
    .bind(DEFAULT)
    .bind("default VPC security group")
    .bind(vpc_id)
    .bind(now_ms())
    .execute(&mut **tx)
    .await?;
    // Only when it is new: a rule the user revoked stays revoked across restarts.
    if made.rows_affected() == 1 {
        insert_rule(
            tx,
            &id,
            &Rule {
                protocol: IpProtocol::All,
                from_port: -1,
                to_port: -1,
                source: Source::Group(id.clone()),
                description: String::new(),
            },
        )
        .await?;
    }
    Ok(())
}

/// The VPCs that have a default group: what a reset makes again.
pub async fn default_vpcs(tx: &mut Tx) -> Result<Vec<String>> {
    Ok(sqlx::query_scalar("SELECT vpc_id FROM security_groups WHERE name = $1")
        .bind(DEFAULT)
        .fetch_all(&mut **tx)
        .await?)
}

/// Every group, oldest first, with its rules and tags.
pub async fn list(db: &Db) -> Result<Vec<Group>> {
    let rows = sqlx::query("SELECT id, name, description, vpc_id FROM security_groups ORDER BY seq")
        .fetch_all(db.reader())
        .await?;
    let mut rules = rules_by_group(db).await?;
    let mut tagged = tags::others(db).await?;
    rows.iter()
        .map(|r| {
            let id: String = r.try_get(0)?;
            Ok(Group {
                rules: rules.remove(&id).unwrap_or_default(),
                tags: tagged.remove(&id).unwrap_or_default(),
                name: r.try_get(1)?,
                description: r.try_get(2)?,
                vpc_id: r.try_get(3)?,
                id,
            })
        })
        .collect()
}

async fn rules_by_group(db: &Db) -> Result<HashMap<String, Vec<Rule>>> {
    let rows = sqlx::query(
        "SELECT group_id, protocol, from_port, to_port, source, description FROM security_group_rules ORDER BY seq",
    )
    .fetch_all(db.reader())
    .await?;
    let mut out: HashMap<String, Vec<Rule>> = HashMap::new();
    for r in rows {
        out.entry(r.try_get(0)?).or_default().push(rule_of(&r, 1)?);
    }
    Ok(out)
}

/// The rule in `row`'s columns from `at`: protocol, from port, to port, source, description.
fn rule_of(row: &sqlx::any::AnyRow, at: usize) -> Result<Rule> {
    let protocol: String = row.try_get(at)?;
    Ok(Rule {
        protocol: IpProtocol::parse(&protocol)
            .ok_or_else(|| ApiError::internal(format!("stored rule protocol {protocol:?} is unknown")))?,
        from_port: row.try_get(at + 1)?,
        to_port: row.try_get(at + 2)?,
        source: Source::read(row.try_get(at + 3)?)?,
        description: row.try_get(at + 4)?,
    })
}

/// A new group `name` in `vpc_id`, with `tags`; a name the VPC has already is a conflict.
pub async fn create(
    db: &Db,
    vpc_id: &str,
    name: &str,
    description: &str,
    tags: &BTreeMap<String, String>,
) -> Result<Group> {
    let (mut tx, now) = begin(db).await?;
    let id = new_id("sg");
    sqlx::query("INSERT INTO security_groups (id, name, description, vpc_id, created_at) VALUES ($1, $2, $3, $4, $5)")
        .bind(&id)
        .bind(name)
        .bind(description)
        .bind(vpc_id)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(conflict_on_unique(codes::SECURITY_GROUP_ALREADY_EXISTS, || {
            format!("The security group '{name}' already exists for VPC '{vpc_id}'")
        }))?;
    tags::write_new(&mut tx, &Resource::SecurityGroup(id.clone()), tags).await?;
    call::commit(tx, &id).await?;
    Ok(Group {
        id,
        name: name.to_string(),
        description: description.to_string(),
        vpc_id: vpc_id.to_string(),
        rules: Vec::new(),
        tags: tags.clone(),
    })
}

/// Whether group `id` exists, in `tx`: its name, if it does.
async fn name_of(tx: &mut Tx, id: &str) -> Result<Option<String>> {
    Ok(sqlx::query_scalar("SELECT name FROM security_groups WHERE id = $1").bind(id).fetch_optional(&mut **tx).await?)
}

/// Refuse with the first of `ids` that is no group.
async fn check_exist(tx: &mut Tx, ids: &[String]) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let sql = format!("SELECT id FROM security_groups WHERE id IN ({})", params(1, ids.len()));
    let mut q = sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(sql));
    for id in ids {
        q = q.bind(id);
    }
    let found: Vec<String> = q.fetch_all(&mut **tx).await?;
    match ids.iter().find(|id| !found.contains(id)) {
        Some(missing) => Err(not_found(missing)),
        None => Ok(()),
    }
}

/// Delete group `id`: not the default, and not while a live instance, a load balancer (until its row is gone)
/// or another group's rule uses it.
pub async fn delete(db: &Db, id: &str) -> Result<()> {
    let (mut tx, now) = begin(db).await?;
    let name = name_of(&mut tx, id).await?.ok_or_else(|| not_found(id))?;
    if name == DEFAULT {
        return Err(ApiError::conflict(
            codes::CANNOT_DELETE,
            format!("the specified group: \"{id}\" name: \"{DEFAULT}\" cannot be deleted by a user"),
        ));
    }
    let users: Vec<String> = sqlx::query_scalar(
        "SELECT m.instance_id FROM instance_security_groups m JOIN instances i ON i.id = m.instance_id \
         WHERE m.group_id = $1 AND (CASE WHEN i.next_state_at <= $2 THEN i.next_state ELSE i.state END) <> 'terminated' \
         UNION ALL SELECT load_balancer_id FROM load_balancer_security_groups WHERE group_id = $1 \
         UNION ALL SELECT group_id FROM security_group_rules WHERE source = $1 AND group_id <> $1",
    )
    .bind(id)
    .bind(now)
    .fetch_all(&mut *tx)
    .await?;
    if let Some(user) = users.first() {
        return Err(ApiError::conflict(
            codes::DEPENDENCY_VIOLATION,
            format!("resource {id} has a dependent object ({user})"),
        ));
    }
    // Terminated instances keep their row for a while; their membership goes with the group.
    sqlx::query("DELETE FROM instance_security_groups WHERE group_id = $1").bind(id).execute(&mut *tx).await?;
    sqlx::query("DELETE FROM security_groups WHERE id = $1").bind(id).execute(&mut *tx).await?;
    tags::forget(&mut tx, id).await?;
    call::commit(tx, id).await?;
    tracing::debug!(group = %id, "security group deleted");
    Ok(())
}

async fn insert_rule(tx: &mut Tx, group: &str, r: &Rule) -> Result<()> {
    sqlx::query(
        "INSERT INTO security_group_rules (group_id, protocol, from_port, to_port, source, description) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(group)
    .bind(r.protocol.as_str())
    .bind(r.from_port)
    .bind(r.to_port)
    .bind(r.source.stored())
    .bind(&r.description)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// The rules of group `id` now, in `tx`; an error if there is no such group.
async fn rules_of(tx: &mut Tx, id: &str) -> Result<Vec<Rule>> {
    name_of(tx, id).await?.ok_or_else(|| not_found(id))?;
    let rows = sqlx::query(
        "SELECT protocol, from_port, to_port, source, description FROM security_group_rules WHERE group_id = $1",
    )
    .bind(id)
    .fetch_all(&mut **tx)
    .await?;
    rows.iter().map(|r| rule_of(r, 0)).collect()
}

/// Add `rules` to group `id`: each new (not the group's already, nor twice in `rules`), each source group one
/// that exists, and the group within the rules-per-group quota after.
pub async fn authorize(db: &Db, id: &str, rules: &[Rule]) -> Result<()> {
    let (mut tx, _) = begin(db).await?;
    let current = rules_of(&mut tx, id).await?;
    let sources: Vec<String> = rules
        .iter()
        .filter_map(|r| match &r.source {
            Source::Group(g) => Some(g.clone()),
            Source::Cidr(_) => None,
        })
        .collect();
    check_exist(&mut tx, &sources).await?;
    for (i, r) in rules.iter().enumerate() {
        if current.iter().chain(&rules[..i]).any(|c| c.same(r)) {
            return Err(ApiError::conflict(
                codes::SECURITY_GROUP_RULE_ALREADY_EXISTS,
                format!("the specified rule \"{}\" already exists", r.describe()),
            ));
        }
    }
    let quota = QuotaName::RulesPerSecurityGroup;
    let limit = super::quotas::limit(&mut *tx, quota).await?;
    if current.len() + rules.len() > limit as usize {
        let what = format!("adding {} rules to security group {id}, which has {}", rules.len(), current.len());
        return Err(ApiError::quota_exceeded(quota, limit, &what));
    }
    for r in rules {
        insert_rule(&mut tx, id, r).await?;
    }
    call::commit(tx, id).await?;
    Ok(())
}

/// Remove `rules` from group `id`, every one of which it must have.
pub async fn revoke(db: &Db, id: &str, rules: &[Rule]) -> Result<()> {
    let (mut tx, _) = begin(db).await?;
    let current = rules_of(&mut tx, id).await?;
    if let Some(missing) = rules.iter().find(|r| !current.iter().any(|c| c.same(r))) {
        return Err(ApiError::not_found(
            codes::SECURITY_GROUP_RULE_NOT_FOUND,
            format!("The specified rule \"{}\" does not exist in this security group", missing.describe()),
        ));
    }
    for r in rules {
        sqlx::query(
            "DELETE FROM security_group_rules \
             WHERE group_id = $1 AND protocol = $2 AND from_port = $3 AND to_port = $4 AND source = $5",
        )
        .bind(id)
        .bind(r.protocol.as_str())
        .bind(r.from_port)
        .bind(r.to_port)
        .bind(r.source.stored())
        .execute(&mut *tx)
        .await?;
    }
    call::commit(tx, id).await?;
    Ok(())
}

/// Make `groups` the security groups of load balancer `lb_id` (a row of `load_balancers`), replacing any it had,
/// as ELB's `ApplySecurityGroupsToLoadBalancer` and ELBv2's `SetSecurityGroups` do; in the caller's transaction.
/// Each must exist (`SecurityGroupNotFound`, EC2's `InvalidGroup.NotFound`). With groups, the data plane admits
/// whom their rules admit; with none, the load balancer's source ranges decide again.
pub async fn attach_load_balancer(tx: &mut Tx, lb_id: &str, groups: &[String]) -> Result<()> {
    check_exist(tx, groups).await?;
    sqlx::query("DELETE FROM load_balancer_security_groups WHERE load_balancer_id = $1")
        .bind(lb_id)
        .execute(&mut **tx)
        .await?;
    link(tx, "INSERT INTO load_balancer_security_groups (load_balancer_id, group_id) VALUES ($1, $2)", lb_id, groups)
        .await
}

/// Link `owner` to each of `groups` (checked to exist) by `insert` (`$1` the owner, `$2` a group); a group named
/// twice is linked once.
async fn link(tx: &mut Tx, insert: &'static str, owner: &str, groups: &[String]) -> Result<()> {
    let mut linked: Vec<&String> = Vec::new();
    for g in groups {
        if !linked.contains(&g) {
            sqlx::query(insert).bind(owner).bind(g).execute(&mut **tx).await?;
            linked.push(g);
        }
    }
    Ok(())
}

/// The groups of load balancer `lb_id`, in `tx`.
pub async fn of_load_balancer(tx: &mut Tx, lb_id: &str) -> Result<Vec<String>> {
    Ok(sqlx::query_scalar(
        "SELECT group_id FROM load_balancer_security_groups WHERE load_balancer_id = $1 ORDER BY group_id",
    )
    .bind(lb_id)
    .fetch_all(&mut **tx)
    .await?)
}

/// The groups of each of the load balancers `ids` that has some (in one read).
pub async fn of_load_balancers(db: &Db, ids: &[String]) -> Result<HashMap<String, Vec<String>>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let sql = format!(
        "SELECT load_balancer_id, group_id FROM load_balancer_security_groups WHERE load_balancer_id IN ({}) \
         ORDER BY group_id",
        crate::db::params(1, ids.len())
    );
    let mut q = sqlx::query_as::<_, (String, String)>(sqlx::AssertSqlSafe(sql));
    for id in ids {
        q = q.bind(id);
    }
    let mut groups: HashMap<String, Vec<String>> = HashMap::new();
    for (lb, group) in q.fetch_all(db.reader()).await? {
        groups.entry(lb).or_default().push(group);
    }
    Ok(groups)
}

/// The ingress rules of every load balancer that has groups (all its groups' together, possibly none): what the
/// data plane admits clients by. A load balancer without groups is not in it.
pub async fn load_balancer_rules(db: &Db) -> Result<HashMap<String, Vec<Rule>>> {
    let rows = sqlx::query(
        "SELECT l.load_balancer_id, r.protocol, r.from_port, r.to_port, r.source, r.description \
         FROM load_balancer_security_groups l \
         LEFT JOIN security_group_rules r ON r.group_id = l.group_id ORDER BY l.load_balancer_id, r.seq",
    )
    .fetch_all(db.reader())
    .await?;
    let mut out: HashMap<String, Vec<Rule>> = HashMap::new();
    for r in rows {
        let rules = out.entry(r.try_get(0)?).or_default();
        // A group with no rules: the load balancer is still guarded (and admits no one by it).
        let protocol: Option<String> = r.try_get(1)?;
        if protocol.is_some() {
            rules.push(rule_of(&r, 1)?);
        }
    }
    Ok(out)
}

/// What an instance's `groupSet` shows, for the instances `ids`: the groups each was launched into (by ID, in
/// ID order), the names of those groups, and the ID of VPC `vpc_id`'s default group (the group of an instance
/// launched into none). One read, however many groups the cloud has: DescribeInstances asks it on every call.
pub async fn of_instances(db: &Db, ids: &[String], vpc_id: &str) -> Result<InstanceGroups> {
    // The default group's row has no instance (''), the members' rows one each.
    let mut sql = "SELECT '', id, name FROM security_groups WHERE name = $1 AND vpc_id = $2".to_string();
    if !ids.is_empty() {
        sql += &format!(
            " UNION ALL SELECT m.instance_id, g.id, g.name FROM instance_security_groups m \
             JOIN security_groups g ON g.id = m.group_id WHERE m.instance_id IN ({})",
            crate::db::params(3, ids.len())
        );
    }
    sql += " ORDER BY 1, 2";
    let mut q = sqlx::query_as::<_, (String, String, String)>(sqlx::AssertSqlSafe(sql)).bind(DEFAULT).bind(vpc_id);
    for id in ids {
        q = q.bind(id);
    }
    let mut out = InstanceGroups::default();
    for (instance, id, name) in q.fetch_all(db.reader()).await? {
        if instance.is_empty() {
            out.add_default(id, name);
        } else {
            out.add_member(instance, id, name);
        }
    }
    Ok(out)
}

/// The groups of some instances: see [`of_instances`].
#[derive(Debug, Default)]
pub struct InstanceGroups {
    /// Group names by ID.
    pub names: HashMap<String, String>,
    /// The VPC's default group, which an instance launched into no group is in.
    pub default: Option<String>,
    /// The groups of the instances launched into some.
    pub joined: HashMap<String, Vec<String>>,
}

impl InstanceGroups {
    /// The VPC's default group, read with the members.
    pub fn add_default(&mut self, id: String, name: String) {
        self.default = Some(id.clone());
        self.names.insert(id, name);
    }

    /// Instance `instance` is in group `id`, named `name` (added in the group's ID order).
    pub fn add_member(&mut self, instance: String, id: String, name: String) {
        self.joined.entry(instance).or_default().push(id.clone());
        self.names.insert(id, name);
    }
}

/// Put instance `id` in `groups`, each of which must exist, in the transaction that launches it.
pub async fn join(tx: &mut Tx, id: &str, groups: &[String]) -> Result<()> {
    check_exist(tx, groups).await?;
    link(tx, "INSERT INTO instance_security_groups (instance_id, group_id) VALUES ($1, $2)", id, groups).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn rule(protocol: IpProtocol, from: i64, to: i64) -> Rule {
        Rule {
            protocol,
            from_port: from,
            to_port: to,
            source: Source::Cidr("10.0.0.0/8".parse().unwrap()),
            description: String::new(),
        }
    }

    #[test]
    fn a_rule_covers_its_protocol_within_its_port_range() {
        let web = rule(IpProtocol::Tcp, 80, 443);
        assert!(web.covers(Protocol::Tcp, 80) && web.covers(Protocol::Tcp, 443) && web.covers(Protocol::Tcp, 200));
        assert!(!web.covers(Protocol::Tcp, 79) && !web.covers(Protocol::Tcp, 444));
        assert!(!web.covers(Protocol::Udp, 80), "a TCP rule admits no UDP");
        let dns = rule(IpProtocol::Udp, 53, 53);
        assert!(dns.covers(Protocol::Udp, 53) && !dns.covers(Protocol::Tcp, 53) && !dns.covers(Protocol::Udp, 54));
        let all = rule(IpProtocol::All, -1, -1);
        assert!(all.covers(Protocol::Tcp, 1) && all.covers(Protocol::Udp, 65535));
        // Path MTU discovery's rule (type 3, code 4) is not port 3 or 4.
        let icmp = rule(IpProtocol::Icmp, 3, 4);
        assert!(!icmp.covers(Protocol::Tcp, 3) && !icmp.covers(Protocol::Udp, 4));
        let any_icmp = rule(IpProtocol::Icmp, -1, -1);
        assert!(!any_icmp.covers(Protocol::Tcp, 80));
    }

    #[test]
    fn only_networks_admit_clients() {
        let net = rule(IpProtocol::Tcp, 80, 80);
        assert_eq!(net.admits(Protocol::Tcp, 80), Some("10.0.0.0/8".parse().unwrap()));
        assert_eq!(net.admits(Protocol::Tcp, 81), None);
        let from_group = Rule { source: Source::Group("sg-0123456789abcdef0".into()), ..rule(IpProtocol::All, -1, -1) };
        assert_eq!(from_group.admits(Protocol::Tcp, 80), None, "a group's members are not outside clients");
    }

    #[test]
    fn protocols_are_read_by_name_or_number() {
        for (s, p) in
            [("tcp", IpProtocol::Tcp), ("TCP", IpProtocol::Tcp), ("6", IpProtocol::Tcp), ("17", IpProtocol::Udp)]
        {
            assert_eq!(IpProtocol::parse(s), Some(p));
        }
        assert_eq!(IpProtocol::parse("all"), Some(IpProtocol::All));
        assert_eq!(IpProtocol::parse("1"), Some(IpProtocol::Icmp));
        assert_eq!(IpProtocol::parse("50"), None);
        assert_eq!(IpProtocol::parse("icmpv6"), None);
    }
}

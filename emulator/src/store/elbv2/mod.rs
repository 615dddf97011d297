//! Elastic Load Balancing v2's network load balancers, for the AWS face (`aws::elbv2`): an NLB is one native
//! load balancer (`load_balancers`, made, changed and deleted through [`load_balancers`]), its target groups and
//! listeners rows of this module's tables (migration 0016). Every change of a listener, of a target group a
//! listener uses or of its targets recomputes the native row in the same transaction ([`sync`]):
//!
//! - each listener is a native listener (its protocol, its port, its target group's port; `TCP_UDP` is a TCP and
//!   a UDP listener on one port);
//! - the native backends are the targets every listener's target group holds (not draining), so that no
//!   listener ever forwards to an instance its own group does not hold: while the groups differ (the AWS CCM
//!   registers an instance in one group after another) an instance in some but not all waits, `initial`;
//! - the native health check is the first listener's target group's (`traffic-port` being that group's port).
//!
//! The native model has one backend set and one health check per load balancer: exact for the CCM, which gives
//! every target group of a Service the same instances and health check settings.

use std::collections::{BTreeMap, HashMap};

use fakecloud_api::{
    CreateLoadBalancerRequest, HealthCheck, HealthCheckProtocol, Listener as NativeListener, LoadBalancer, Protocol,
    QuotaName, Scheme, UpdateLoadBalancerRequest, codes,
};
use serde::{Deserialize, Serialize};
use sqlx::any::AnyExecutor;

pub mod code;
pub(super) mod rows;

pub use self::rows::NewNlb;
use self::rows::json;
use super::load_balancers::{self, Beside};
use super::quotas::{self, Check};
use super::security_groups;
use super::tags;
use super::tags::Resource;
use super::write::begin;
use crate::call;
use crate::config::Config;
use crate::db::{Db, Tx, now_ms};
use crate::error::{ApiError, Kind, Result, is_unique_violation};

fn invalid_configuration(message: impl Into<String>) -> ApiError {
    ApiError::new(Kind::Invalid, code::INVALID_CONFIGURATION_REQUEST, message)
}

fn parsed<T: for<'de> Deserialize<'de>>(text: &str, what: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|_| ApiError::internal(format!("stored {what} is invalid")))
}

/// An NLB: its native row's fields the face shows, and its own.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Nlb {
    pub lb_id: String,
    pub arn_id: String,
    pub name: String,
    pub scheme: String,
    /// `provisioning`, `active` or `deleting`, as the native row is now.
    pub state: String,
    /// The native row's, shown from the start as AWS shows an NLB's.
    pub dns_name: String,
    pub created_at: i64,
    pub ip_address_type: String,
    subnets: String,
    /// Its security groups: the groups' own link (`security_groups`), which the data plane enforces.
    #[sqlx(skip)]
    pub security_groups: Vec<String>,
    attributes: String,
}

impl Nlb {
    pub fn subnets(&self) -> Result<Vec<String>> {
        parsed(&self.subnets, "subnets")
    }

    pub fn attributes(&self) -> Result<BTreeMap<String, String>> {
        parsed(&self.attributes, "attributes")
    }
}

/// A target group's health check, as ELB's API gives it (what the native check takes is its protocol, port,
/// path and interval; the rest is kept and answered).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthSettings {
    /// `TCP`, `HTTP` or `HTTPS`.
    pub protocol: String,
    /// A port, or `traffic-port`: the target's own.
    pub port: String,
    pub path: Option<String>,
    pub interval_seconds: u32,
    pub timeout_seconds: u32,
    pub healthy_threshold: u32,
    pub unhealthy_threshold: u32,
    pub matcher: Option<String>,
}

/// A registered target: an instance and its port; while it drains, when it is gone (ms).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    pub id: String,
    pub port: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draining_until: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct TargetGroup {
    pub id: String,
    pub name: String,
    pub protocol: String,
    pub port: u16,
    pub vpc_id: String,
    pub health: HealthSettings,
    pub attributes: BTreeMap<String, String>,
    /// Registered and draining targets; drained ones are gone.
    pub targets: Vec<Target>,
    pub created_at: i64,
    /// The load balancer whose listeners forward to it (one at most: [`code::TARGET_GROUP_ASSOCIATION_LIMIT`]).
    pub lb_id: Option<String>,
}

impl TargetGroup {
    /// The targets that may get traffic: registered, not draining.
    pub fn registered(&self) -> impl Iterator<Item = &Target> {
        self.targets.iter().filter(|t| t.draining_until.is_none())
    }
}

#[derive(sqlx::FromRow)]
struct GroupRow {
    id: String,
    name: String,
    protocol: String,
    port: i64,
    vpc_id: String,
    health_check: String,
    attributes: String,
    targets: String,
    created_at: i64,
    lb_id: Option<String>,
}

impl GroupRow {
    fn into_group(self, now: i64) -> Result<TargetGroup> {
        let mut targets: Vec<Target> = parsed(&self.targets, "targets")?;
        targets.retain(|t| t.draining_until.is_none_or(|until| until > now));
        Ok(TargetGroup {
            port: u16::try_from(self.port).map_err(|_| ApiError::internal("stored target group port is invalid"))?,
            health: parsed(&self.health_check, "health check")?,
            attributes: parsed(&self.attributes, "attributes")?,
            targets,
            id: self.id,
            name: self.name,
            protocol: self.protocol,
            vpc_id: self.vpc_id,
            created_at: self.created_at,
            lb_id: self.lb_id,
        })
    }
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Listener {
    pub id: String,
    pub lb_id: String,
    pub protocol: String,
    pub port: i64,
    pub target_group_id: String,
    pub created_at: i64,
}

const SELECT_NLB: &str = "SELECT e.lb_id, e.arn_id, l.name, l.scheme, \
     (CASE WHEN l.next_state_at <= $1 THEN l.next_state ELSE l.state END) AS state, l.dns_name, l.created_at, \
     e.ip_address_type, e.subnets, e.attributes \
     FROM elbv2_load_balancers e JOIN load_balancers l ON l.id = e.lb_id";

const SELECT_GROUP: &str = "SELECT g.id, g.name, g.protocol, g.port, g.vpc_id, g.health_check, g.attributes, g.targets, \
     g.created_at, (SELECT MIN(lb_id) FROM elbv2_listeners WHERE target_group_id = g.id) AS lb_id \
     FROM elbv2_target_groups g";

const SELECT_LISTENER: &str = "SELECT id, lb_id, protocol, port, target_group_id, created_at FROM elbv2_listeners";

/// Make an NLB: its native row through the native create (validation, quotas, its address, the provisioning
/// delay) with its own row and tags in the same transaction.
pub async fn create_load_balancer(
    db: &Db,
    cfg: &Config,
    req: &CreateLoadBalancerRequest,
    nlb: &NewNlb,
) -> Result<LoadBalancer> {
    Ok(load_balancers::create_with(db, cfg, req, None, nlb).await?.0)
}

/// Every NLB, oldest first; those being deleted are gone from the face already.
pub async fn load_balancers(db: &Db) -> Result<Vec<Nlb>> {
    let rows: Vec<Nlb> = sqlx::query_as(sqlx::AssertSqlSafe(format!("{SELECT_NLB} ORDER BY l.seq")))
        .bind(now_ms())
        .fetch_all(db.reader())
        .await?;
    let mut nlbs: Vec<Nlb> = rows.into_iter().filter(|n| n.state != "deleting" && n.state != "deleted").collect();
    let ids: Vec<String> = nlbs.iter().map(|n| n.lb_id.clone()).collect();
    let mut groups = security_groups::of_load_balancers(db, &ids).await?;
    for n in &mut nlbs {
        n.security_groups = groups.remove(&n.lb_id).unwrap_or_default();
    }
    Ok(nlbs)
}

fn lb_not_found(what: &str) -> ApiError {
    ApiError::not_found(codes::LOAD_BALANCER_NOT_FOUND, format!("Load balancer '{what}' not found"))
}

/// The NLB whose ARN ends in `arn_id`, within a write.
async fn nlb_in(tx: &mut Tx, now: i64, arn_id: &str) -> Result<Nlb> {
    let nlb: Option<Nlb> = sqlx::query_as(sqlx::AssertSqlSafe(format!("{SELECT_NLB} WHERE e.arn_id = $2")))
        .bind(now)
        .bind(arn_id)
        .fetch_optional(&mut **tx)
        .await?;
    let mut nlb = nlb.filter(|n| n.state != "deleting" && n.state != "deleted").ok_or_else(|| lb_not_found(arn_id))?;
    nlb.security_groups = security_groups::of_load_balancer(tx, &nlb.lb_id).await?;
    Ok(nlb)
}

/// Delete the NLB whose ARN ends in `arn_id`, as the native delete does, unless deletion protection is on.
pub async fn delete_load_balancer(db: &Db, cfg: &Config, arn_id: &str) -> Result<()> {
    let lb_id = {
        let (mut tx, now) = begin(db).await?;
        let nlb = nlb_in(&mut tx, now, arn_id).await?;
        if nlb.attributes()?.get("deletion_protection.enabled").map(String::as_str) == Some("true") {
            return Err(ApiError::new(
                Kind::Invalid,
                code::OPERATION_NOT_PERMITTED,
                format!("Load balancer '{}' cannot be deleted because deletion protection is enabled", nlb.name),
            ));
        }
        nlb.lb_id
    };
    // Read and delete are two writes; a load balancer deleted between them is deleted already.
    load_balancers::delete(db, cfg, &lb_id).await.map(drop)
}

/// Change the NLB's attributes (`attributes` holds them all, as checked by the face) or security groups.
pub async fn set_load_balancer(
    db: &Db,
    arn_id: &str,
    attributes: Option<&BTreeMap<String, String>>,
    security_groups: Option<&[String]>,
) -> Result<Nlb> {
    let (mut tx, now) = begin(db).await?;
    let nlb = nlb_in(&mut tx, now, arn_id).await?;
    if let Some(a) = attributes {
        sqlx::query("UPDATE elbv2_load_balancers SET attributes = $1 WHERE lb_id = $2")
            .bind(json(a)?)
            .bind(&nlb.lb_id)
            .execute(&mut *tx)
            .await?;
    }
    if let Some(g) = security_groups {
        security_groups::attach_load_balancer(&mut tx, &nlb.lb_id, g).await?;
    }
    let nlb = nlb_in(&mut tx, now, arn_id).await?;
    call::commit(tx, &nlb.lb_id).await?;
    Ok(nlb)
}

fn group_not_found(what: &str) -> ApiError {
    ApiError::not_found(code::TARGET_GROUP_NOT_FOUND, format!("Target group '{what}' not found"))
}

/// A new target group (its `targets`, `lb_id` and `created_at` are ignored).
pub async fn create_target_group(db: &Db, group: &TargetGroup, tags: &BTreeMap<String, String>) -> Result<()> {
    let (mut tx, now) = begin(db).await?;
    let inserted = sqlx::query(
        "INSERT INTO elbv2_target_groups (id, name, protocol, port, vpc_id, health_check, attributes, targets, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, '[]', $8)",
    )
    .bind(&group.id)
    .bind(&group.name)
    .bind(&group.protocol)
    .bind(i64::from(group.port))
    .bind(&group.vpc_id)
    .bind(json(&group.health)?)
    .bind(json(&group.attributes)?)
    .bind(now)
    .execute(&mut *tx)
    .await;
    match inserted {
        Err(e) if is_unique_violation(&e) => {
            return Err(ApiError::new(
                Kind::Conflict,
                code::DUPLICATE_TARGET_GROUP_NAME,
                format!("A target group with the same name '{}' exists, but with different settings", group.name),
            ));
        }
        r => r?,
    };
    tags::write_new(&mut tx, &Resource::TargetGroup(group.id.clone()), tags).await?;
    call::commit(tx, &group.id).await?;
    Ok(())
}

/// Every target group, by name.
pub async fn target_groups(db: &Db) -> Result<Vec<TargetGroup>> {
    let now = now_ms();
    let rows: Vec<GroupRow> =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("{SELECT_GROUP} ORDER BY g.name"))).fetch_all(db.reader()).await?;
    rows.into_iter().map(|r| r.into_group(now)).collect()
}

/// The target group `id`, if there is one.
pub async fn target_group(db: &Db, id: &str) -> Result<Option<TargetGroup>> {
    group_row(db.reader(), id).await?.map(|r| r.into_group(now_ms())).transpose()
}

async fn group_in(tx: &mut Tx, now: i64, id: &str) -> Result<TargetGroup> {
    group_row(&mut **tx, id).await?.ok_or_else(|| group_not_found(id))?.into_group(now)
}

async fn group_row<'e>(exec: impl AnyExecutor<'e>, id: &str) -> Result<Option<GroupRow>> {
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!("{SELECT_GROUP} WHERE g.id = $1")))
        .bind(id)
        .fetch_optional(exec)
        .await?)
}

/// What a change does to a target group.
pub enum GroupChange<'a> {
    Health(&'a HealthSettings),
    Attributes(&'a BTreeMap<String, String>),
    /// Register these targets (each an instance that must be running).
    Register(&'a [Target]),
    /// Deregister these targets: each drains until the group's deregistration delay has passed.
    Deregister(&'a [Target]),
}

/// Change the target group `id`, and the native row of the load balancer that uses it, in one transaction.
pub async fn change_target_group(db: &Db, id: &str, change: GroupChange<'_>) -> Result<TargetGroup> {
    let (mut tx, now) = begin(db).await?;
    let mut group = group_in(&mut tx, now, id).await?;
    match change {
        GroupChange::Health(h) => group.health = h.clone(),
        GroupChange::Attributes(a) => group.attributes = a.clone(),
        GroupChange::Register(targets) => register(&mut tx, now, &mut group, targets).await?,
        GroupChange::Deregister(targets) => {
            let delay_s: i64 = group
                .attributes
                .get("deregistration_delay.timeout_seconds")
                .and_then(|v| v.parse().ok())
                .unwrap_or(DEREGISTRATION_DELAY_SECONDS);
            for t in targets {
                let found = group.targets.iter_mut().find(|r| r.id == t.id && r.port == t.port);
                match found {
                    Some(r) if r.draining_until.is_none() => r.draining_until = Some(now + delay_s * 1000),
                    Some(_) => {}
                    None => {
                        return Err(ApiError::bad_request(
                            codes::INVALID_TARGET,
                            format!(
                                "The target '{}' on port {} is not registered in target group '{}'",
                                t.id, t.port, group.name
                            ),
                        ));
                    }
                }
            }
            // A drain of no time is over at once.
            group.targets.retain(|t| t.draining_until.is_none_or(|until| until > now));
        }
    }
    sqlx::query("UPDATE elbv2_target_groups SET health_check = $1, attributes = $2, targets = $3 WHERE id = $4")
        .bind(json(&group.health)?)
        .bind(json(&group.attributes)?)
        .bind(json(&group.targets)?)
        .bind(id)
        .execute(&mut *tx)
        .await?;
    if let Some(lb_id) = &group.lb_id {
        sync(&mut tx, now, lb_id, Some(&group)).await?;
    }
    call::commit(tx, id).await?;
    Ok(group)
}

/// ELB's default deregistration delay, in seconds.
pub const DEREGISTRATION_DELAY_SECONDS: i64 = 300;

/// Add `targets` to `group`: running instances, on the group's own port (the native model forwards a listener
/// to one port), within the native backends quota.
async fn register(tx: &mut Tx, now: i64, group: &mut TargetGroup, targets: &[Target]) -> Result<()> {
    let ids: Vec<String> = targets.iter().map(|t| t.id.clone()).collect();
    let states = load_balancers::instance_states(tx, now, &ids).await?;
    let unknown: Vec<&str> =
        ids.iter().filter(|id| states.get(*id).is_none_or(Option::is_none)).map(String::as_str).collect();
    if !unknown.is_empty() {
        return Err(ApiError::bad_request(
            codes::INVALID_TARGET,
            format!("The following targets are not valid instances: '{}'", unknown.join("', '")),
        ));
    }
    let stopped: Vec<&str> = ids
        .iter()
        .filter(|id| states.get(*id).and_then(Option::as_deref) != Some("running"))
        .map(String::as_str)
        .collect();
    if !stopped.is_empty() {
        return Err(ApiError::bad_request(
            codes::INVALID_TARGET,
            format!(
                "The following targets are not in a running state and cannot be registered: '{}'",
                stopped.join("', '")
            ),
        ));
    }
    for t in targets {
        if t.port != group.port {
            return Err(invalid_configuration(format!(
                "Target '{}' on port {}: fakecloud forwards a target group's traffic to the group's own port ({}); \
                 register the target without a port, or on port {}",
                t.id, t.port, group.port, group.port
            )));
        }
        match group.targets.iter_mut().find(|r| r.id == t.id && r.port == t.port) {
            // Registered again while it drains: back in service.
            Some(r) => r.draining_until = None,
            None => group.targets.push(t.clone()),
        }
    }
    let n = group.registered().count();
    quotas::check_all(
        tx,
        &[Check {
            quota: QuotaName::BackendsPerLoadBalancer,
            counter: None,
            adding: n,
            what: format!("{n} targets in target group {:?}", group.name),
        }],
    )
    .await
}

/// Delete the target group `id`, unless a listener forwards to it.
pub async fn delete_target_group(db: &Db, id: &str) -> Result<()> {
    let (mut tx, now) = begin(db).await?;
    let group = group_in(&mut tx, now, id).await?;
    if group.lb_id.is_some() {
        return Err(ApiError::new(
            Kind::Conflict,
            code::RESOURCE_IN_USE,
            format!("Target group '{}' is currently in use by a listener or a rule", group.name),
        ));
    }
    sqlx::query("DELETE FROM elbv2_target_groups WHERE id = $1").bind(id).execute(&mut *tx).await?;
    tags::forget(&mut tx, id).await?;
    call::commit(tx, id).await?;
    Ok(())
}

/// The listeners of `lb_id` (every NLB's with `None`), by port.
pub async fn listeners(db: &Db, lb_id: Option<&str>) -> Result<Vec<Listener>> {
    let rows = match lb_id {
        Some(id) => {
            sqlx::query_as(sqlx::AssertSqlSafe(format!("{SELECT_LISTENER} WHERE lb_id = $1 ORDER BY port")))
                .bind(id)
                .fetch_all(db.reader())
                .await?
        }
        None => {
            sqlx::query_as(sqlx::AssertSqlSafe(format!("{SELECT_LISTENER} ORDER BY lb_id, port")))
                .fetch_all(db.reader())
                .await?
        }
    };
    Ok(rows)
}

async fn listener_in(tx: &mut Tx, id: &str) -> Result<Listener> {
    let found: Option<Listener> = sqlx::query_as(sqlx::AssertSqlSafe(format!("{SELECT_LISTENER} WHERE id = $1")))
        .bind(id)
        .fetch_optional(&mut **tx)
        .await?;
    found.ok_or_else(|| ApiError::not_found(code::LISTENER_NOT_FOUND, format!("Listener '{id}' not found")))
}

/// What a listener is to be: protocol, port and the target group it forwards to.
pub struct ListenerSpec<'a> {
    pub protocol: &'a str,
    pub port: u16,
    pub target_group_id: &'a str,
}

/// A new listener `id` of the NLB whose ARN ends in `arn_id`, and its tags.
pub async fn create_listener(
    db: &Db,
    arn_id: &str,
    id: &str,
    spec: &ListenerSpec<'_>,
    tags: &BTreeMap<String, String>,
) -> Result<Listener> {
    let (mut tx, now) = begin(db).await?;
    let nlb = nlb_in(&mut tx, now, arn_id).await?;
    check_forward(&mut tx, now, &nlb.lb_id, None, spec).await?;
    let inserted = sqlx::query(
        "INSERT INTO elbv2_listeners (id, lb_id, protocol, port, target_group_id, created_at) VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(id)
    .bind(&nlb.lb_id)
    .bind(spec.protocol)
    .bind(i64::from(spec.port))
    .bind(spec.target_group_id)
    .bind(now)
    .execute(&mut *tx)
    .await;
    match inserted {
        Err(e) if is_unique_violation(&e) => return Err(duplicate_listener(spec.port)),
        r => r?,
    };
    tags::write_new(&mut tx, &Resource::Listener(id.to_string()), tags).await?;
    sync(&mut tx, now, &nlb.lb_id, None).await?;
    let listener = listener_in(&mut tx, id).await?;
    call::commit(tx, &nlb.lb_id).await?;
    Ok(listener)
}

fn duplicate_listener(port: u16) -> ApiError {
    ApiError::new(Kind::Conflict, code::DUPLICATE_LISTENER, format!("A listener already exists on port {port}"))
}

/// Whether `spec` may be a listener of `lb_id` (`id`: the listener it changes): its target group exists, is
/// not another load balancer's and speaks its protocol, and no other listener has its port.
async fn check_forward(tx: &mut Tx, now: i64, lb_id: &str, id: Option<&str>, spec: &ListenerSpec<'_>) -> Result<()> {
    let group = group_in(tx, now, spec.target_group_id).await?;
    if group.lb_id.as_deref().is_some_and(|other| other != lb_id) {
        return Err(ApiError::new(
            Kind::Invalid,
            code::TARGET_GROUP_ASSOCIATION_LIMIT,
            format!("Target group '{}' is already used by another load balancer", group.name),
        ));
    }
    if group.protocol != spec.protocol {
        return Err(ApiError::new(
            Kind::Invalid,
            code::INCOMPATIBLE_PROTOCOLS,
            format!(
                "The listener's protocol {} and target group '{}''s protocol {} are incompatible",
                spec.protocol, group.name, group.protocol
            ),
        ));
    }
    let taken: Option<String> =
        sqlx::query_scalar("SELECT id FROM elbv2_listeners WHERE lb_id = $1 AND port = $2 AND id <> $3")
            .bind(lb_id)
            .bind(i64::from(spec.port))
            .bind(id.unwrap_or(""))
            .fetch_optional(&mut **tx)
            .await?;
    if taken.is_some() {
        return Err(duplicate_listener(spec.port));
    }
    Ok(())
}

/// Change the listener `id`: what `spec` leaves out (`None`) stays.
pub async fn modify_listener(
    db: &Db,
    id: &str,
    protocol: Option<&str>,
    port: Option<u16>,
    target_group_id: Option<&str>,
) -> Result<Listener> {
    let (mut tx, now) = begin(db).await?;
    let current = listener_in(&mut tx, id).await?;
    let current_port =
        u16::try_from(current.port).map_err(|_| ApiError::internal("stored listener port is invalid"))?;
    let spec = ListenerSpec {
        protocol: protocol.unwrap_or(&current.protocol),
        port: port.unwrap_or(current_port),
        target_group_id: target_group_id.unwrap_or(&current.target_group_id),
    };
    check_forward(&mut tx, now, &current.lb_id, Some(id), &spec).await?;
    sqlx::query("UPDATE elbv2_listeners SET protocol = $1, port = $2, target_group_id = $3 WHERE id = $4")
        .bind(spec.protocol)
        .bind(i64::from(spec.port))
        .bind(spec.target_group_id)
        .bind(id)
        .execute(&mut *tx)
        .await?;
    sync(&mut tx, now, &current.lb_id, None).await?;
    let listener = listener_in(&mut tx, id).await?;
    call::commit(tx, &current.lb_id).await?;
    Ok(listener)
}

pub async fn delete_listener(db: &Db, id: &str) -> Result<()> {
    let (mut tx, now) = begin(db).await?;
    let current = listener_in(&mut tx, id).await?;
    sqlx::query("DELETE FROM elbv2_listeners WHERE id = $1").bind(id).execute(&mut *tx).await?;
    tags::forget(&mut tx, id).await?;
    sync(&mut tx, now, &current.lb_id, None).await?;
    call::commit(tx, &current.lb_id).await?;
    Ok(())
}

/// Recompute the native row of the NLB `lb_id` from its listeners and their target groups (see the module's
/// documentation), within the write that changed them.
async fn sync(tx: &mut Tx, now: i64, lb_id: &str, changed: Option<&TargetGroup>) -> Result<()> {
    let listeners: Vec<Listener> =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("{SELECT_LISTENER} WHERE lb_id = $1 ORDER BY port")))
            .bind(lb_id)
            .fetch_all(&mut **tx)
            .await?;
    // The group the transaction has just changed is as it was written: not read again.
    let mut groups: HashMap<String, TargetGroup> = changed.map(|g| (g.id.clone(), g.clone())).into_iter().collect();
    for l in &listeners {
        if !groups.contains_key(&l.target_group_id) {
            groups.insert(l.target_group_id.clone(), group_in(tx, now, &l.target_group_id).await?);
        }
    }
    let group_of = |l: &Listener| {
        groups.get(&l.target_group_id).ok_or_else(|| ApiError::internal("a listener's target group is missing"))
    };
    let mut native = Vec::new();
    for l in &listeners {
        let group = group_of(l)?;
        let port = u16::try_from(l.port).map_err(|_| ApiError::internal("stored listener port is invalid"))?;
        let protocols: &[Protocol] = match l.protocol.as_str() {
            "TCP" => &[Protocol::Tcp],
            "UDP" => &[Protocol::Udp],
            "TCP_UDP" => &[Protocol::Tcp, Protocol::Udp],
            other => return Err(ApiError::internal(format!("stored listener protocol {other} is not served"))),
        };
        native.extend(protocols.iter().map(|&protocol| NativeListener { protocol, port, backend_port: group.port }));
    }
    let candidates = match listeners.first() {
        None => Vec::new(),
        Some(first) => group_of(first)?
            .registered()
            .map(|t| t.id.clone())
            .filter(|id| groups.values().all(|g| g.registered().any(|t| &t.id == id)))
            .collect(),
    };
    // An instance stopped or gone since it was registered stays a target (ELB shows it unhealthy) but is not
    // given to the native row anew, which takes running instances only.
    let current = load_balancers::fetch_in(tx, lb_id, now).await?;
    let states = load_balancers::instance_states(tx, now, &candidates).await?;
    let backends: Vec<String> = candidates
        .into_iter()
        .filter(|id| current.backends.contains(id) || states.get(id).and_then(Option::as_deref) == Some("running"))
        .collect();
    let health_check = listeners.first().map(|l| group_of(l).map(native_health)).transpose()?;
    let req = UpdateLoadBalancerRequest {
        listeners: Some(native),
        backends: Some(backends),
        health_check,
        ..UpdateLoadBalancerRequest::default()
    };
    load_balancers::update_in(tx, now, lb_id, &req, 0).await.map(drop)
}

/// The native health check of a target group's settings: its protocol, port (`traffic-port`: the group's),
/// path and interval. (HTTPS checks are refused when set: the native checks are TCP and HTTP.)
fn native_health(group: &TargetGroup) -> HealthCheck {
    let h = &group.health;
    let http = h.protocol != "TCP";
    HealthCheck {
        protocol: if http { HealthCheckProtocol::Http } else { HealthCheckProtocol::Tcp },
        port: h.port.parse().unwrap_or(group.port),
        path: if http { Some(h.path.clone().unwrap_or_else(|| "/".into())) } else { None },
        interval_seconds: h.interval_seconds,
    }
}

/// The tags of `resources`.
pub async fn tags_of(db: &Db, resources: &[Resource]) -> Result<Vec<BTreeMap<String, String>>> {
    let all = tags::others(db).await?;
    Ok(resources.iter().map(|r| all.get(r.id()).cloned().unwrap_or_default()).collect())
}

/// The zone of NLBs' names in `region`, as AWS names them; the emulator's DNS answers it (`dns.rs`).
pub fn nlb_zone(region: &str) -> String {
    format!("elb.{}.amazonaws.com", region.to_ascii_lowercase())
}

/// An NLB provisions as AWS's does (the native delay), with no listener yet; its own row is written in its native
/// row's insert's transaction.
impl Beside for NewNlb {
    fn immediate(&self) -> bool {
        false
    }

    /// As AWS names an NLB, internal or not: `<name>-<hash>.elb.<region>.amazonaws.com` ([`nlb_zone`]).
    /// cloud-provider-aws tells an NLB's hostname from a classic ELB's by it (`validateServiceAnnotations`,
    /// aws_validations.go L59-60 in v1.37.1).
    fn dns_name(&self, name: &str, hash: &str, _scheme: Scheme, region: &str) -> String {
        format!("{}-{hash}.{}", name.to_ascii_lowercase(), nlb_zone(region))
    }

    fn listeners_min(&self) -> usize {
        0
    }

    async fn write(&self, tx: &mut Tx, id: &str) -> Result<()> {
        rows::insert_load_balancer(tx, id, self).await
    }
}

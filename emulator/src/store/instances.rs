//! Instances: create (with address and quota checks), get, list, and the stop/start/terminate transitions.

use std::future::Future;
use std::net::IpAddr;

use fakecloud_api::limits::NOTICE_SECONDS_MAX;
use fakecloud_api::{
    CreateInstanceRequest, Instance, InstanceList, InstanceState, ListInstancesQuery, Market, QuotaName,
    ReclaimRequest, SPOT_TERMINATION_REASON, codes,
};
use sqlx::any::AnyExecutor;

use super::create::{self, Address};
use super::quotas::Check;
use super::write::begin;
use super::{ipam, lifecycle, security_groups};
use crate::call;
use crate::config::{Config, Pool, Timings};
use crate::db::{Backend, Db, NotDone, Ran, Script, Step, Tx, ms, new_id, now_ms, params, rfc3339};
use crate::error::{ApiError, Result, is_unique_violation};
use crate::validate;

pub const OPERATION_CREATE: &str = "CreateInstance";

/// An instance's state as shown at `$1`: a due transition has happened, and a spot instance past its
/// interruption time is `stopping` until it is terminated. (Only while the termination is still pending: once
/// it is written down, the stored state is the truth.)
macro_rules! state_at {
    () => {
        "(CASE WHEN next_state_at <= $1 THEN next_state WHEN interruption_at <= $1 AND next_state_at IS NOT NULL THEN 'stopping' ELSE state END)"
    };
}
pub(crate) use state_at;

const SELECT: &str = concat!(
    "SELECT seq, id, name, zone, instance_type, market, ",
    state_at!(),
    " AS state, (CASE WHEN next_state_at <= $1 THEN next_state_at WHEN interruption_at <= $1 AND next_state_at IS NOT NULL \
     THEN interruption_at ELSE state_changed_at END) AS state_changed_at, private_ip, ipv6_address, tags, created_at, \
     state_reason, interruption_at FROM instances"
);

#[derive(sqlx::FromRow)]
struct Row {
    seq: i64,
    id: String,
    name: String,
    zone: String,
    instance_type: String,
    market: String,
    state: String,
    state_changed_at: i64,
    private_ip: String,
    ipv6_address: Option<String>,
    tags: String,
    created_at: i64,
    state_reason: Option<String>,
    interruption_at: Option<i64>,
}

impl Row {
    fn into_api(self, region: &str) -> Result<Instance> {
        let corrupt = |what: &str| ApiError::internal(format!("stored instance {} has an invalid {what}", self.id));
        Ok(Instance {
            provider_id: format!("fakecloud://{}/{}", self.zone, self.id),
            state: InstanceState::parse(&self.state).ok_or_else(|| corrupt("state"))?,
            market: if self.market == "spot" { Market::Spot } else { Market::OnDemand },
            private_ip: self.private_ip.parse().map_err(|_| corrupt("private_ip"))?,
            ipv6_address: match &self.ipv6_address {
                Some(a) => Some(a.parse().map_err(|_| corrupt("ipv6_address"))?),
                None => None,
            },
            tags: serde_json::from_str(&self.tags).map_err(|_| corrupt("tags"))?,
            created_at: rfc3339(self.created_at),
            state_changed_at: rfc3339(self.state_changed_at),
            state_reason: self.state_reason,
            interruption_at: self.interruption_at.map(rfc3339),
            region: region.to_string(),
            id: self.id,
            name: self.name,
            zone: self.zone,
            instance_type: self.instance_type,
        })
    }
}

fn not_found(id: &str) -> ApiError {
    ApiError::not_found(codes::INSTANCE_NOT_FOUND, format!("instance {id} does not exist"))
}

async fn fetch<'e>(exec: impl AnyExecutor<'e>, cfg: &Config, id: &str, now: i64) -> Result<Instance> {
    let row: Option<Row> = sqlx::query_as(sqlx::AssertSqlSafe(format!("{SELECT} WHERE id = $2")))
        .bind(now)
        .bind(id)
        .fetch_optional(exec)
        .await?;
    row.ok_or_else(|| not_found(id))?.into_api(&cfg.topology.region)
}

/// Whether an instance that is not terminated has `ip` for its private address: its private DNS name answers
/// while it does.
pub async fn holds_private_address(db: &Db, ip: IpAddr) -> Result<bool> {
    let row: Option<(String,)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT id FROM instances WHERE private_ip = $2 AND {} <> 'terminated' LIMIT 1",
        state_at!()
    )))
    .bind(now_ms())
    .bind(ip.to_string())
    .fetch_optional(db.reader())
    .await?;
    Ok(row.is_some())
}

pub async fn get(db: &Db, cfg: &Config, id: &str) -> Result<Instance> {
    fetch(db.reader(), cfg, id, now_ms()).await
}

/// Returns the instance and whether it was an idempotent replay.
pub async fn create(db: &Db, cfg: &Config, req: &CreateInstanceRequest, key: Option<&str>) -> Result<(Instance, bool)> {
    validate::tags(&req.tags)?;
    let request_json = serde_json::to_string(req).map_err(|e| ApiError::internal(e.to_string()))?;
    let new = NewInstance::new(cfg, req, new_id("i"), OPERATION_CREATE, &[])?;
    create::create(db, &new, key, &request_json).await
}

/// Create as many of `reqs` as the instance quota leaves room for, at least `min` (else `InstanceLimitExceeded`),
/// in one transaction: a face's batch (EC2's `RunInstances`), whose request is `request_json` and whose keys
/// are kept apart from the native API's under `scope`. Each request's name is its instance's ID, as the face
/// chose both. Its tags are the face's to check. Each instance is in the security groups `groups` (each must
/// exist), or, with none, in its VPC's default group.
#[allow(clippy::too_many_arguments)]
pub async fn create_many(
    db: &Db,
    cfg: &Config,
    reqs: &[CreateInstanceRequest],
    groups: &[String],
    min: usize,
    scope: &'static str,
    key: Option<&str>,
    request_json: &str,
) -> Result<(Vec<Instance>, bool)> {
    let mut news =
        reqs.iter().map(|r| NewInstance::new(cfg, r, r.name.clone(), scope, groups)).collect::<Result<Vec<_>>>()?;
    if let Some(lead) = news.first_mut() {
        lead.quota[0].what = format!("launching {min} instances");
    }
    create::create_all(db, &news, min, key, request_json).await
}

/// The IPv6 address the request names beside its IPv4 one, if any ([`check_fixed_addresses`]): leased to `id`.
async fn lease_ipv6(tx: &mut Tx, req: &CreateInstanceRequest, id: &str) -> Result<()> {
    match req.ipv6_address {
        Some(v6) => ipam::lease_fixed(tx, None, IpAddr::V6(v6), id).await,
        None => Ok(()),
    }
}

/// The fixed addresses a create names, checked before its transaction: addresses a machine may have (see
/// [`crate::addresses`]), inside the VPC in `zone`'s subnet, and an IPv6 address only beside an IPv4 one.
fn check_fixed_addresses(req: &CreateInstanceRequest, cfg: &Config, zone: &str, pool: &Pool) -> Result<()> {
    let host = crate::addresses::HostAddresses::read();
    let machine = |field: &str, ip: IpAddr| match crate::addresses::refusal(ip, cfg, &host) {
        Some(why) => Err(ApiError::bad_request(codes::INVALID_ADDRESS, format!("{field}: {why}"))),
        None => Ok(()),
    };
    if let Some(v6) = req.ipv6_address {
        if let Some(ip @ IpAddr::V6(_)) = req.private_ip {
            return Err(ApiError::invalid(
                "ipv6_address",
                format!("private_ip {ip} is IPv6 already; ipv6_address is the IPv6 address beside an IPv4 private_ip"),
            ));
        }
        if v6.to_ipv4_mapped().is_some() {
            return Err(ApiError::invalid("ipv6_address", format!("{v6} is an IPv4-mapped address, not an IPv6 one")));
        }
        machine("ipv6_address", IpAddr::V6(v6))?;
    }
    if let Some(ip) = req.private_ip {
        machine("private_ip", ip)?;
        if matches!(ip, IpAddr::V4(v4) if cfg.topology.vpc.contains(&v4) && !pool.net.contains(&v4)) {
            return Err(ApiError::bad_request(
                codes::INVALID_ADDRESS,
                format!("private_ip: {ip} is in the VPC but not in zone {zone}'s subnet {}", pool.net),
            ));
        }
    }
    Ok(())
}

/// A new instance, as the create writes it (see [`create::NewResource`]).
struct NewInstance<'a> {
    id: String,
    req: &'a CreateInstanceRequest,
    cfg: &'a Config,
    /// The subnet of its zone.
    pool: &'a Pool,
    /// Where its idempotency key is kept: the operation of the face that made it.
    scope: &'static str,
    /// Its security groups; none is its VPC's default group.
    groups: &'a [String],
    quota: [Check; 1],
    zone: String,
    instance_type: String,
    ipv6_address: Option<String>,
    tags: String,
}

impl<'a> NewInstance<'a> {
    /// The instance `req` asks for, checked but for its tags and groups, as `id` in `groups`; its key kept under
    /// `scope`.
    fn new(
        cfg: &'a Config,
        req: &'a CreateInstanceRequest,
        id: String,
        scope: &'static str,
        groups: &'a [String],
    ) -> Result<Self> {
        let topo = &cfg.topology;
        validate::INSTANCE_NAME.check("name", &req.name)?;
        let zone = match &req.zone {
            Some(z) => z.clone(),
            None => topo.zones[0].0.clone(),
        };
        let pool = topo.zone_pool(&zone).ok_or_else(|| {
            ApiError::invalid(
                "zone",
                format!("{zone:?} is not a zone of {}; zones: {}", topo.region, topo.zone_names().join(", ")),
            )
        })?;
        let instance_type = match &req.instance_type {
            Some(t) => t.clone(),
            None => topo.instance_types[0].name.clone(),
        };
        if !topo.instance_types.iter().any(|t| t.name == instance_type) {
            let names: Vec<&str> = topo.instance_types.iter().map(|t| t.name.as_str()).collect();
            return Err(ApiError::invalid(
                "instance_type",
                format!("{instance_type:?} is not offered; types: {}", names.join(", ")),
            ));
        }
        check_fixed_addresses(req, cfg, &zone, pool)?;
        Ok(Self {
            id,
            req,
            cfg,
            pool,
            scope,
            groups,
            quota: [Check {
                quota: QuotaName::Instances,
                counter: Some("instances_live"),
                adding: 1,
                what: format!("creating instance {:?}", req.name),
            }],
            tags: serde_json::to_string(&req.tags).map_err(|e| ApiError::internal(e.to_string()))?,
            ipv6_address: req.ipv6_address.map(|a| a.to_string()),
            zone,
            instance_type,
        })
    }

    fn schedule(&self, now: i64) -> (&'static str, Option<&'static str>, Option<i64>) {
        lifecycle::schedule(now, "pending", "running", self.cfg.timings.boot_delay)
    }
}

impl create::NewResource for NewInstance<'_> {
    type Made = Instance;
    type Found = ();

    fn id(&self) -> &str {
        &self.id
    }

    fn key_scope(&self, _: Option<&()>) -> Option<String> {
        Some(self.scope.to_string())
    }

    /// The next free address of its zone's subnet, unless the request names its addresses.
    fn address(&self) -> Address<'_> {
        if self.req.private_ip.is_none() && self.req.ipv6_address.is_none() {
            Address::Next(self.pool)
        } else {
            Address::Own
        }
    }

    fn quotas(&self) -> &[Check] {
        &self.quota
    }

    fn found(&self, _: &Ran, _: &[Step]) -> Result<()> {
        Ok(())
    }

    fn push_insert(&self, script: &mut Script, now: i64, ip: Option<IpAddr>) -> Step {
        let (state, next_state, next_at) = self.schedule(now);
        script.push(
            "INSERT INTO instances (id, name, zone, instance_type, market, state, next_state, next_state_at, private_ip, ipv6_address, tags, created_at, state_changed_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, COALESCE($9, (SELECT addr FROM ip_leases WHERE owner = $1)), $10, $11, $12, $12)",
            |b| {
                b.bind(self.id.clone())
                    .bind(self.req.name.clone())
                    .bind(self.zone.clone())
                    .bind(self.instance_type.clone())
                    .bind(self.req.market.as_str())
                    .bind(state)
                    .bind(next_state)
                    .bind(next_at)
                    .bind(ip.map(|ip| ip.to_string()))
                    .bind(self.ipv6_address.clone())
                    .bind(self.tags.clone())
                    .bind(now);
            },
        )
    }

    async fn inserted<'a>(
        &'a self,
        tx: &'a mut Tx,
        _: &'a (),
        outcome: std::result::Result<u64, NotDone<'a>>,
    ) -> Result<()> {
        inserted(tx, &self.req.name, outcome).await?;
        // Its own round trip, only for a launch into groups (the AWS face's `SecurityGroupId.N`).
        if !self.groups.is_empty() {
            security_groups::join(tx, &self.id, self.groups).await?;
        }
        Ok(())
    }

    /// The address the request names (checked before the write: [`check_fixed_addresses`]), or the next free one
    /// of the zone's subnet beside a named IPv6 address; and that IPv6 address.
    async fn lease_own(&self, tx: &mut Tx) -> Result<IpAddr> {
        let ip = match self.req.private_ip {
            Some(ip) => {
                let in_vpc = matches!(ip, IpAddr::V4(v4) if self.cfg.topology.vpc.contains(&v4));
                ipam::lease_fixed(tx, in_vpc.then_some(self.pool), ip, &self.id).await?;
                ip
            }
            None => IpAddr::V4(ipam::allocate(tx, self.pool, &self.id).await?),
        };
        lease_ipv6(tx, self.req, &self.id).await?;
        Ok(ip)
    }

    fn made(&self, now: i64, ip: Option<IpAddr>, _: ()) -> Result<Instance> {
        let ip = ip.ok_or_else(|| ApiError::internal("a new instance has no address"))?;
        let row = Row {
            seq: 0,
            id: self.id.clone(),
            name: self.req.name.clone(),
            zone: self.zone.clone(),
            instance_type: self.instance_type.clone(),
            market: self.req.market.as_str().to_string(),
            state: self.schedule(now).0.to_string(),
            state_changed_at: now,
            private_ip: ip.to_string(),
            ipv6_address: self.ipv6_address.clone(),
            tags: self.tags.clone(),
            created_at: now,
            state_reason: None,
            interruption_at: None,
        };
        row.into_api(&self.cfg.topology.region)
    }

    fn fetch<'a>(
        &'a self,
        tx: &'a mut Tx,
        id: &'a str,
        now: i64,
    ) -> impl Future<Output = Result<Instance>> + Send + 'a {
        fetch(&mut **tx, self.cfg, id, now)
    }
}

/// The insert's outcome: a name held by a live instance is a conflict naming the holder.
async fn inserted(tx: &mut Tx, name: &str, outcome: std::result::Result<u64, NotDone<'_>>) -> Result<()> {
    match outcome {
        Ok(_) => Ok(()),
        // The unique index on live names is the check; find the holder only to say who it is.
        Err(NotDone::Failed(e)) if is_unique_violation(e) => {
            let holder: Option<String> =
                sqlx::query_scalar("SELECT id FROM instances WHERE name = $1 AND state <> 'terminated'")
                    .bind(name)
                    .fetch_optional(&mut **tx)
                    .await?;
            Err(ApiError::conflict(
                codes::INSTANCE_NAME_IN_USE,
                format!(
                    "instance name {name:?} is in use by {}; terminate it or pick another name",
                    holder.unwrap_or_default()
                ),
            ))
        }
        Err(e) => Err(e.into()),
    }
}

pub async fn list(db: &Db, cfg: &Config, q: &ListInstancesQuery) -> Result<InstanceList> {
    let page_size = validate::page_size(q.page_size)?;
    let after = validate::page_token(q.page_token.as_deref())?;
    // $1 is now and $2 the page position; filters take $3 onwards (numbered `$N`: what both backends take).
    let mut sql = format!("{SELECT} WHERE seq > $2");
    let mut binds: Vec<String> = Vec::new();
    let mut filter = |sql: &mut String, clause: &str, value: String| {
        binds.push(value);
        sql.push_str(&clause.replace('#', &format!("${}", binds.len() + 2)));
    };
    if let Some(name) = &q.name {
        filter(&mut sql, " AND name = #", name.clone());
    }
    if let Some(zone) = &q.zone {
        filter(&mut sql, " AND zone = #", zone.clone());
    }
    if let Some(state) = q.state {
        filter(
            &mut sql,
            // As shown: a spot instance past its notice is `stopping`, as load balancers judge it too.
            concat!(" AND ", state_at!(), " = #"),
            state.as_str().to_string(),
        );
    }
    if let Some(tag) = &q.tag {
        let (k, v) = match tag.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (tag.as_str(), None),
        };
        validate::TAG_FILTER.check("tag", tag)?;
        let backend = db.backend();
        let tag = format!(" AND {}", backend.tag_value("#"));
        match v {
            Some(v) => {
                filter(&mut sql, &tag, backend.tag_key(k));
                filter(&mut sql, " = #", v.to_string());
            }
            None => filter(&mut sql, &format!("{tag} IS NOT NULL"), backend.tag_key(k)),
        }
    }
    let limit_param = binds.len() + 3;
    sql.push_str(&format!(" ORDER BY seq LIMIT ${limit_param}"));
    let mut query = sqlx::query_as::<_, Row>(sqlx::AssertSqlSafe(sql)).bind(now_ms()).bind(after);
    for b in binds {
        query = query.bind(b);
    }
    let mut rows = query.bind(page_size + 1).fetch_all(db.reader()).await?;
    let next_page_token = if rows.len() as i64 > page_size {
        rows.truncate(page_size as usize);
        rows.last().map(|r| r.seq.to_string())
    } else {
        None
    };
    let items = rows.into_iter().map(|r| r.into_api(&cfg.topology.region)).collect::<Result<_>>()?;
    Ok(InstanceList { items, next_page_token })
}

/// Which of the store's instances a face asks for: every one, or only those with one of some IDs or private
/// addresses (what a call naming them can only be about, read without the rest of the fleet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Among {
    All,
    Ids(Vec<String>),
    PrivateIps(Vec<String>),
}

/// The instances the store holds among `among` (terminated ones until they are forgotten), in the order they
/// were made, each with its position in that order: for a face that filters and pages them itself (the AWS face).
pub async fn all(db: &Db, cfg: &Config, among: &Among) -> Result<Vec<(i64, Instance)>> {
    let (filter, values) = among_filter(among);
    let mut query =
        sqlx::query_as::<_, Row>(sqlx::AssertSqlSafe(format!("{SELECT}{filter} ORDER BY seq"))).bind(now_ms());
    for v in values {
        query = query.bind(v.clone());
    }
    let rows: Vec<Row> = query.fetch_all(db.reader()).await?;
    rows.into_iter().map(|r| Ok((r.seq, r.into_api(&cfg.topology.region)?))).collect()
}

/// [`all`], with the security groups each instance is in and the ID of VPC `vpc_id`'s default group (see
/// [`security_groups::of_instances`]), in the same read: what DescribeInstances shows, on each of its calls.
pub async fn all_with_groups(
    db: &Db,
    cfg: &Config,
    among: &Among,
    vpc_id: &str,
) -> Result<(Vec<(i64, Instance)>, security_groups::InstanceGroups)> {
    let (filter, values) = among_filter(among);
    // One row per instance and group it is in (one with no group if it is in none); each with the default group.
    let sql = format!(
        "SELECT i.*, m.group_id, g.name AS group_name, d.id AS default_id, d.name AS default_name \
         FROM ({SELECT}{filter}) i \
         LEFT JOIN instance_security_groups m ON m.instance_id = i.id \
         LEFT JOIN security_groups g ON g.id = m.group_id \
         LEFT JOIN security_groups d ON d.name = ${vpc} AND d.vpc_id = ${} \
         ORDER BY i.seq, m.group_id",
        values.len() + 3,
        vpc = values.len() + 2,
    );
    let mut query = sqlx::query_as::<_, GroupedRow>(sqlx::AssertSqlSafe(sql)).bind(now_ms());
    for v in values {
        query = query.bind(v.clone());
    }
    let rows = query.bind(security_groups::DEFAULT).bind(vpc_id).fetch_all(db.reader()).await?;
    let mut groups = security_groups::InstanceGroups::default();
    let mut out: Vec<(i64, Instance)> = Vec::new();
    for r in rows {
        if let (Some(id), Some(name)) = (r.default_id, r.default_name) {
            groups.add_default(id, name);
        }
        if let (Some(id), Some(name)) = (r.group_id, r.group_name) {
            groups.add_member(r.row.id.clone(), id, name);
        }
        // The instance's first row; the others only add its groups.
        if out.last().is_none_or(|(seq, _)| *seq != r.row.seq) {
            out.push((r.row.seq, r.row.into_api(&cfg.topology.region)?));
        }
    }
    Ok((out, groups))
}

/// A row of [`all_with_groups`].
#[derive(sqlx::FromRow)]
struct GroupedRow {
    #[sqlx(flatten)]
    row: Row,
    group_id: Option<String>,
    group_name: Option<String>,
    default_id: Option<String>,
    default_name: Option<String>,
}

/// The `WHERE` clause of a read of the instances among `among`, whose parameters are `$2` on, and their values.
fn among_filter(among: &Among) -> (String, &[String]) {
    let (column, values) = match among {
        Among::All => ("", &[][..]),
        Among::Ids(ids) => ("id", &ids[..]),
        Among::PrivateIps(ips) => ("private_ip", &ips[..]),
    };
    let filter = match values.len() {
        0 if column.is_empty() => String::new(),
        // Nothing can be among no values.
        0 => " WHERE 1 = 0".to_string(),
        n => format!(" WHERE {column} IN ({})", params(2, n)),
    };
    (filter, values)
}

/// A state change asked for by the API.
#[derive(Debug, Clone, Copy)]
pub enum Action {
    Stop,
    Start,
    Terminate,
}

impl Action {
    /// From the current state: `Ok(None)` when already there (idempotent), else (state now, next state, delay).
    fn plan(
        self,
        from: InstanceState,
        t: &Timings,
    ) -> Result<Option<(InstanceState, InstanceState, std::time::Duration)>, String> {
        use InstanceState::*;
        match (self, from) {
            (Action::Stop, Pending | Running) => Ok(Some((Stopping, Stopped, t.stop_delay))),
            (Action::Stop, Stopping | Stopped) => Ok(None),
            (Action::Start, Stopped) => Ok(Some((Pending, Running, t.boot_delay))),
            (Action::Start, Pending | Running) => Ok(None),
            (Action::Terminate, ShuttingDown | Terminated) => Ok(None),
            (Action::Terminate, _) => Ok(Some((ShuttingDown, Terminated, t.terminate_delay))),
            (Action::Stop, s) => Err(format!("cannot stop an instance that is {s}")),
            (Action::Start, s) => Err(format!("cannot start an instance that is {s}; wait until it is stopped")),
        }
    }
}

pub async fn transition(db: &Db, cfg: &Config, id: &str, action: Action) -> Result<Instance> {
    let mut changed = transition_all(db, cfg, std::slice::from_ref(&id.to_string()), action).await?;
    changed.pop().map(|(_, inst)| inst).ok_or_else(|| ApiError::internal("a transition answered no instance"))
}

/// [`transition`] for each of `ids`, in one transaction: all of them or, if one is unknown or in a state the
/// action cannot leave, none. Each with the state it was in before.
pub async fn transition_all(
    db: &Db,
    cfg: &Config,
    ids: &[String],
    action: Action,
) -> Result<Vec<(InstanceState, Instance)>> {
    let (mut tx, now) = begin(db).await?;
    let mut changed = Vec::with_capacity(ids.len());
    let mut wrote = false;
    for id in ids {
        let current = fetch(&mut *tx, cfg, id, now).await?;
        let plan = action
            .plan(current.state, &cfg.timings)
            .map_err(|m| ApiError::conflict(codes::INCORRECT_INSTANCE_STATE, format!("instance {id}: {m}")))?;
        let Some((through, next, delay)) = plan else {
            changed.push((current.state, current));
            continue;
        };
        let (state, next_state, next_at) = lifecycle::schedule(now, through.as_str(), next.as_str(), delay);
        sqlx::query(
            "UPDATE instances SET state = $1, next_state = $2, next_state_at = $3, state_changed_at = $4 WHERE id = $5",
        )
        .bind(state)
        .bind(next_state)
        .bind(next_at)
        .bind(now)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        wrote = true;
        if state == InstanceState::Terminated.as_str() {
            ipam::release(&mut tx, id).await?;
        }
        changed.push((current.state, fetch(&mut *tx, cfg, id, now).await?));
    }
    // Each was there already: nothing to commit.
    if !wrote {
        return Ok(changed);
    }
    let audited = match ids {
        [one] => one.as_str(),
        _ => "",
    };
    call::commit(tx, audited).await?;
    Ok(changed)
}

/// Instances an admin action names: by ID, by name (live ones), and every live instance with a tag.
pub struct Selection<'a> {
    pub ids: &'a [String],
    pub names: &'a [String],
    /// `key=value`.
    pub tag: Option<&'a str>,
}

impl Selection<'_> {
    /// It names at least one machine, and its tag is `key=value`; `what` says which ("machines to hang").
    pub fn check(&self, what: &str) -> Result<()> {
        if self.ids.is_empty() && self.names.is_empty() && self.tag.is_none() {
            return Err(ApiError::invalid("instance_ids", format!("name the {what}: instance_ids, names or tag")));
        }
        match self.tag {
            Some(tag) => validate::TAG_PAIR.check("tag", tag),
            None => Ok(()),
        }
    }
}

/// Every check of a [`reclaim`] that needs no instance: the notice, and that it names some. The notice.
pub fn check_reclaim(req: &ReclaimRequest) -> Result<std::time::Duration> {
    let notice = validate::in_range("notice_seconds", req.notice_seconds.unwrap_or(120.0), 0.0, NOTICE_SECONDS_MAX)?;
    Selection { ids: &req.instance_ids, names: &req.names, tag: req.tag.as_deref() }.check("instances to reclaim")?;
    Ok(std::time::Duration::from_secs_f64(notice))
}

/// The instances `chosen` (checked: [`Selection::check`]) names, each once, in the order named. `tag_filter`
/// (SQL over the instances table, `$1` is now) narrows what the tag selects; an ID or name that does not exist
/// is an error.
pub async fn select(
    tx: &mut crate::db::Tx,
    cfg: &Config,
    chosen: &Selection<'_>,
    tag_filter: &str,
    now: i64,
) -> Result<Vec<Instance>> {
    let mut targets: Vec<Instance> = Vec::new();
    for id in chosen.ids {
        targets.push(fetch(&mut **tx, cfg, id, now).await?);
    }
    for name in chosen.names {
        let q = format!("{SELECT} WHERE name = $2 AND state <> 'terminated'");
        let row: Option<Row> =
            sqlx::query_as(sqlx::AssertSqlSafe(q)).bind(now).bind(name).fetch_optional(&mut **tx).await?;
        let row = row.ok_or_else(|| {
            ApiError::not_found(codes::INSTANCE_NOT_FOUND, format!("no live instance named {name:?}"))
        })?;
        targets.push(row.into_api(&cfg.topology.region)?);
    }
    if let Some(tag) = chosen.tag {
        let (k, v) = tag.split_once('=').unwrap_or((tag, ""));
        let backend = Backend::of(tx);
        let q = format!("{SELECT} WHERE {tag_filter} AND state <> 'terminated' AND {} = $3", backend.tag_value("$2"));
        let rows: Vec<Row> = sqlx::query_as(sqlx::AssertSqlSafe(q))
            .bind(now)
            .bind(backend.tag_key(k))
            .bind(v)
            .fetch_all(&mut **tx)
            .await?;
        for r in rows {
            targets.push(r.into_api(&cfg.topology.region)?);
        }
    }
    let mut seen = std::collections::HashSet::new();
    targets.retain(|i| seen.insert(i.id.clone()));
    Ok(targets)
}

/// The IDs of the spot instances random reclamation may draw at `now`: live (pending or running) and not yet
/// interrupted, in the order they were made.
pub async fn spot_candidates(db: &Db, now: i64) -> Result<Vec<String>> {
    Ok(sqlx::query_scalar(
        "SELECT id FROM instances WHERE market = 'spot' AND interruption_at IS NULL \
         AND (CASE WHEN next_state_at <= $1 THEN next_state ELSE state END) IN ('pending', 'running') ORDER BY seq",
    )
    .bind(now)
    .fetch_all(db.reader())
    .await?)
}

/// Reclaim spot instances: an interruption notice now, `stopping` once the notice has run out, then
/// `terminated` after the terminate delay, with the reason `Server.SpotInstanceTermination`. Instances already
/// interrupted are left as they are.
pub async fn reclaim(db: &Db, cfg: &Config, req: &ReclaimRequest) -> Result<Vec<Instance>> {
    let notice = check_reclaim(req)?;
    let chosen = Selection { ids: &req.instance_ids, names: &req.names, tag: req.tag.as_deref() };
    let (mut tx, now) = begin(db).await?;
    let targets = select(&mut tx, cfg, &chosen, "market = 'spot'", now).await?;
    let mut reclaimed = Vec::new();
    for inst in targets {
        if inst.market != Market::Spot {
            return Err(ApiError::bad_request(
                codes::NOT_SPOT,
                format!("instance {} ({}) is on-demand; only spot instances are reclaimed", inst.id, inst.name),
            ));
        }
        if inst.interruption_at.is_none() && matches!(inst.state, InstanceState::Pending | InstanceState::Running) {
            let at = now.saturating_add(ms(notice));
            sqlx::query(
                "UPDATE instances SET interruption_at = $1, state_reason = $2, next_state = 'terminated', next_state_at = $3 WHERE id = $4",
            )
            .bind(at)
            .bind(SPOT_TERMINATION_REASON)
            .bind(at.saturating_add(ms(cfg.timings.terminate_delay)))
            .bind(&inst.id)
            .execute(&mut *tx)
            .await?;
        }
        reclaimed.push(fetch(&mut *tx, cfg, &inst.id, now).await?);
    }
    call::commit(tx, "").await?;
    Ok(reclaimed)
}

/// The private IP and state now of each of the instances `ids` that exists, by ID: where the data plane finds
/// a backend.
pub async fn addresses(db: &Db, ids: &[&str]) -> Result<std::collections::HashMap<String, (IpAddr, InstanceState)>> {
    if ids.is_empty() {
        return Ok(Default::default());
    }
    let sql = format!(
        concat!("SELECT id, private_ip, ", state_at!(), " FROM instances WHERE id IN ({})"),
        params(2, ids.len())
    );
    let mut query = sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(now_ms());
    for id in ids {
        query = query.bind(*id);
    }
    let rows: Vec<(String, String, String)> = query.fetch_all(db.reader()).await?;
    let mut out = std::collections::HashMap::new();
    for (id, ip, state) in rows {
        let corrupt = || ApiError::internal(format!("stored instance {id} has an invalid private_ip or state"));
        // Canonical, as the API takes addresses now: one stored by an older emulator may be IPv4-mapped.
        let ip = fakecloud_api::net::canonical(ip.parse().map_err(|_| corrupt())?);
        let state = InstanceState::parse(&state).ok_or_else(corrupt)?;
        out.insert(id, (ip, state));
    }
    Ok(out)
}

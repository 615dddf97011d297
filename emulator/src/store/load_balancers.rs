//! Load balancers: validation, quotas and the VIP reservation at create; the address is shown once active.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::net::IpAddr;
use std::time::Duration;

use fakecloud_api::limits::{HEALTH_INTERVAL_MAX, HEALTH_INTERVAL_MIN, LISTENERS_MIN};
use fakecloud_api::{
    CreateLoadBalancerRequest, Forwarding, HealthCheck, HealthCheckProtocol, IpMode, ListLoadBalancersQuery, Listener,
    LoadBalancer, LoadBalancerList, LoadBalancerState, QuotaName, Scheme, SessionAffinity, UpdateLoadBalancerRequest,
    codes,
};
use sqlx::Row as _;
use sqlx::any::AnyExecutor;
use sqlx::any::AnyRow;

use super::create::{self, Address};
use super::quotas::Check;
use super::write::begin;
use super::{instances, ipam, lb_provisioning, lifecycle, quotas};
use crate::call;
use crate::config::{Config, Pool};
use crate::db::{Db, NotDone, Ran, Script, Step, Tx, ms, new_id, now_ms, params, rfc3339};
use crate::error::{ApiError, Result, is_unique_violation};
use crate::store::elbv2::rows::forget_load_balancer;
use crate::validate;

pub const OPERATION_CREATE: &str = "CreateLoadBalancer";

/// Every load balancer's columns, as the native API reads them (its state at `$1`); a face's listing reads it as a
/// subquery beside its own table (`classic_elb`).
pub(super) const SELECT: &str = "SELECT seq, id, name, scheme, (CASE WHEN next_state_at <= $1 THEN next_state ELSE state END) AS state, \
     listeners, backends, health_check, source_ranges, session_affinity, forwarding, requested_ip, address, dns_name, created_at, \
     (CASE WHEN next_state_at <= $1 THEN next_state_at ELSE updated_at END) AS updated_at FROM load_balancers";

#[derive(sqlx::FromRow, Clone)]
pub(super) struct Row {
    pub(super) seq: i64,
    pub(super) id: String,
    name: String,
    scheme: String,
    state: String,
    listeners: String,
    backends: String,
    health_check: Option<String>,
    source_ranges: String,
    session_affinity: String,
    forwarding: String,
    requested_ip: Option<String>,
    address: String,
    dns_name: String,
    created_at: i64,
    updated_at: i64,
}

impl Row {
    /// `None` for a load balancer that is already gone (its deletion is due).
    pub(super) fn into_api(self) -> Result<Option<LoadBalancer>> {
        let corrupt =
            |what: &str| ApiError::internal(format!("stored load balancer {} has an invalid {what}", self.id));
        let state = match self.state.as_str() {
            "provisioning" => LoadBalancerState::Provisioning,
            "active" => LoadBalancerState::Active,
            "deleting" => LoadBalancerState::Deleting,
            "deleted" => return Ok(None),
            _ => return Err(corrupt("state")),
        };
        let active = state == LoadBalancerState::Active;
        Ok(Some(LoadBalancer {
            scheme: if self.scheme == "internal" { Scheme::Internal } else { Scheme::InternetFacing },
            state,
            listeners: serde_json::from_str(&self.listeners).map_err(|_| corrupt("listeners"))?,
            backends: serde_json::from_str(&self.backends).map_err(|_| corrupt("backends"))?,
            health_check: self
                .health_check
                .as_deref()
                .map(serde_json::from_str)
                .transpose()
                .map_err(|_| corrupt("health_check"))?,
            source_ranges: serde_json::from_str(&self.source_ranges).map_err(|_| corrupt("source_ranges"))?,
            session_affinity: match self.session_affinity.as_str() {
                "none" => SessionAffinity::None,
                "client-ip" => SessionAffinity::ClientIp,
                _ => return Err(corrupt("session_affinity")),
            },
            forwarding: match self.forwarding.as_str() {
                "proxy" => Forwarding::Proxy,
                "passthrough" => Forwarding::Passthrough,
                _ => return Err(corrupt("forwarding")),
            },
            requested_ip: self
                .requested_ip
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(|_| corrupt("requested_ip"))?,
            address: if active { Some(self.address.parse().map_err(|_| corrupt("address"))?) } else { None },
            dns_name: active.then_some(self.dns_name),
            created_at: rfc3339(self.created_at),
            updated_at: rfc3339(self.updated_at),
            id: self.id,
            name: self.name,
            listener_status: Vec::new(),
            backend_health: Vec::new(),
            ip_mode: IpMode::Vip,
            data_plane: None,
        }))
    }
}

fn not_found(id: &str) -> ApiError {
    ApiError::not_found(codes::LOAD_BALANCER_NOT_FOUND, format!("load balancer {id} does not exist"))
}

async fn fetch<'e>(exec: impl AnyExecutor<'e>, id: &str, now: i64) -> Result<LoadBalancer> {
    let row: Option<Row> = sqlx::query_as(sqlx::AssertSqlSafe(format!("{SELECT} WHERE id = $2")))
        .bind(now)
        .bind(id)
        .fetch_optional(exec)
        .await?;
    row.ok_or_else(|| not_found(id))?.into_api()?.ok_or_else(|| not_found(id))
}

/// The load balancer `id` as a write sees it at `now`.
pub(super) async fn fetch_in(tx: &mut Tx, id: &str, now: i64) -> Result<LoadBalancer> {
    fetch(&mut **tx, id, now).await
}

pub async fn get(db: &Db, id: &str) -> Result<LoadBalancer> {
    fetch(db.reader(), id, now_ms()).await
}

fn json<T: serde::Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| ApiError::internal(e.to_string()))
}

/// `min`: the native API's [`LISTENERS_MIN`]; classic ELB's load balancers may have none (its
/// DeleteLoadBalancerListeners may remove the last, and the data plane then serves no port).
fn check_listeners(listeners: &[Listener], min: usize) -> Result<()> {
    if listeners.len() < min {
        return Err(ApiError::invalid("listeners", format!("at least {min} listener is needed")));
    }
    let mut seen = HashSet::new();
    for (i, l) in listeners.iter().enumerate() {
        validate::port(&format!("listeners[{i}].port"), l.port)?;
        validate::port(&format!("listeners[{i}].backend_port"), l.backend_port)?;
        if !seen.insert((l.protocol, l.port)) {
            return Err(ApiError::invalid(
                &format!("listeners[{i}]"),
                format!("{:?} port {} is listed twice", l.protocol, l.port),
            ));
        }
    }
    Ok(())
}

fn check_health(hc: &HealthCheck) -> Result<()> {
    validate::port("health_check.port", hc.port)?;
    validate::in_range("health_check.interval_seconds", hc.interval_seconds, HEALTH_INTERVAL_MIN, HEALTH_INTERVAL_MAX)?;
    match (hc.protocol, &hc.path) {
        (HealthCheckProtocol::Http, Some(p)) => validate::HEALTH_CHECK_PATH.check("health_check.path", p),
        (HealthCheckProtocol::Http, None) => {
            Err(ApiError::invalid("health_check.path", "HTTP health checks need a path starting with '/'"))
        }
        (HealthCheckProtocol::Tcp, Some(_)) => {
            Err(ApiError::invalid("health_check.path", "only HTTP health checks take a path"))
        }
        (HealthCheckProtocol::Tcp, None) => Ok(()),
    }
}

/// Source ranges as stored: each a network (host bits cleared, as Kubernetes' own parsing of
/// `loadBalancerSourceRanges` takes them: `127.0.0.1/8` is `127.0.0.0/8`), IPv4-mapped ones as IPv4. Load
/// balancers' addresses are IPv4, so their clients are: a list without an IPv4 range would refuse every one.
fn check_source_ranges(ranges: &[String]) -> Result<Vec<String>> {
    let mut nets = Vec::with_capacity(ranges.len());
    for (i, r) in ranges.iter().enumerate() {
        nets.push(validate::cidr(&format!("source_ranges[{i}]"), r, false)?.trunc());
    }
    if !nets.is_empty() && !nets.iter().any(|n| matches!(n, ipnet::IpNet::V4(_))) {
        return Err(ApiError::invalid(
            "source_ranges",
            format!(
                "{} holds no IPv4 range, and load balancers' addresses are IPv4: every client would be refused; \
                 add the IPv4 ranges to allow (0.0.0.0/0 for every client), or leave source_ranges empty",
                validate::quoted(&ranges.join(","))
            ),
        ));
    }
    Ok(nets.iter().map(ToString::to_string).collect())
}

/// Backends must be distinct running instances, except those already `registered`: ELB keeps a target whose
/// instance has stopped since (unused), and refuses to register one that is not running.
async fn check_backends(tx: &mut Tx, now: i64, backends: &[String], registered: &[String]) -> Result<()> {
    let mut script = Script::new();
    let states = push_backend_states(&mut script, backends, now);
    judge_backends(backends, tx.run(script).await.rows(states)?, registered)
}

/// Each of `ids` and its instance's state at `now` (`None`: no such instance), for the AWS face's targets.
pub(super) async fn instance_states(tx: &mut Tx, now: i64, ids: &[String]) -> Result<HashMap<String, Option<String>>> {
    let mut script = Script::new();
    let states = push_backend_states(&mut script, ids, now);
    let rows = tx.run(script).await;
    Ok(rows.rows(states)?.iter().map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).collect::<Result<_, sqlx::Error>>()?)
}

/// Each backend and its instance's state at `now` (NULL: no such instance), pushed onto a write's list: see
/// [`judge_backends`].
fn push_backend_states(script: &mut Script, backends: &[String], now: i64) -> Step {
    if backends.is_empty() {
        return script.push("SELECT NULL, NULL WHERE 1 = 0", |_| {});
    }
    // (`column1`: what both backends call a VALUES list's column.)
    let values = params(2, backends.len()).replace(", ", "), (");
    let sql = format!(
        concat!(
            "SELECT j.column1, (SELECT ",
            instances::state_at!(),
            " FROM instances WHERE id = j.column1) FROM (VALUES ({})) AS j"
        ),
        values
    );
    script.push(&sql, |b| {
        b.bind(now);
        for id in backends {
            b.bind(id.as_str());
        }
    })
}

fn invalid_target(i: usize, problem: String) -> ApiError {
    ApiError::bad_request(codes::INVALID_TARGET, format!("backends[{i}]: {problem}"))
}

/// The first backend listed twice, missing, or newly registered while not running (the rows of
/// [`push_backend_states`]), in the request's order.
fn judge_backends(backends: &[String], states: &[AnyRow], registered: &[String]) -> Result<()> {
    let states: HashMap<String, Option<String>> =
        states.iter().map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).collect::<Result<_, sqlx::Error>>()?;
    let mut seen = HashSet::new();
    for (i, b) in backends.iter().enumerate() {
        if !seen.insert(b) {
            return Err(invalid_target(i, format!("{b} is listed twice")));
        }
        match states.get(b).and_then(Option::as_deref) {
            None => return Err(invalid_target(i, format!("instance {b} does not exist"))),
            Some("running") => {}
            Some(_) if registered.contains(b) => {}
            Some(state) => {
                return Err(invalid_target(
                    i,
                    format!(
                        "instance {b} is {state}, not running, and cannot be registered; start it, or leave it out \
                         until it runs"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The checks of the per-load-balancer quotas for a set of listeners, backends and source ranges.
fn per_lb_checks(name: &str, listeners: usize, backends: usize, ranges: usize) -> [Check; 3] {
    let what = format!("load balancer {name:?}");
    let check = |quota, n, items| Check { quota, counter: None, adding: n, what: format!("{n} {items} on {what}") };
    [
        check(QuotaName::ListenersPerLoadBalancer, listeners, "listeners"),
        check(QuotaName::BackendsPerLoadBalancer, backends, "backends"),
        check(QuotaName::SourceRangesPerLoadBalancer, ranges, "source ranges"),
    ]
}

fn pool_for(cfg: &Config, scheme: Scheme) -> &Pool {
    match scheme {
        Scheme::InternetFacing => &cfg.topology.public,
        Scheme::Internal => &cfg.topology.internal_lb,
    }
}

/// The DNS zone the native API names load balancers in (the emulator's DNS answers it, `dns.rs`).
pub const LB_ZONE: &str = "lb.fakecloud.test";

/// Returns the load balancer and whether it was an idempotent replay.
pub async fn create(
    db: &Db,
    cfg: &Config,
    req: &CreateLoadBalancerRequest,
    key: Option<&str>,
) -> Result<(LoadBalancer, bool)> {
    create_with(db, cfg, req, key, &Native).await
}

/// What a face writes beside a new load balancer's row, in its create's transaction, and whether the load
/// balancer is there at once: the native API writes nothing and waits the provisioning delay; an AWS face may
/// keep its own record of what the native model has no column for (`classic_elb`).
pub trait Beside: Sync {
    /// Whether the load balancer skips `provisioning` (classic ELB has no such state: AWS answers it at once).
    fn immediate(&self) -> bool;

    /// The DNS name of load balancer `name` (`hash`: a part of its ID) of `scheme` in `region`: the native API's
    /// `<name>-<hash>.<region>.lb.fakecloud.test` ([`LB_ZONE`]), unless the face names it as its cloud does.
    fn dns_name(&self, name: &str, hash: &str, _scheme: Scheme, region: &str) -> String {
        format!("{}-{hash}.{region}.{LB_ZONE}", name.to_ascii_lowercase())
    }

    /// The fewest listeners it is made with: the native API's [`LISTENERS_MIN`]; none for an NLB, which AWS makes
    /// before its listeners.
    fn listeners_min(&self) -> usize {
        LISTENERS_MIN
    }

    /// Write its record of the load balancer `id`, just inserted.
    fn write<'a>(&'a self, tx: &'a mut Tx, id: &'a str) -> impl Future<Output = Result<()>> + Send + 'a;
}

/// The native API's: nothing beside the row, and the provisioning delay.
pub struct Native;

impl Beside for Native {
    fn immediate(&self) -> bool {
        false
    }

    async fn write(&self, _: &mut Tx, _: &str) -> Result<()> {
        Ok(())
    }
}

/// Drop what the faces keep of the load balancer `id`, in the transaction that deletes its row.
async fn forget_beside(tx: &mut Tx, id: &str) -> Result<()> {
    for (table, column) in lifecycle::LB_BESIDE {
        sqlx::query(sqlx::AssertSqlSafe(format!("DELETE FROM {table} WHERE {column} = $1")))
            .bind(id)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}

/// [`create`], with what `beside` writes in the same transaction.
pub async fn create_with<B: Beside>(
    db: &Db,
    cfg: &Config,
    req: &CreateLoadBalancerRequest,
    key: Option<&str>,
    beside: &B,
) -> Result<(LoadBalancer, bool)> {
    validate::NAME.check("name", &req.name)?;
    check_listeners(&req.listeners, beside.listeners_min())?;
    let source_ranges = check_source_ranges(&req.source_ranges)?;
    if let Some(hc) = &req.health_check {
        check_health(hc)?;
    }
    let request_json = json(req)?;
    let mut quota = vec![Check {
        quota: QuotaName::LoadBalancers,
        counter: Some("lbs_live"),
        adding: 1,
        what: format!("creating load balancer {:?}", req.name),
    }];
    quota.extend(per_lb_checks(&req.name, req.listeners.len(), req.backends.len(), req.source_ranges.len()));
    if req.scheme == Scheme::InternetFacing {
        quota.push(Check {
            quota: QuotaName::PublicIps,
            counter: Some("lbs_public"),
            adding: 1,
            what: format!("a public address for {:?}", req.name),
        });
    }
    let id = new_id("lb");
    let dns_name = beside.dns_name(&req.name, &id[3..11], req.scheme, &cfg.topology.region);
    let row = Row {
        seq: 0,
        id,
        name: req.name.clone(),
        scheme: req.scheme.as_str().to_string(),
        state: String::new(),
        listeners: json(&req.listeners)?,
        backends: json(&req.backends)?,
        health_check: req.health_check.as_ref().map(json).transpose()?,
        source_ranges: json(&source_ranges)?,
        session_affinity: req.session_affinity.as_str().to_string(),
        forwarding: req.forwarding.as_str().to_string(),
        requested_ip: req.requested_ip.map(|ip| ip.to_string()),
        address: String::new(),
        dns_name,
        created_at: 0,
        updated_at: 0,
    };
    let provision_delay =
        if beside.immediate() { Duration::ZERO } else { lb_provisioning::delay_for(db, cfg, &req.name).await? };
    let new = NewLoadBalancer { row, req, pool: pool_for(cfg, req.scheme), quota, provision_delay, beside };
    create::create(db, &new, key, &request_json).await
}

/// A new load balancer, as the create writes it (see [`create::NewResource`]): its row's request fields.
struct NewLoadBalancer<'a, B> {
    row: Row,
    req: &'a CreateLoadBalancerRequest,
    /// Where its address comes from: the public pool or the internal load balancers' subnet.
    pool: &'a Pool,
    quota: Vec<Check>,
    /// How long it stays `provisioning` (see [`lb_provisioning`]).
    provision_delay: Duration,
    beside: &'a B,
}

impl<B> NewLoadBalancer<'_, B> {
    /// Its state at `now`, as the provisioning delay gives it.
    fn schedule(&self, now: i64) -> (&'static str, Option<&'static str>, Option<i64>) {
        lifecycle::schedule(now, "provisioning", "active", self.provision_delay)
    }
}

impl<B: Beside> create::NewResource for NewLoadBalancer<'_, B> {
    type Made = LoadBalancer;
    type Found = ();

    fn id(&self) -> &str {
        &self.row.id
    }

    fn key_scope(&self, _: Option<&()>) -> Option<String> {
        Some(OPERATION_CREATE.to_string())
    }

    /// The next free address of its pool, unless the request names one.
    fn address(&self) -> Address<'_> {
        if self.req.requested_ip.is_some() { Address::Own } else { Address::Next(self.pool) }
    }

    fn quotas(&self) -> &[Check] {
        &self.quota
    }

    fn push_checks(&self, script: &mut Script, now: i64) -> Vec<Step> {
        vec![push_backend_states(script, &self.req.backends, now)]
    }

    fn found(&self, _: &Ran, _: &[Step]) -> Result<()> {
        Ok(())
    }

    fn judge(&self, _: &(), ran: &Ran, checks: &[Step]) -> Result<()> {
        let states = checks.first().ok_or_else(|| ApiError::internal("the backends' check is missing"))?;
        judge_backends(&self.req.backends, ran.rows(*states)?, &[])
    }

    /// Its insert: the request's fields, created at `now` in the state the provisioning delay gives, at
    /// `address` or, with none, the one just leased to it (none leased: the insert fails on the missing address).
    fn push_insert(&self, script: &mut Script, now: i64, address: Option<IpAddr>) -> Step {
        let (state, next_state, next_at) = self.schedule(now);
        let lb = &self.row;
        script.push(
            "INSERT INTO load_balancers (id, name, scheme, state, next_state, next_state_at, listeners, backends, health_check, \
             source_ranges, requested_ip, address, dns_name, created_at, updated_at, session_affinity, forwarding) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, COALESCE($12, (SELECT addr FROM ip_leases WHERE owner = $1)), $13, $14, $14, $15, $16)",
            |b| {
                b.bind(lb.id.clone())
                    .bind(lb.name.clone())
                    .bind(lb.scheme.clone())
                    .bind(state)
                    .bind(next_state)
                    .bind(next_at)
                    .bind(lb.listeners.clone())
                    .bind(lb.backends.clone())
                    .bind(lb.health_check.clone())
                    .bind(lb.source_ranges.clone())
                    .bind(lb.requested_ip.clone())
                    .bind(address.map(|a| a.to_string()))
                    .bind(lb.dns_name.clone())
                    .bind(now)
                    .bind(lb.session_affinity.clone())
                    .bind(lb.forwarding.clone());
            },
        )
    }

    /// A name in use is a conflict.
    async fn inserted<'a>(
        &'a self,
        _: &'a mut Tx,
        _: &'a (),
        outcome: std::result::Result<u64, NotDone<'a>>,
    ) -> Result<()> {
        match outcome {
            Ok(_) => Ok(()),
            Err(NotDone::Failed(e)) if is_unique_violation(e) => Err(ApiError::conflict(
                codes::LOAD_BALANCER_ALREADY_EXISTS,
                format!("load balancer name {:?} is in use", self.row.name),
            )),
            Err(e) => Err(e.into()),
        }
    }

    /// The address the request names, from its scheme's pool.
    async fn lease_own(&self, tx: &mut Tx) -> Result<IpAddr> {
        let ip = self.req.requested_ip.ok_or_else(|| ApiError::internal("no requested_ip to lease"))?;
        ipam::lease_fixed(tx, Some(self.pool), ip, &self.row.id).await.map_err(|e| match e.code.as_ref() {
            codes::INVALID_ADDRESS => ApiError::bad_request(
                codes::INVALID_ADDRESS,
                format!("requested_ip: {ip} is not in the {} pool {}", self.req.scheme.as_str(), self.pool.net),
            ),
            _ => e,
        })?;
        Ok(ip)
    }

    fn made(&self, now: i64, address: Option<IpAddr>, _: ()) -> Result<LoadBalancer> {
        let address = address.ok_or_else(|| ApiError::internal("a new load balancer has no address"))?;
        let row = Row {
            state: self.schedule(now).0.to_string(),
            address: address.to_string(),
            created_at: now,
            updated_at: now,
            ..self.row.clone()
        };
        row.into_api()?.ok_or_else(|| ApiError::internal("a new load balancer cannot be deleted"))
    }

    fn fetch<'a>(
        &'a self,
        tx: &'a mut Tx,
        id: &'a str,
        now: i64,
    ) -> impl Future<Output = Result<LoadBalancer>> + Send + 'a {
        fetch(&mut **tx, id, now)
    }

    fn write_beside<'a>(&'a self, tx: &'a mut Tx) -> impl Future<Output = Result<()>> + Send + 'a {
        self.beside.write(tx, &self.row.id)
    }
}

pub async fn update(db: &Db, id: &str, req: &UpdateLoadBalancerRequest) -> Result<LoadBalancer> {
    let (mut tx, now) = begin(db).await?;
    let lb = update_in(&mut tx, now, id, req, LISTENERS_MIN).await?;
    call::commit(tx, id).await?;
    Ok(lb)
}

/// [`update`] in the write `tx` begun at `now`, which the caller commits (a face that changes its own record of
/// the load balancer in the same transaction); `listeners_min` as [`check_listeners`] takes it.
pub async fn update_in(
    tx: &mut Tx,
    now: i64,
    id: &str,
    req: &UpdateLoadBalancerRequest,
    listeners_min: usize,
) -> Result<LoadBalancer> {
    if let Some(l) = &req.listeners {
        check_listeners(l, listeners_min)?;
    }
    let source_ranges = req.source_ranges.as_deref().map(check_source_ranges).transpose()?;
    if let Some(hc) = &req.health_check {
        check_health(hc)?;
    }
    let current = fetch(&mut **tx, id, now).await?;
    if current.state == LoadBalancerState::Deleting {
        return Err(ApiError::conflict(
            codes::INCORRECT_LOAD_BALANCER_STATE,
            format!("load balancer {id} is being deleted"),
        ));
    }
    if let Some(b) = &req.backends {
        check_backends(tx, now, b, &current.backends).await?;
    }
    let listeners = req.listeners.as_ref().unwrap_or(&current.listeners);
    let backends = req.backends.as_ref().unwrap_or(&current.backends);
    let ranges = source_ranges.as_ref().unwrap_or(&current.source_ranges);
    let health = req.health_check.as_ref().or(current.health_check.as_ref());
    let affinity = req.session_affinity.unwrap_or(current.session_affinity);
    let forwarding = req.forwarding.unwrap_or(current.forwarding);
    quotas::check_all(tx, &per_lb_checks(&current.name, listeners.len(), backends.len(), ranges.len())).await?;
    sqlx::query(
        "UPDATE load_balancers SET listeners = $1, backends = $2, source_ranges = $3, health_check = $4, updated_at = $5, \
         session_affinity = $7, forwarding = $8 WHERE id = $6",
    )
    .bind(json(listeners)?)
    .bind(json(backends)?)
    .bind(json(ranges)?)
    .bind(health.map(json).transpose()?)
    .bind(now)
    .bind(id)
    .bind(affinity.as_str())
    .bind(forwarding.as_str())
    .execute(&mut **tx)
    .await?;
    fetch(&mut **tx, id, now).await
}

pub async fn delete(db: &Db, cfg: &Config, id: &str) -> Result<LoadBalancer> {
    let (mut tx, now) = begin(db).await?;
    let current = fetch(&mut *tx, id, now).await?;
    if current.state == LoadBalancerState::Deleting {
        return Ok(current);
    }
    // An NLB's listeners and own row go now, whichever face deletes it: its target groups are free at once, as
    // AWS's are once DeleteLoadBalancer answers.
    forget_load_balancer(&mut tx, id).await?;
    if cfg.timings.lb_delete_delay.is_zero() {
        sqlx::query("DELETE FROM load_balancers WHERE id = $1").bind(id).execute(&mut *tx).await?;
        ipam::release(&mut tx, id).await?;
        forget_beside(&mut tx, id).await?;
    } else {
        sqlx::query(
            "UPDATE load_balancers SET state = 'deleting', next_state = 'deleted', next_state_at = $1, updated_at = $2 WHERE id = $3",
        )
        .bind(now.saturating_add(ms(cfg.timings.lb_delete_delay)))
        .bind(now)
        .bind(id)
        .execute(&mut *tx)
        .await?;
    }
    // The row may already be due for removal (zero delay); show it as deleting either way.
    let mut lb = current;
    lb.state = LoadBalancerState::Deleting;
    lb.address = None;
    lb.dns_name = None;
    lb.updated_at = rfc3339(now);
    call::commit(tx, id).await?;
    Ok(lb)
}

pub async fn list(db: &Db, q: &ListLoadBalancersQuery) -> Result<LoadBalancerList> {
    let page_size = validate::page_size(q.page_size)?;
    let after = validate::page_token(q.page_token.as_deref())?;
    let now = now_ms();
    let rows: Vec<Row> = match &q.name {
        Some(name) => {
            sqlx::query_as(sqlx::AssertSqlSafe(format!("{SELECT} WHERE seq > $2 AND name = $3 ORDER BY seq LIMIT $4")))
                .bind(now)
                .bind(after)
                .bind(name)
                .bind(page_size + 1)
                .fetch_all(db.reader())
                .await?
        }
        None => {
            sqlx::query_as(sqlx::AssertSqlSafe(format!("{SELECT} WHERE seq > $2 ORDER BY seq LIMIT $3")))
                .bind(now)
                .bind(after)
                .bind(page_size + 1)
                .fetch_all(db.reader())
                .await?
        }
    };
    let more = rows.len() as i64 > page_size;
    let mut items = Vec::new();
    let mut last_seq = None;
    for row in rows.into_iter().take(page_size as usize) {
        last_seq = Some(row.seq);
        if let Some(lb) = row.into_api()? {
            items.push(lb);
        }
    }
    Ok(LoadBalancerList { items, next_page_token: if more { last_seq.map(|s| s.to_string()) } else { None } })
}

/// The ID of the load balancer named `name`, unless it is being deleted: what a face that names load balancers by
/// their names (classic ELB) is about.
pub async fn id_named(db: &Db, name: &str) -> Result<Option<String>> {
    Ok(sqlx::query_scalar("SELECT id FROM load_balancers WHERE name = $1 AND state <> 'deleting'")
        .bind(name)
        .fetch_optional(db.reader())
        .await?)
}

/// The address of the load balancer named `dns_name`, once it is active (its name answers from then on).
pub async fn address_of_name(db: &Db, dns_name: &str) -> Result<Option<IpAddr>> {
    let row: Option<Row> = sqlx::query_as(sqlx::AssertSqlSafe(format!("{SELECT} WHERE dns_name = $2")))
        .bind(now_ms())
        .bind(dns_name)
        .fetch_optional(db.reader())
        .await?;
    Ok(row.map(Row::into_api).transpose()?.flatten().and_then(|lb| lb.address))
}

/// Every active load balancer, oldest first: what the data plane serves.
pub async fn active(db: &Db) -> Result<Vec<LoadBalancer>> {
    let rows: Vec<Row> = sqlx::query_as(sqlx::AssertSqlSafe(format!("{SELECT} ORDER BY seq")))
        .bind(now_ms())
        .fetch_all(db.reader())
        .await?;
    let mut items = Vec::new();
    for row in rows {
        if let Some(lb) = row.into_api()?
            && lb.state == LoadBalancerState::Active
        {
            items.push(lb);
        }
    }
    Ok(items)
}

//! Classic Elastic Load Balancing's record of a load balancer (issue #50): what the AWS face's
//! `elasticloadbalancing` 2012-06-01 shows and the native model has no column for (subnets, security groups,
//! listeners' classic protocols, the health check's timeout and thresholds, attributes, policies), in
//! `classic_load_balancers` beside the load balancer's native row. The load balancer itself is that row, made,
//! changed and deleted through [`load_balancers`]: a change to both is one transaction. A load balancer without
//! a record (made natively) reads as classic's defaults.

use std::collections::BTreeMap;

use fakecloud_api::{CreateLoadBalancerRequest, LoadBalancer, Scheme, UpdateLoadBalancerRequest, codes};
use serde::{Deserialize, Serialize};
use sqlx::any::AnyExecutor;

use super::load_balancers::{self, Beside, Row};
use super::security_groups;
use super::tags::{self, Resource};
use super::write::begin;
use crate::call;
use crate::config::Config;
use crate::db::{Db, Tx, now_ms, params};
use crate::error::{ApiError, Result};

/// What classic ELB keeps of one load balancer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Classic {
    /// The subnets it was given (or its zones'), in order.
    pub subnets: Vec<String>,
    /// Its security groups: the security groups' own link to load balancers (`security_groups`), which the data
    /// plane enforces, read and written with the record.
    pub security_groups: Vec<String>,
    pub extras: Extras,
}

/// The rest of the record, one JSON column.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Extras {
    /// Each listener's classic protocols and policies, by its load balancer port.
    pub listeners: BTreeMap<u16, ListenerMeta>,
    pub health_check: Option<HealthMeta>,
    pub attributes: Attributes,
    pub policies: Vec<Policy>,
    /// The policies of each instance port (ProxyProtocolPolicyType's).
    pub backend_policies: BTreeMap<u16, Vec<String>>,
}

/// A listener as classic ELB was given it: the native listener has only TCP or UDP.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ListenerMeta {
    pub protocol: String,
    pub instance_protocol: String,
    #[serde(default)]
    pub policies: Vec<String>,
}

/// What a classic health check has beside the native one (its protocol, port, path and interval).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HealthMeta {
    /// As given (`SSL:443` is checked as `TCP:443`).
    pub target: String,
    pub timeout: u32,
    pub healthy_threshold: u32,
    pub unhealthy_threshold: u32,
}

/// The load balancer's attributes, each structure as last given (ModifyLoadBalancerAttributes replaces the ones
/// it names).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Attributes {
    pub cross_zone: bool,
    pub access_log: AccessLog,
    pub connection_draining: ConnectionDraining,
    pub idle_timeout: u32,
    pub additional: Vec<(String, String)>,
}

/// AWS's defaults for a load balancer made through the API (the ELB guide's "Configure your Classic Load
/// Balancer": cross-zone off, connection draining off with 300 seconds, an idle timeout of 60 seconds).
impl Default for Attributes {
    fn default() -> Self {
        Self {
            cross_zone: false,
            access_log: AccessLog::default(),
            connection_draining: ConnectionDraining { enabled: false, timeout: Some(300) },
            idle_timeout: 60,
            additional: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AccessLog {
    pub enabled: bool,
    pub s3_bucket_name: Option<String>,
    pub emit_interval: Option<u32>,
    pub s3_bucket_prefix: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConnectionDraining {
    pub enabled: bool,
    pub timeout: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    pub name: String,
    pub type_name: String,
    pub attributes: Vec<(String, String)>,
}

/// A load balancer as classic ELB lists it: the native one, its record, and its place in the listing.
#[derive(Debug, Clone)]
pub struct Listed {
    pub seq: i64,
    pub lb: LoadBalancer,
    pub classic: Classic,
}

#[derive(sqlx::FromRow)]
struct ListedRow {
    #[sqlx(flatten)]
    lb: Row,
    subnets: Option<String>,
    extras: Option<String>,
}

fn corrupt(id: &str) -> ApiError {
    ApiError::internal(format!("the classic ELB record of load balancer {id} is invalid"))
}

fn json<T: Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| ApiError::internal(e.to_string()))
}

impl ListedRow {
    fn into_listed(self) -> Result<Option<Listed>> {
        let (seq, id) = (self.lb.seq, self.lb.id.clone());
        let Some(lb) = self.lb.into_api()? else { return Ok(None) };
        let classic = match (self.subnets, self.extras) {
            (Some(subnets), Some(extras)) => Classic {
                subnets: serde_json::from_str(&subnets).map_err(|_| corrupt(&id))?,
                security_groups: Vec::new(),
                extras: serde_json::from_str(&extras).map_err(|_| corrupt(&id))?,
            },
            _ => Classic::default(),
        };
        Ok(Some(Listed { seq, lb, classic }))
    }
}

/// The not-found classic ELB answers for `name` (its words, and the native code that becomes its own).
pub fn not_found(name: &str) -> ApiError {
    ApiError::not_found(codes::LOAD_BALANCER_NOT_FOUND, format!("There is no ACTIVE Load Balancer named '{name}'"))
}

/// Load balancers as classic ELB lists them, the one query every classic read and write goes through: those
/// named (`names` empty: all) past `after` (a `seq`), oldest first, at most `limit`. Every load balancer of the
/// native table is classic's (the native model is classic's), but one being deleted (AWS's is gone from the API
/// at once) and the ELBv2 face's NLBs. Their security groups are left for [`with_groups`].
async fn select<'e>(exec: impl AnyExecutor<'e>, names: &[String], after: i64, limit: i64) -> Result<Vec<Listed>> {
    let now = now_ms();
    let named = if names.is_empty() { String::new() } else { format!(" AND l.name IN ({})", params(4, names.len())) };
    let sql = format!(
        "SELECT l.*, c.subnets, c.extras FROM ({}) AS l \
         LEFT JOIN classic_load_balancers c ON c.load_balancer_id = l.id \
         WHERE l.state IN ('provisioning', 'active') AND l.seq > $2{named} \
         AND l.id NOT IN (SELECT lb_id FROM elbv2_load_balancers) ORDER BY l.seq LIMIT $3",
        load_balancers::SELECT
    );
    let mut q = sqlx::query_as::<_, ListedRow>(sqlx::AssertSqlSafe(sql)).bind(now).bind(after).bind(limit);
    for name in names {
        q = q.bind(name);
    }
    let rows = q.fetch_all(exec).await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        out.extend(row.into_listed()?);
    }
    Ok(out)
}

/// `listed` with their security groups.
async fn with_groups(db: &Db, mut listed: Vec<Listed>) -> Result<Vec<Listed>> {
    let ids: Vec<String> = listed.iter().map(|l| l.lb.id.clone()).collect();
    let mut groups = security_groups::of_load_balancers(db, &ids).await?;
    for l in &mut listed {
        l.classic.security_groups = groups.remove(&l.lb.id).unwrap_or_default();
    }
    Ok(listed)
}

/// A page of load balancers (see [`select`]).
pub async fn list(db: &Db, names: &[String], after: i64, limit: i64) -> Result<Vec<Listed>> {
    with_groups(db, select(db.reader(), names, after, limit).await?).await
}

/// The load balancer named `name`.
pub async fn get(db: &Db, name: &str) -> Result<Listed> {
    let names = [name.to_string()];
    let found = with_groups(db, select(db.reader(), &names, 0, 1).await?).await?;
    found.into_iter().next().ok_or_else(|| not_found(name))
}

/// The zone of classic ELBs' names, as AWS names them: cloud-provider-aws tells a classic ELB from an NLB by it, and
/// refuses to update a Service whose classic hostname is not in it (`validateServiceAnnotations`,
/// aws_validations.go in v1.37.1). The emulator's DNS answers it (`dns.rs`).
pub const ELB_ZONE: &str = "elb.amazonaws.com";

/// A new load balancer's record and tags, written in its create's transaction; there at once.
struct New<'a> {
    classic: &'a Classic,
    tags: &'a BTreeMap<String, String>,
}

impl Beside for New<'_> {
    fn immediate(&self) -> bool {
        true
    }

    /// As AWS names a classic ELB: `<name>-<hash>.<region>.elb.amazonaws.com`, `internal-` before an internal
    /// one's (the ELB guide's "Internet-facing Classic Load Balancers" and "Internal Classic Load Balancers").
    fn dns_name(&self, name: &str, hash: &str, scheme: Scheme, region: &str) -> String {
        let internal = if scheme == Scheme::Internal { "internal-" } else { "" };
        format!("{internal}{}-{hash}.{region}.{ELB_ZONE}", name.to_ascii_lowercase())
    }

    async fn write(&self, tx: &mut Tx, id: &str) -> Result<()> {
        put(tx, id, self.classic).await?;
        if !self.tags.is_empty() {
            tags::write_new(tx, &Resource::LoadBalancer(id.to_string()), self.tags).await?;
        }
        Ok(())
    }
}

/// Create the load balancer `req` with its classic record and tags, in one transaction.
pub async fn create(
    db: &Db,
    cfg: &Config,
    req: &CreateLoadBalancerRequest,
    classic: &Classic,
    tags: &BTreeMap<String, String>,
) -> Result<LoadBalancer> {
    let (lb, _) = load_balancers::create_with(db, cfg, req, None, &New { classic, tags }).await?;
    Ok(lb)
}

/// Write `classic` as the record of the load balancer `id`, and link it to its security groups (each must exist).
async fn put(tx: &mut Tx, id: &str, classic: &Classic) -> Result<()> {
    sqlx::query(
        "INSERT INTO classic_load_balancers (load_balancer_id, subnets, extras) VALUES ($1, $2, $3) \
         ON CONFLICT(load_balancer_id) DO UPDATE SET subnets = $2, extras = $3",
    )
    .bind(id)
    .bind(json(&classic.subnets)?)
    .bind(json(&classic.extras)?)
    .execute(&mut **tx)
    .await?;
    security_groups::attach_load_balancer(tx, id, &classic.security_groups).await
}

/// Change the load balancer named `name` in one transaction: `change` edits its record and says what its native
/// row becomes (`None`: as it is). A refusal, the store's or `change`'s own, changes neither. A classic load
/// balancer may lose its last listener.
pub async fn change<F, E>(db: &Db, name: &str, change: F) -> std::result::Result<Listed, E>
where
    F: FnOnce(&LoadBalancer, &mut Classic) -> std::result::Result<Option<UpdateLoadBalancerRequest>, E>,
    E: From<ApiError>,
{
    let (mut tx, now) = begin(db).await?;
    let names = [name.to_string()];
    let mut listed = select(&mut *tx, &names, 0, 1).await?.into_iter().next().ok_or_else(|| not_found(name))?;
    listed.classic.security_groups = security_groups::of_load_balancer(&mut tx, &listed.lb.id).await?;
    if let Some(req) = change(&listed.lb, &mut listed.classic)? {
        listed.lb = load_balancers::update_in(&mut tx, now, &listed.lb.id, &req, 0).await?;
    }
    put(&mut tx, &listed.lb.id, &listed.classic).await?;
    call::commit(tx, &listed.lb.id).await.map_err(ApiError::from)?;
    Ok(listed)
}

//! Route tables and their routes. The route quota is enforced here, inside the create's transaction.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::IpAddr;

use fakecloud_api::{CreateRouteRequest, QuotaName, Route, RouteState, RouteTable, codes};
use sqlx::Row;
use sqlx::any::AnyExecutor;

use super::create::{self, Address};
use super::write::begin;
use crate::call;
use crate::db::{Db, NotDone, Ran, Script, Step, Tx, new_id, now_ms, rfc3339};
use crate::error::{ApiError, Result, conflict_on_unique, is_unique_violation};
use crate::validate;

pub const OPERATION_CREATE: &str = "CreateRoute";
/// The path alias of the main route table.
pub const MAIN: &str = "main";
/// The main route table's ID, the one table whose ID is not of EC2's form (`rtb-` and 17 hex digits).
pub const MAIN_ID: &str = "rtb-main";

pub async fn ensure_main_table(tx: &mut Tx) -> Result<()> {
    sqlx::query(
        "INSERT INTO route_tables (id, name, main, created_at) VALUES ($2, 'main', 1, $1) ON CONFLICT DO NOTHING",
    )
    .bind(now_ms())
    .bind(MAIN_ID)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Rewrite destinations stored before they were kept canonical (`FD00:0::/64` as `fd00::/64`), so the unique
/// index compares networks. Two routes that turn out to be one network are both kept, with a warning.
pub async fn canonicalize_destinations(tx: &mut Tx) -> Result<()> {
    let rows: Vec<(String, String)> = sqlx::query_as("SELECT id, destination FROM routes").fetch_all(&mut **tx).await?;
    for (id, stored) in rows {
        let Some(canonical) = stored.parse::<ipnet::IpNet>().ok().map(|n| n.to_string()).filter(|c| *c != stored)
        else {
            continue;
        };
        let updated = sqlx::query("UPDATE OR IGNORE routes SET destination = $1 WHERE id = $2")
            .bind(&canonical)
            .bind(&id)
            .execute(&mut **tx)
            .await?;
        if updated.rows_affected() == 0 {
            tracing::warn!(route = %id, destination = %stored, "another route in its table has the same network");
        }
    }
    Ok(())
}

fn table_not_found(id: &str) -> ApiError {
    ApiError::not_found(codes::ROUTE_TABLE_NOT_FOUND, format!("route table {id} does not exist"))
}

/// Resolve a table ID, or `main`, to the table's ID.
async fn resolve<'e>(exec: impl AnyExecutor<'e>, id: &str) -> Result<String> {
    let found: Option<String> =
        sqlx::query_scalar("SELECT id FROM route_tables WHERE id = $1 OR ($1 = 'main' AND main = 1)")
            .bind(id)
            .fetch_optional(exec)
            .await?;
    found.ok_or_else(|| table_not_found(id))
}

#[derive(sqlx::FromRow)]
struct TableRow {
    id: String,
    name: String,
    /// 0 or 1 (a flag is an integer on both backends).
    main: i64,
    route_count: i64,
    created_at: i64,
}

impl From<TableRow> for RouteTable {
    fn from(r: TableRow) -> Self {
        RouteTable {
            id: r.id,
            name: r.name,
            main: r.main != 0,
            route_count: u32::try_from(r.route_count).unwrap_or(u32::MAX),
            zones: Vec::new(),
            created_at: rfc3339(r.created_at),
        }
    }
}

const TABLE_SELECT: &str = "SELECT t.id, t.name, t.main, t.route_count, t.created_at FROM route_tables t";

pub async fn list_tables(db: &Db) -> Result<Vec<RouteTable>> {
    Ok(tables_and_associations(db).await?.0)
}

/// Every table (its `zones` from the associations) and every association: for a face that shows the
/// associations themselves (the AWS face), in the same reads.
pub async fn tables_and_associations(db: &Db) -> Result<(Vec<RouteTable>, Vec<Association>)> {
    let rows: Vec<TableRow> =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("{TABLE_SELECT} ORDER BY t.seq"))).fetch_all(db.reader()).await?;
    let associations = associations(db).await?;
    let mut tables: Vec<RouteTable> = rows.into_iter().map(Into::into).collect();
    for t in &mut tables {
        t.zones = associations.iter().filter(|a| a.route_table_id == t.id).map(|a| a.zone.clone()).collect();
    }
    Ok((tables, associations))
}

/// A zone's subnet associated with a route table other than through the main table's default (EC2's
/// `AssociateRouteTable`).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Association {
    pub id: String,
    pub route_table_id: String,
    pub zone: String,
}

/// Every association, oldest first.
async fn associations(db: &Db) -> Result<Vec<Association>> {
    Ok(sqlx::query_as("SELECT id, route_table_id, zone FROM route_table_associations ORDER BY created_at, id")
        .fetch_all(db.reader())
        .await?)
}

/// Associate zone `zone`'s subnet (the caller knows the zone is the cloud's) with table `table` (an ID or
/// `main`): refused while the zone has an association.
pub async fn associate(db: &Db, table: &str, zone: &str) -> Result<Association> {
    let (mut tx, now) = begin(db).await?;
    let table_id = resolve(&mut *tx, table).await?;
    let made = Association { id: new_id("rtbassoc"), route_table_id: table_id, zone: zone.to_string() };
    sqlx::query("INSERT INTO route_table_associations (id, route_table_id, zone, created_at) VALUES ($1, $2, $3, $4)")
        .bind(&made.id)
        .bind(&made.route_table_id)
        .bind(&made.zone)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(conflict_on_unique(codes::ZONE_ALREADY_ASSOCIATED, || {
            format!("zone {zone}'s subnet is associated with a route table already; disassociate it first")
        }))?;
    call::commit(tx, &made.id).await?;
    Ok(made)
}

/// End association `id`: its zone's subnet uses the main table again.
pub async fn disassociate(db: &Db, id: &str) -> Result<Association> {
    let (mut tx, _) = begin(db).await?;
    let found: Option<Association> =
        sqlx::query_as("SELECT id, route_table_id, zone FROM route_table_associations WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
    let found = found.ok_or_else(|| {
        ApiError::not_found(codes::ROUTE_TABLE_ASSOCIATION_NOT_FOUND, format!("association {id} does not exist"))
    })?;
    sqlx::query("DELETE FROM route_table_associations WHERE id = $1").bind(id).execute(&mut *tx).await?;
    call::commit(tx, id).await?;
    Ok(found)
}

/// Make a table named `name`, or by its own ID when `name` is none (EC2's tables have no names), with `tags`.
pub async fn create_table(db: &Db, name: Option<&str>, tags: &BTreeMap<String, String>) -> Result<RouteTable> {
    if let Some(name) = name {
        validate::NAME.check("name", name)?;
    }
    let (mut tx, now) = begin(db).await?;
    let id = new_id("rtb");
    let name = name.unwrap_or(&id);
    sqlx::query("INSERT INTO route_tables (id, name, main, created_at) VALUES ($1, $2, 0, $3)")
        .bind(&id)
        .bind(name)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(conflict_on_unique(codes::ROUTE_TABLE_ALREADY_EXISTS, || {
            format!("a route table named {name:?} exists")
        }))?;
    super::tags::write_new(&mut tx, &super::tags::Resource::RouteTable(id.clone()), tags).await?;
    let row: TableRow = sqlx::query_as(sqlx::AssertSqlSafe(format!("{TABLE_SELECT} WHERE t.id = $1")))
        .bind(&id)
        .fetch_one(&mut *tx)
        .await?;
    call::commit(tx, &id).await?;
    Ok(row.into())
}

pub async fn delete_table(db: &Db, id: &str) -> Result<RouteTable> {
    let (mut tx, _) = begin(db).await?;
    let table_id = resolve(&mut *tx, id).await?;
    let row: TableRow = sqlx::query_as(sqlx::AssertSqlSafe(format!("{TABLE_SELECT} WHERE t.id = $1")))
        .bind(&table_id)
        .fetch_one(&mut *tx)
        .await?;
    if row.main != 0 {
        return Err(ApiError::conflict(codes::DEPENDENCY_VIOLATION, "the main route table cannot be deleted"));
    }
    if row.route_count > 0 {
        return Err(ApiError::conflict(
            codes::DEPENDENCY_VIOLATION,
            format!("route table {table_id} still has {} routes; delete them first", row.route_count),
        ));
    }
    let zones: Vec<String> = sqlx::query_scalar("SELECT zone FROM route_table_associations WHERE route_table_id = $1")
        .bind(&table_id)
        .fetch_all(&mut *tx)
        .await?;
    if !zones.is_empty() {
        return Err(ApiError::conflict(
            codes::DEPENDENCY_VIOLATION,
            format!(
                "route table {table_id} is associated with the subnets of {}; disassociate them first",
                zones.join(", ")
            ),
        ));
    }
    sqlx::query("DELETE FROM route_tables WHERE id = $1").bind(&table_id).execute(&mut *tx).await?;
    super::tags::forget(&mut tx, &table_id).await?;
    call::commit(tx, &table_id).await?;
    Ok(row.into())
}

#[derive(sqlx::FromRow)]
struct RouteRow {
    id: String,
    route_table_id: String,
    name: String,
    destination: String,
    target_instance: String,
    target_live: i64,
    created_at: i64,
}

impl From<RouteRow> for Route {
    fn from(r: RouteRow) -> Self {
        Route {
            id: r.id,
            route_table_id: r.route_table_id,
            name: r.name,
            destination: r.destination,
            target_instance: r.target_instance,
            state: if r.target_live != 0 { RouteState::Active } else { RouteState::Blackhole },
            created_at: rfc3339(r.created_at),
        }
    }
}

/// `$1` is now: a route whose target is gone or terminated is a blackhole, as a cloud reports it.
const ROUTE_SELECT: &str = "SELECT r.id, r.route_table_id, r.name, r.destination, r.target_instance, \
     CAST(EXISTS (SELECT 1 FROM instances i WHERE i.id = r.target_instance \
             AND (CASE WHEN i.next_state_at <= $1 THEN i.next_state ELSE i.state END) NOT IN ('shutting-down', 'terminated')) AS INTEGER) AS target_live, \
     r.created_at FROM routes r";

pub async fn list(db: &Db, table: &str) -> Result<Vec<Route>> {
    let table_id = resolve(db.reader(), table).await?;
    let rows: Vec<RouteRow> =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("{ROUTE_SELECT} WHERE r.route_table_id = $2 ORDER BY r.seq")))
            .bind(now_ms())
            .bind(&table_id)
            .fetch_all(db.reader())
            .await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

async fn fetch<'e>(exec: impl AnyExecutor<'e>, id: &str, now: i64) -> Result<Route> {
    let row: Option<RouteRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!("{ROUTE_SELECT} WHERE r.id = $2")))
        .bind(now)
        .bind(id)
        .fetch_optional(exec)
        .await?;
    row.map(Into::into).ok_or_else(|| ApiError::not_found(codes::ROUTE_NOT_FOUND, format!("route {id} does not exist")))
}

/// Returns the route and whether it was an idempotent replay.
pub async fn create(db: &Db, table: &str, req: &CreateRouteRequest, key: Option<&str>) -> Result<(Route, bool)> {
    validate::ROUTE_NAME.check("name", &req.name)?;
    // Stored canonically, so the unique index sees one network however it is written.
    let destination = validate::cidr("destination", &req.destination, true)?.to_string();
    let request_json = serde_json::to_string(req).map_err(|e| ApiError::internal(e.to_string()))?;
    let new = NewRoute { id: new_id("r"), table, req, destination };
    create::create(db, &new, key, &request_json).await
}

/// A new route, as the create writes it (see [`create::NewResource`]). Its quota is the table's own count,
/// read with the table by its checks.
struct NewRoute<'a> {
    id: String,
    /// The table as the caller named it (an ID, or `main`): the insert finds it, as the checks do.
    table: &'a str,
    req: &'a CreateRouteRequest,
    destination: String,
}

/// What a route's checks found: its table (which scopes its idempotency keys), its target's state, the
/// table's route count and the route quota.
struct Found {
    table_id: String,
    target_state: Option<String>,
    route_count: Option<i64>,
    limit: Option<i64>,
}

impl create::NewResource for NewRoute<'_> {
    type Made = Route;
    type Found = Found;

    fn id(&self) -> &str {
        &self.id
    }

    /// Keys are per table: the same key may create a route in each.
    fn key_scope(&self, found: Option<&Found>) -> Option<String> {
        found.map(|f| format!("{OPERATION_CREATE}/{}", f.table_id))
    }

    fn address(&self) -> Address<'_> {
        Address::None
    }

    /// The table, the target's state, the table's route count and the quota, in one statement.
    fn push_checks(&self, script: &mut Script, _now: i64) -> Vec<Step> {
        vec![script.push(
            "SELECT t.id, (SELECT state FROM instances WHERE id = $2), t.route_count, \
             (SELECT limit_value FROM quotas WHERE name = $3) \
             FROM (SELECT 1) AS one LEFT JOIN (SELECT id, route_count FROM route_tables \
             WHERE id = $1 OR ($1 = 'main' AND main = 1) LIMIT 1) t ON 1 = 1",
            |b| {
                b.bind(self.table.to_string())
                    .bind(self.req.target_instance.clone())
                    .bind(QuotaName::RoutesPerRouteTable.as_str());
            },
        )]
    }

    /// The table must exist before anything else is said: it scopes the key.
    fn found(&self, ran: &Ran, checks: &[Step]) -> Result<Found> {
        let step = checks.first().ok_or_else(|| ApiError::internal("the route checks are missing"))?;
        let row = ran.rows(*step)?.first().ok_or_else(|| ApiError::internal("the route checks returned no row"))?;
        let (table_id, target_state, route_count, limit): (Option<String>, Option<String>, Option<i64>, Option<i64>) =
            (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?, row.try_get(3)?);
        let table_id = table_id.ok_or_else(|| table_not_found(self.table))?;
        Ok(Found { table_id, target_state, route_count, limit })
    }

    /// A live target, and room under the route quota.
    fn judge(&self, found: &Found, _: &Ran, _: &[Step]) -> Result<()> {
        match found.target_state.as_deref() {
            None => {
                return Err(ApiError::bad_request(
                    codes::INVALID_ROUTE_TARGET,
                    format!("target_instance: instance {} does not exist", self.req.target_instance),
                ));
            }
            Some(s @ ("shutting-down" | "terminated")) => {
                return Err(ApiError::bad_request(
                    codes::INVALID_ROUTE_TARGET,
                    format!("target_instance: instance {} is {s}", self.req.target_instance),
                ));
            }
            Some(_) => {}
        }
        let quota = QuotaName::RoutesPerRouteTable;
        let limit = found.limit.and_then(|v| u32::try_from(v).ok()).unwrap_or_else(|| quota.default_limit());
        if found.route_count.unwrap_or(0) as usize + 1 > limit as usize {
            return Err(ApiError::quota_exceeded(quota, limit, &format!("adding a route to {}", found.table_id)));
        }
        Ok(())
    }

    /// Its insert; it inserts nothing if the table does not exist (the checks say so).
    fn push_insert(&self, script: &mut Script, now: i64, _: Option<IpAddr>) -> Step {
        script.push(
            "INSERT INTO routes (id, route_table_id, name, destination, target_instance, created_at) \
             SELECT $1, id, $3, $4, $5, $6 FROM route_tables WHERE id = $2 OR ($2 = 'main' AND main = 1) LIMIT 1",
            |b| {
                b.bind(self.id.clone())
                    .bind(self.table.to_string())
                    .bind(self.req.name.clone())
                    .bind(self.destination.clone())
                    .bind(self.req.target_instance.clone())
                    .bind(now);
            },
        )
    }

    fn inserted<'a>(
        &'a self,
        tx: &'a mut Tx,
        found: &'a Found,
        outcome: std::result::Result<u64, NotDone<'a>>,
    ) -> impl Future<Output = Result<()>> + Send + 'a {
        inserted(tx, &found.table_id, &self.destination, outcome)
    }

    fn made(&self, now: i64, _: Option<IpAddr>, found: Found) -> Result<Route> {
        let route = RouteRow {
            id: self.id.clone(),
            route_table_id: found.table_id,
            name: self.req.name.clone(),
            destination: self.destination.clone(),
            target_instance: self.req.target_instance.clone(),
            target_live: 1,
            created_at: now,
        };
        Ok(route.into())
    }

    fn fetch<'a>(&'a self, tx: &'a mut Tx, id: &'a str, now: i64) -> impl Future<Output = Result<Route>> + Send + 'a {
        fetch(&mut **tx, id, now)
    }
}

/// The insert's outcome: a destination the table routes already is a conflict naming the route.
async fn inserted(
    tx: &mut Tx,
    table_id: &str,
    destination: &str,
    outcome: std::result::Result<u64, NotDone<'_>>,
) -> Result<()> {
    match outcome {
        Ok(_) => Ok(()),
        // The unique index is the check; find the holder only to name it.
        Err(NotDone::Failed(e)) if is_unique_violation(e) => {
            let holder: Option<(String, String)> =
                sqlx::query_as("SELECT id, name FROM routes WHERE route_table_id = $1 AND destination = $2")
                    .bind(table_id)
                    .bind(destination)
                    .fetch_optional(&mut **tx)
                    .await?;
            let (id, name) = holder.unwrap_or_default();
            Err(ApiError::conflict(
                codes::ROUTE_ALREADY_EXISTS,
                format!(
                    "route table {table_id} already has a route to {destination}: {id} ({name:?}); delete it first"
                ),
            ))
        }
        Err(e) => Err(e.into()),
    }
}

pub async fn delete(db: &Db, table: &str, route_id: &str) -> Result<Route> {
    let (mut tx, now) = begin(db).await?;
    let table_id = resolve(&mut *tx, table).await?;
    let route = fetch(&mut *tx, route_id, now).await?;
    if route.route_table_id != table_id {
        return Err(ApiError::not_found(
            codes::ROUTE_NOT_FOUND,
            format!("route {route_id} is not in route table {table_id}"),
        ));
    }
    remove(tx, route).await
}

/// Delete the route of `table` to `destination`: how EC2 names a route (it has no ID of its own there).
pub async fn delete_to(db: &Db, table: &str, destination: &str) -> Result<Route> {
    let destination = validate::cidr("destination", destination, true)?.to_string();
    let (mut tx, now) = begin(db).await?;
    let table_id = resolve(&mut *tx, table).await?;
    let id: Option<String> = sqlx::query_scalar("SELECT id FROM routes WHERE route_table_id = $1 AND destination = $2")
        .bind(&table_id)
        .bind(&destination)
        .fetch_optional(&mut *tx)
        .await?;
    let id = id.ok_or_else(|| {
        ApiError::not_found(codes::ROUTE_NOT_FOUND, format!("route table {table_id} has no route to {destination}"))
    })?;
    let route = fetch(&mut *tx, &id, now).await?;
    remove(tx, route).await
}

async fn remove(mut tx: Tx, route: Route) -> Result<Route> {
    sqlx::query("DELETE FROM routes WHERE id = $1").bind(&route.id).execute(&mut *tx).await?;
    call::commit(tx, &route.id).await?;
    Ok(route)
}

/// Every route of every table, each table's in the order they were made: for a face that shows the tables
/// with their routes (the AWS face).
pub async fn list_all(db: &Db) -> Result<Vec<Route>> {
    let rows: Vec<RouteRow> =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("{ROUTE_SELECT} ORDER BY r.route_table_id, r.seq")))
            .bind(now_ms())
            .fetch_all(db.reader())
            .await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

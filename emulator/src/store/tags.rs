//! Tags on resources (issue #49): an instance's in its own column (`instances.tags`, a JSON object, what the
//! native API shows and fault rules match), every other resource's (route tables, the VPC and subnets, security
//! groups, load balancers, target groups, listeners) in `resource_tags`. A call's tags are written in one
//! transaction: a request that would take one of its resources past [`TAGS_MAX`] changes none.

use std::collections::BTreeMap;

use fakecloud_api::codes;
use fakecloud_api::limits::TAGS_MAX;

use super::write::begin;
use crate::call;
use crate::db::{Db, Tx};
use crate::error::{ApiError, Kind, Result};
use crate::store::elbv2::code::{LISTENER_NOT_FOUND, TARGET_GROUP_NOT_FOUND};

/// A resource that can carry tags, by the ID the store knows it by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resource {
    Instance(String),
    /// A route table's own ID (`rtb-main` for the main one).
    RouteTable(String),
    /// A resource of the topology (the VPC, a subnet): it exists as long as the cloud does.
    Fixed(String),
    SecurityGroup(String),
    /// A load balancer, by its native ID (Elastic Load Balancing's tags; deleted with it).
    LoadBalancer(String),
    /// An ELBv2 target group and listener (`store::elbv2`), by their IDs there.
    TargetGroup(String),
    Listener(String),
}

impl Resource {
    pub fn id(&self) -> &str {
        match self {
            Self::Instance(id)
            | Self::RouteTable(id)
            | Self::Fixed(id)
            | Self::SecurityGroup(id)
            | Self::LoadBalancer(id)
            | Self::TargetGroup(id)
            | Self::Listener(id) => id,
        }
    }

    /// Its table and ID column, for those kept elsewhere than `resource_tags`' own.
    fn table(&self) -> Option<(&'static str, &'static str)> {
        match self {
            Self::Instance(_) | Self::Fixed(_) => None,
            Self::RouteTable(_) => Some(("route_tables", "id")),
            Self::SecurityGroup(_) => Some(("security_groups", "id")),
            Self::LoadBalancer(_) => Some(("load_balancers", "id")),
            Self::TargetGroup(_) => Some(("elbv2_target_groups", "id")),
            Self::Listener(_) => Some(("elbv2_listeners", "id")),
        }
    }

    fn not_found(&self) -> ApiError {
        let id = self.id();
        match self {
            Self::RouteTable(_) => {
                ApiError::not_found(codes::ROUTE_TABLE_NOT_FOUND, format!("route table {id} does not exist"))
            }
            Self::SecurityGroup(_) => ApiError::not_found(
                codes::SECURITY_GROUP_NOT_FOUND,
                format!("The security group '{id}' does not exist"),
            ),
            Self::LoadBalancer(_) => {
                ApiError::not_found(codes::LOAD_BALANCER_NOT_FOUND, format!("load balancer {id} does not exist"))
            }
            Self::TargetGroup(_) => {
                ApiError::not_found(TARGET_GROUP_NOT_FOUND, format!("target group {id} does not exist"))
            }
            Self::Listener(_) => ApiError::not_found(LISTENER_NOT_FOUND, format!("listener {id} does not exist")),
            Self::Instance(_) | Self::Fixed(_) => ApiError::internal(format!("resource {id} cannot be missing")),
        }
    }
}

/// What a call does to its resources' tags.
pub enum Change<'a> {
    /// Add these tags, or overwrite the values of those it has.
    Set(&'a BTreeMap<String, String>),
    /// Remove these keys; a key with a value only while the resource's tag has that value.
    Remove(&'a [(String, Option<String>)]),
    /// Remove every tag.
    Clear,
}

impl Change<'_> {
    fn apply(&self, tags: &mut BTreeMap<String, String>) {
        match self {
            Self::Set(new) => tags.extend(new.iter().map(|(k, v)| (k.clone(), v.clone()))),
            Self::Remove(keys) => {
                for (k, v) in *keys {
                    if v.as_ref().is_none_or(|v| tags.get(k) == Some(v)) {
                        tags.remove(k);
                    }
                }
            }
            Self::Clear => tags.clear(),
        }
    }
}

/// Change the tags of every one of `resources`, each of which must exist, in one transaction.
pub async fn change(db: &Db, resources: &[Resource], change: Change<'_>) -> Result<()> {
    let (mut tx, _) = begin(db).await?;
    for r in resources {
        let mut tags = read(&mut tx, r).await?;
        change.apply(&mut tags);
        if tags.len() > TAGS_MAX {
            return Err(too_many(r, tags.len()));
        }
        write(&mut tx, r, &tags).await?;
    }
    let audited = match resources {
        [one] => one.id(),
        _ => "",
    };
    call::commit(tx, audited).await?;
    Ok(())
}

/// The tags `r` has now; an error if it does not exist.
async fn read(tx: &mut Tx, r: &Resource) -> Result<BTreeMap<String, String>> {
    match r {
        Resource::Instance(id) => {
            let json: Option<String> = sqlx::query_scalar("SELECT tags FROM instances WHERE id = $1")
                .bind(id)
                .fetch_optional(&mut **tx)
                .await?;
            let json = json.ok_or_else(|| {
                ApiError::not_found(codes::INSTANCE_NOT_FOUND, format!("instance {id} does not exist"))
            })?;
            serde_json::from_str(&json)
                .map_err(|_| ApiError::internal(format!("stored instance {id} has invalid tags")))
        }
        Resource::Fixed(id) => others_of(tx, id).await,
        other => {
            let (table, column) = other.table().ok_or_else(|| ApiError::internal("a resource without a table"))?;
            let found: Option<String> =
                sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT {column} FROM {table} WHERE {column} = $1")))
                    .bind(other.id())
                    .fetch_optional(&mut **tx)
                    .await?;
            if found.is_none() {
                return Err(other.not_found());
            }
            others_of(tx, other.id()).await
        }
    }
}

async fn others_of(tx: &mut Tx, id: &str) -> Result<BTreeMap<String, String>> {
    let rows: Vec<(String, String)> = sqlx::query_as("SELECT key, value FROM resource_tags WHERE resource_id = $1")
        .bind(id)
        .fetch_all(&mut **tx)
        .await?;
    Ok(rows.into_iter().collect())
}

/// Make `r`'s tags `tags`.
async fn write(tx: &mut Tx, r: &Resource, tags: &BTreeMap<String, String>) -> Result<()> {
    match r {
        Resource::Instance(id) => {
            let json = serde_json::to_string(tags).map_err(|e| ApiError::internal(e.to_string()))?;
            sqlx::query("UPDATE instances SET tags = $1 WHERE id = $2").bind(json).bind(id).execute(&mut **tx).await?;
        }
        other => {
            let id = other.id();
            forget(tx, id).await?;
            for (k, v) in tags {
                sqlx::query("INSERT INTO resource_tags (resource_id, key, value) VALUES ($1, $2, $3)")
                    .bind(id)
                    .bind(k)
                    .bind(v)
                    .execute(&mut **tx)
                    .await?;
            }
        }
    }
    Ok(())
}

/// The tags of a resource made in `tx`, which has none yet.
pub async fn write_new(tx: &mut Tx, r: &Resource, tags: &BTreeMap<String, String>) -> Result<()> {
    if tags.len() > TAGS_MAX {
        return Err(too_many(r, tags.len()));
    }
    write(tx, r, tags).await
}

fn too_many(r: &Resource, n: usize) -> ApiError {
    ApiError::new(
        Kind::Exceeded,
        codes::TAG_LIMIT_EXCEEDED,
        format!("resource {} would have {n} tags; a resource has at most {TAGS_MAX}", r.id()),
    )
}

/// Drop the tags of `id` (a resource of `resource_tags`), in the transaction that deletes it.
pub async fn forget(tx: &mut Tx, id: &str) -> Result<()> {
    sqlx::query("DELETE FROM resource_tags WHERE resource_id = $1").bind(id).execute(&mut **tx).await?;
    Ok(())
}

/// The tags of each of `ids` (resources of `resource_tags`) that has any, by ID.
pub async fn of(db: &Db, ids: &[String]) -> Result<BTreeMap<String, BTreeMap<String, String>>> {
    let mut out: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    if ids.is_empty() {
        return Ok(out);
    }
    let sql = format!(
        "SELECT resource_id, key, value FROM resource_tags WHERE resource_id IN ({}) ORDER BY resource_id, key",
        crate::db::params(1, ids.len())
    );
    let mut q = sqlx::query_as::<_, (String, String, String)>(sqlx::AssertSqlSafe(sql));
    for id in ids {
        q = q.bind(id);
    }
    for (id, k, v) in q.fetch_all(db.reader()).await? {
        out.entry(id).or_default().insert(k, v);
    }
    Ok(out)
}

/// The tags of every resource but the instances (whose tags come with them), by resource ID.
pub async fn others(db: &Db) -> Result<BTreeMap<String, BTreeMap<String, String>>> {
    let rows: Vec<(String, String, String)> =
        sqlx::query_as("SELECT resource_id, key, value FROM resource_tags ORDER BY resource_id, key")
            .fetch_all(db.reader())
            .await?;
    let mut out: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (id, k, v) in rows {
        out.entry(id).or_default().insert(k, v);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removal_with_a_value_removes_the_tag_only_while_it_has_that_value() {
        let mut tags: BTreeMap<String, String> =
            [("a", "1"), ("b", "2"), ("c", "3")].into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        let keys = [("a".to_string(), Some("other".to_string())), ("b".into(), Some("2".into())), ("c".into(), None)];
        Change::Remove(&keys).apply(&mut tags);
        assert_eq!(tags.into_iter().collect::<Vec<_>>(), [("a".to_string(), "1".to_string())]);
    }
}

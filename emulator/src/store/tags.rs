//! Tags on resources (issue #49): an instance's in its own column (`instances.tags`, a JSON object, what the
//! native API shows and fault rules match), every other resource's (route tables, the VPC and subnets, security
//! groups) in `resource_tags`. A call's tags are written in one transaction: a request that would take one of its
//! resources past [`TAGS_MAX`] changes none.

use std::collections::BTreeMap;

use fakecloud_api::codes;
use fakecloud_api::limits::TAGS_MAX;

use super::write::begin;
use crate::call;
use crate::db::{Db, Tx};
use crate::error::{ApiError, Kind, Result};

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
}

impl Resource {
    fn id(&self) -> &str {
        match self {
            Self::Instance(id)
            | Self::RouteTable(id)
            | Self::Fixed(id)
            | Self::SecurityGroup(id)
            | Self::LoadBalancer(id) => id,
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
    change_in(&mut tx, resources, &change).await?;
    let audited = match resources {
        [one] => one.id(),
        _ => "",
    };
    call::commit(tx, audited).await?;
    Ok(())
}

/// [`change`] in the caller's transaction: a resource's tags made with it.
pub async fn change_in(tx: &mut Tx, resources: &[Resource], change: &Change<'_>) -> Result<()> {
    for r in resources {
        change_one_in(tx, r, change).await?;
    }
    Ok(())
}

/// Change the tags of `r`, which must exist, in the write `tx`.
pub async fn change_one_in(tx: &mut Tx, r: &Resource, change: &Change<'_>) -> Result<()> {
    let mut tags = read(tx, r).await?;
    change.apply(&mut tags);
    if tags.len() > TAGS_MAX {
        return Err(ApiError::new(
            Kind::Exceeded,
            codes::TAG_LIMIT_EXCEEDED,
            format!("resource {} would have {} tags; a resource has at most {TAGS_MAX}", r.id(), tags.len()),
        ));
    }
    write(tx, r, &tags).await
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
        Resource::RouteTable(id) => {
            let gone = || ApiError::not_found(codes::ROUTE_TABLE_NOT_FOUND, format!("route table {id} does not exist"));
            exists(tx, "SELECT id FROM route_tables WHERE id = $1", id, gone).await?;
            others_of(tx, id).await
        }
        Resource::SecurityGroup(id) => {
            // (Not `security_groups`' error: that module writes its groups' tags through this one.)
            let gone = || {
                ApiError::not_found(
                    codes::SECURITY_GROUP_NOT_FOUND,
                    format!("The security group '{id}' does not exist"),
                )
            };
            exists(tx, "SELECT id FROM security_groups WHERE id = $1", id, gone).await?;
            others_of(tx, id).await
        }
        Resource::Fixed(id) => others_of(tx, id).await,
        Resource::LoadBalancer(id) => {
            let gone =
                || ApiError::not_found(codes::LOAD_BALANCER_NOT_FOUND, format!("load balancer {id} does not exist"));
            exists(tx, "SELECT id FROM load_balancers WHERE id = $1", id, gone).await?;
            others_of(tx, id).await
        }
    }
}

/// `gone()` unless `select` (`$1`: the ID) finds `id`.
async fn exists(tx: &mut Tx, select: &'static str, id: &str, gone: impl FnOnce() -> ApiError) -> Result<()> {
    let found: Option<String> = sqlx::query_scalar(select).bind(id).fetch_optional(&mut **tx).await?;
    found.map(drop).ok_or_else(gone)
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
        Resource::RouteTable(id) | Resource::Fixed(id) | Resource::SecurityGroup(id) | Resource::LoadBalancer(id) => {
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

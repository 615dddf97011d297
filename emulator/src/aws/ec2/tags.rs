//! Tags: CreateTags, DeleteTags and DescribeTags on instances, route tables, the VPC and its subnets, security
//! groups, kept by the store (`store::tags`: an instance's are the native API's `tags`), under EC2's rules
//! (`tag_rules`).

use std::collections::BTreeMap;

use fakecloud_api::RouteTable;

use super::tag_rules::{check_key, parse};
use super::{filter, network, routes};
use crate::aws::error::{AwsError, Result};
use crate::aws::query::Params;
use crate::aws::xml::{Node, items, text};
use crate::config::Topology;
use crate::http::AppState;
use crate::store;
use crate::store::tags::{Change, Resource};

/// The most resources one CreateTags or DeleteTags names: far past what a caller tags at once, bounded.
const RESOURCES_MAX: usize = 1000;

/// The IDs `ResourceId.N` names.
fn resource_ids(params: &mut Params) -> Result<Vec<String>> {
    let ids = params.list("ResourceId")?;
    if ids.is_empty() {
        return Err(AwsError::client("MissingParameter", "The request must contain the parameter ResourceId.1"));
    }
    if ids.len() > RESOURCES_MAX {
        return Err(AwsError::invalid_value(format!("At most {RESOURCES_MAX} resources may be tagged at once")));
    }
    Ok(ids)
}

/// The resources `ids` name, as the store knows them.
async fn resources(st: &AppState, ids: &[String]) -> Result<Vec<Resource>> {
    let tables = store::routes::list_tables(&st.db).await?;
    ids.iter().map(|id| resource(&st.cfg.topology, &tables, id)).collect()
}

fn resource(topo: &Topology, tables: &[RouteTable], id: &str) -> Result<Resource> {
    let kind = id.split_once('-').map(|(k, _)| k);
    match kind {
        Some("i") => Ok(Resource::Instance(id.to_string())),
        Some("rtb") => Ok(Resource::RouteTable(routes::native_table(topo, tables, id)?.id.clone())),
        // The store says whether it exists (`InvalidGroup.NotFound`).
        Some("sg") => Ok(Resource::SecurityGroup(id.to_string())),
        Some("vpc") => network::check_vpc(topo, id).map(|()| Resource::Fixed(id.to_string())),
        Some("subnet") => network::zone_of_subnet(topo, id).map(|_| Resource::Fixed(id.to_string())),
        _ => {
            let shown: String = id.chars().take(64).collect();
            Err(AwsError::client("InvalidID", format!("The ID '{shown}' is not valid")))
        }
    }
}

pub async fn create(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let ids = resource_ids(params)?;
    let tags = parse(params.structures("Tag")?)?;
    if tags.is_empty() {
        return Err(AwsError::client("MissingParameter", "The request must contain the parameter Tag.1.Key"));
    }
    params.finish()?;
    let targets = resources(st, &ids).await?;
    store::tags::change(&st.db, &targets, Change::Set(&tags)).await?;
    Ok(vec![text("return", "true")])
}

pub async fn delete(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let ids = resource_ids(params)?;
    let mut keys = Vec::new();
    for mut tag in params.structures("Tag")? {
        let key = tag.required("Key")?;
        let value = tag.take("Value");
        tag.finish()?;
        check_key(&key)?;
        keys.push((key, value));
    }
    params.finish()?;
    let targets = resources(st, &ids).await?;
    // No tags named: every tag of the resources goes, as EC2 deletes them.
    let change = if keys.is_empty() { Change::Clear } else { Change::Remove(&keys) };
    store::tags::change(&st.db, &targets, change).await?;
    Ok(vec![text("return", "true")])
}

/// A tag as DescribeTags answers it.
struct Described<'a> {
    resource_id: String,
    resource_type: &'static str,
    key: &'a str,
    value: &'a str,
}

pub async fn describe(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let topo = &st.cfg.topology;
    let filters = params.filters()?;
    let max_results = params.int("MaxResults", 5, 1000)?;
    let token = params.take("NextToken");
    filter::check(&filters, |n| {
        matches!(n, "key" | "value" | "resource-id" | "resource-type")
            || n.strip_prefix("tag:").is_some_and(|k| !k.is_empty())
    })?;
    // The token is how many tags the pages before have passed over.
    let skip: usize = Params::next_token(token.as_deref())?;
    let instances = store::instances::all(&st.db, &st.cfg, &store::instances::Among::All).await?;
    let others = store::tags::others(&st.db).await?;
    let mut tagged: Vec<(String, &'static str, &BTreeMap<String, String>)> =
        instances.iter().map(|(_, i)| (i.id.clone(), "instance", &i.tags)).collect();
    for (id, tags) in &others {
        // Route tables' tags are kept by their own IDs; the VPC's and subnets' by their EC2 IDs.
        let (ec2_id, kind) = match id.split_once('-').map(|(k, _)| k) {
            Some("rtb") => (routes::table_id(topo, id), "route-table"),
            Some("vpc") => (id.clone(), "vpc"),
            Some("subnet") => (id.clone(), "subnet"),
            Some("sg") => (id.clone(), "security-group"),
            _ => continue,
        };
        tagged.push((ec2_id, kind, tags));
    }
    let all = tagged.iter().flat_map(|(id, kind, tags)| {
        tags.iter().map(move |(k, v)| Described { resource_id: id.clone(), resource_type: kind, key: k, value: v })
    });
    let mut chosen = all
        .filter(|t| {
            filters.iter().all(|f| {
                let one = |v: &str| filter::any(&f.values, v);
                match f.name.as_str() {
                    "key" => one(t.key),
                    "value" => one(t.value),
                    "resource-id" => one(&t.resource_id),
                    "resource-type" => one(t.resource_type),
                    // `tag:<key>`: the tag with that key and one of these values.
                    name => name.strip_prefix("tag:") == Some(t.key) && one(t.value),
                }
            })
        })
        .skip(skip);
    let page: Vec<Described<'_>> = match max_results {
        Some(n) => chosen.by_ref().take(n as usize).collect(),
        None => chosen.by_ref().collect(),
    };
    let more = chosen.next().is_some();
    let count = page.len();
    let described = page.into_iter().map(|t| {
        vec![
            text("resourceId", t.resource_id),
            text("resourceType", t.resource_type),
            text("key", t.key),
            text("value", t.value),
        ]
    });
    let mut answer = vec![items("tagSet", described.collect::<Vec<_>>())];
    if more {
        answer.push(text("nextToken", (skip + count).to_string()));
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn tags(form: &str) -> Result<BTreeMap<String, String>> {
        parse(Params::parse("", form.as_bytes()).unwrap().structures("Tag").unwrap())
    }

    #[test]
    fn tags_follow_ec2s_rules() {
        let ok = tags("Tag.1.Key=kubernetes.io%2Fcluster%2Fc1&Tag.1.Value=owned&Tag.2.Key=Cost+Center").unwrap();
        assert_eq!(ok["kubernetes.io/cluster/c1"], "owned");
        assert_eq!(ok["Cost Center"], "", "a tag without a value has an empty one");
        let code = |form: &str| tags(form).unwrap_err().code.to_string();
        assert_eq!(code("Tag.1.Key=aws%3Aname&Tag.1.Value=x"), "InvalidParameterValue");
        assert_eq!(code("Tag.1.Key=AWS%3Aname"), "InvalidParameterValue");
        assert_eq!(code(&format!("Tag.1.Key={}", "k".repeat(129))), "InvalidParameterValue");
        assert_eq!(code(&format!("Tag.1.Key=k&Tag.1.Value={}", "v".repeat(257))), "InvalidParameterValue");
        assert_eq!(code("Tag.1.Key=a&Tag.2.Key=a"), "InvalidParameterValue");
        assert_eq!(code("Tag.1.Value=x"), "MissingParameter");
        assert_eq!(code("Tag.1.Key=a&Tag.1.Colour=x"), "UnknownParameter");
        let many = (1..=51).map(|i| format!("Tag.{i}.Key=k{i}")).collect::<Vec<_>>().join("&");
        assert_eq!(code(&many), "TagLimitExceeded");
        // At the bounds, accepted.
        tags(&format!("Tag.1.Key={}&Tag.1.Value={}", "k".repeat(128), "v".repeat(256))).unwrap();
    }
}

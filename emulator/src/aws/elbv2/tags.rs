//! AddTags, RemoveTags and DescribeTags on NLBs, target groups and listeners (by ARN), kept by the store
//! (`store::tags`, `resource_tags`), and the tags CreateLoadBalancer, CreateTargetGroup and CreateListener take.
//! ELB's rules: at most 50 a resource (`TooManyTags`), a key once a request (`DuplicateTagKeys`).

use std::collections::BTreeMap;

use fakecloud_api::limits::TAGS_MAX;

use super::arn::Arns;
use super::common::validation;
use super::lookup::{group, listener, nlb};
use crate::aws::api::Api;
use crate::aws::error::{AwsError, Result};
use crate::aws::query::Params;
use crate::aws::xml::{Node, members, text};
use crate::http::AppState;
use crate::store::elbv2;
use crate::store::tags::{self, Change, Resource};

const KEY_MAX_CHARS: usize = 128;
const VALUE_MAX_CHARS: usize = 256;
/// The most resources one call names (ELB's: 20).
const RESOURCES_MAX: usize = 20;

/// `Tags.member.N.Key`/`Value`, checked.
pub fn parse(params: &mut Params) -> Result<BTreeMap<String, String>> {
    let list = params.structures("Tags.member")?;
    if list.len() > TAGS_MAX {
        return Err(AwsError::client(
            "TooManyTags",
            format!("{} tags given; a resource has at most {TAGS_MAX}", list.len()),
        ));
    }
    let mut tags = BTreeMap::new();
    for mut t in list {
        let key = t.required("Key")?;
        let value = t.take("Value").unwrap_or_default();
        t.finish()?;
        check_key(&key)?;
        if value.chars().count() > VALUE_MAX_CHARS {
            return Err(validation(format!("Tag value for key '{key}' must be at most {VALUE_MAX_CHARS} characters")));
        }
        if tags.insert(key.clone(), value).is_some() {
            return Err(AwsError::client("DuplicateTagKeys", format!("Tag key '{key}' is given more than once")));
        }
    }
    Ok(tags)
}

fn check_key(key: &str) -> Result<()> {
    let n = key.chars().count();
    if n == 0 || n > KEY_MAX_CHARS {
        return Err(validation(format!("Tag key must be 1 to {KEY_MAX_CHARS} characters long")));
    }
    if key.starts_with("aws:") {
        return Err(validation(format!("Tag keys starting with 'aws:' are reserved ({key})")));
    }
    Ok(())
}

/// The resources `ResourceArns.member.N` name, each of which must exist.
async fn resources(st: &AppState, arns: &Arns, params: &mut Params) -> Result<Vec<(String, Resource)>> {
    let given = params.list("ResourceArns.member")?;
    if given.is_empty() || given.len() > RESOURCES_MAX {
        return Err(validation(format!("1 to {RESOURCES_MAX} resource ARNs must be given (ResourceArns.member.N)")));
    }
    let mut out = Vec::new();
    for arn in given {
        let kind = arn.rsplit_once(':').map(|(_, r)| r.split('/').next().unwrap_or("")).unwrap_or("");
        let resource = match kind {
            "loadbalancer" => Resource::LoadBalancer(nlb(st, arns, &arn).await?.lb_id),
            "targetgroup" => Resource::TargetGroup(group(st, arns, &arn).await?.id),
            "listener" => Resource::Listener(listener(st, arns, &arn).await?.0.id),
            _ => return Err(validation(format!("'{arn}' is not a valid resource ARN"))),
        };
        out.push((arn, resource));
    }
    Ok(out)
}

fn of(e: crate::error::ApiError) -> AwsError {
    AwsError::of(e, Api::Elbv2)
}

pub async fn add(st: &AppState, arns: &Arns, params: &mut Params) -> Result<Vec<Node>> {
    let targets = resources(st, arns, params).await?;
    let tags = parse(params)?;
    if tags.is_empty() {
        return Err(validation("At least one tag must be given (Tags.member.1.Key)"));
    }
    params.finish()?;
    let resources: Vec<Resource> = targets.into_iter().map(|(_, r)| r).collect();
    tags::change(&st.db, &resources, Change::Set(&tags)).await.map_err(of)?;
    Ok(Vec::new())
}

pub async fn remove(st: &AppState, arns: &Arns, params: &mut Params) -> Result<Vec<Node>> {
    let targets = resources(st, arns, params).await?;
    let keys: Vec<(String, Option<String>)> = params.list("TagKeys.member")?.into_iter().map(|k| (k, None)).collect();
    if keys.is_empty() {
        return Err(validation("At least one tag key must be given (TagKeys.member.1)"));
    }
    params.finish()?;
    let resources: Vec<Resource> = targets.into_iter().map(|(_, r)| r).collect();
    tags::change(&st.db, &resources, Change::Remove(&keys)).await.map_err(of)?;
    Ok(Vec::new())
}

pub async fn describe(st: &AppState, arns: &Arns, params: &mut Params) -> Result<Vec<Node>> {
    let targets = resources(st, arns, params).await?;
    params.finish()?;
    let resources: Vec<Resource> = targets.iter().map(|(_, r)| r.clone()).collect();
    let all = elbv2::tags_of(&st.db, &resources).await.map_err(of)?;
    let described = targets.into_iter().zip(all).map(|((arn, _), tags)| {
        let tags = tags.into_iter().map(|(k, v)| vec![text("Key", k), text("Value", v)]);
        vec![text("ResourceArn", arn), members("Tags", tags.collect::<Vec<_>>())]
    });
    Ok(vec![members("TagDescriptions", described.collect::<Vec<_>>())])
}

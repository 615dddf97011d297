//! Tags: AddTags, RemoveTags and DescribeTags on load balancers, kept by the store by the load balancer's native
//! ID (`store::tags`, `Resource::LoadBalancer`) and deleted with it; and CreateLoadBalancer's `Tags`. ELB's
//! rules: at most 50 a load balancer (`TooManyTags`, a request that would pass it changes nothing), a key given
//! twice is `DuplicateTagKeys`, keys of 1–128 characters and values of at most 256 from its character set.

use std::collections::BTreeMap;

use fakecloud_api::limits::TAGS_MAX;

use super::common::{elb, missing, named, validation};
use crate::aws::error::{AwsError, Result};
use crate::aws::query::Params;
use crate::aws::xml::{Node, members, text};
use crate::http::AppState;
use crate::store;
use crate::store::tags::{Change, Resource};

/// The bounds of a tag, in characters (botocore's `TagKey` and `TagValue`).
const KEY_MAX_CHARS: usize = 128;
const VALUE_MAX_CHARS: usize = 256;
/// How many load balancers one DescribeTags names (`LoadBalancerNamesMax20`).
const DESCRIBED_MAX: usize = 20;

/// A key's or value's characters: letters, spaces, digits and `_.:/=+-@` (botocore's pattern
/// `^([\p{L}\p{Z}\p{N}_.:/=+\-@]*)$`).
fn allowed(s: &str) -> bool {
    s.chars().all(|c| c.is_alphanumeric() || c.is_whitespace() || "_.:/=+-@".contains(c))
}

fn check(key: &str, value: &str) -> Result<()> {
    let n = key.chars().count();
    if n == 0 || n > KEY_MAX_CHARS || !allowed(key) {
        return Err(validation(format!(
            "Tag key '{key}' is not valid: 1 to {KEY_MAX_CHARS} letters, digits, spaces or _.:/=+-@"
        )));
    }
    if key.get(..4).is_some_and(|p| p.eq_ignore_ascii_case("aws:")) {
        return Err(validation(format!("Tag keys starting with 'aws:' are reserved for AWS ({key})")));
    }
    if value.chars().count() > VALUE_MAX_CHARS || !allowed(value) {
        return Err(validation(format!(
            "The value of tag '{key}' is not valid: at most {VALUE_MAX_CHARS} letters, digits, spaces or _.:/=+-@"
        )));
    }
    Ok(())
}

/// The tags of a `Tags.member.N.Key`/`Value` list (a missing value is an empty one), checked.
pub(super) fn parse(list: Vec<Params>) -> Result<BTreeMap<String, String>> {
    let mut tags = BTreeMap::new();
    for mut tag in list {
        let key = tag.required("Key")?;
        let value = tag.take("Value").unwrap_or_default();
        tag.finish()?;
        check(&key, &value)?;
        if tags.insert(key.clone(), value).is_some() {
            return Err(AwsError::client("DuplicateTagKeys", format!("Tag key '{key}' is given more than once")));
        }
    }
    if tags.len() > TAGS_MAX {
        return Err(AwsError::client(
            "TooManyTags",
            format!("The request has {} tags; a load balancer has at most {TAGS_MAX}", tags.len()),
        ));
    }
    Ok(tags)
}

/// The one load balancer `LoadBalancerNames` names (AddTags and RemoveTags take one).
async fn the_one(st: &AppState, params: &mut Params) -> Result<Resource> {
    let names = params.members("LoadBalancerNames")?;
    let [name] = names.as_slice() else {
        return Err(validation("LoadBalancerNames must name one load balancer"));
    };
    let lbs = named(st, std::slice::from_ref(name)).await?;
    Ok(Resource::LoadBalancer(lbs[name].id.clone()))
}

pub async fn add(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let tags = parse(params.member_structures("Tags")?)?;
    if tags.is_empty() {
        return Err(missing("Tags.member.1"));
    }
    let target = the_one(st, params).await?;
    params.finish()?;
    store::tags::change(&st.db, &[target], Change::Set(&tags)).await.map_err(elb)?;
    Ok(Vec::new())
}

pub async fn remove(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let mut keys = Vec::new();
    for mut tag in params.member_structures("Tags")? {
        keys.push((tag.required("Key")?, None));
        tag.finish()?;
    }
    if keys.is_empty() {
        return Err(missing("Tags.member.1"));
    }
    let target = the_one(st, params).await?;
    params.finish()?;
    store::tags::change(&st.db, &[target], Change::Remove(&keys)).await.map_err(elb)?;
    Ok(Vec::new())
}

pub async fn describe(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let names = params.members("LoadBalancerNames")?;
    if names.is_empty() || names.len() > DESCRIBED_MAX {
        return Err(validation(format!("LoadBalancerNames must name 1 to {DESCRIBED_MAX} load balancers")));
    }
    params.finish()?;
    let lbs = named(st, &names).await?;
    let ids: Vec<String> = lbs.values().map(|lb| lb.id.clone()).collect();
    let mut tags = store::tags::of(&st.db, &ids).await.map_err(elb)?;
    let described = names.iter().map(|name| {
        let of_lb = tags.remove(&lbs[name].id).unwrap_or_default();
        vec![
            text("LoadBalancerName", name.clone()),
            members("Tags", of_lb.into_iter().map(|(k, v)| vec![text("Key", k), text("Value", v)])),
        ]
    });
    Ok(vec![members("TagDescriptions", described.collect::<Vec<_>>())])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn tags(form: &str) -> Result<BTreeMap<String, String>> {
        parse(Params::parse("", form.as_bytes()).unwrap().member_structures("Tags").unwrap())
    }

    #[test]
    fn tags_follow_elbs_rules() {
        let ok = tags("Tags.member.1.Key=kubernetes.io%2Fcluster%2Fc1&Tags.member.1.Value=owned&Tags.member.2.Key=a")
            .unwrap();
        assert_eq!((ok["kubernetes.io/cluster/c1"].as_str(), ok["a"].as_str()), ("owned", ""));
        let code = |form: &str| tags(form).unwrap_err().code.to_string();
        assert_eq!(code("Tags.member.1.Key=a&Tags.member.2.Key=a"), "DuplicateTagKeys");
        assert_eq!(code("Tags.member.1.Key=a%23b"), "ValidationError");
        assert_eq!(code("Tags.member.1.Key=aws%3Ax"), "ValidationError");
        assert_eq!(code(&format!("Tags.member.1.Key={}", "k".repeat(129))), "ValidationError");
        assert_eq!(code(&format!("Tags.member.1.Key=k&Tags.member.1.Value={}", "v".repeat(257))), "ValidationError");
        let many = (1..=51).map(|i| format!("Tags.member.{i}.Key=k{i}")).collect::<Vec<_>>().join("&");
        assert_eq!(code(&many), "TooManyTags");
    }
}

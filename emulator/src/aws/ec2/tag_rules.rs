//! The rules EC2 checks a tag against (its "Tag restrictions"), for CreateTags and DeleteTags and for the tags a
//! create's `TagSpecification` gives what it makes (RunInstances, CreateSecurityGroup, CreateRouteTable).

use std::collections::BTreeMap;

use fakecloud_api::limits::TAGS_MAX;

use crate::aws::error::{AwsError, Result};
use crate::aws::query::Params;

/// EC2's bounds on a tag, in characters (EC2's "Tag restrictions").
const KEY_MAX_CHARS: usize = 128;
const VALUE_MAX_CHARS: usize = 256;

/// A tag key as EC2 takes it: 1 to 128 characters, not in the `aws:` prefix AWS keeps for itself.
pub fn check_key(key: &str) -> Result<()> {
    let n = key.chars().count();
    if n == 0 || n > KEY_MAX_CHARS {
        return Err(AwsError::invalid_value(format!("Tag key must be 1 to {KEY_MAX_CHARS} characters long (got {n})")));
    }
    if key.get(..4).is_some_and(|p| p.eq_ignore_ascii_case("aws:")) {
        return Err(AwsError::invalid_value(format!(
            "Tag keys starting with 'aws:' are reserved for internal use ({key})"
        )));
    }
    Ok(())
}

fn check_value(key: &str, value: &str) -> Result<()> {
    let n = value.chars().count();
    if n > VALUE_MAX_CHARS {
        return Err(AwsError::invalid_value(format!(
            "Tag value for key '{key}' must be at most {VALUE_MAX_CHARS} characters long (got {n})"
        )));
    }
    Ok(())
}

/// The tags of a `Tag.N.Key`/`Tag.N.Value` list (a missing value is an empty one, as EC2 takes it), checked;
/// a key given twice is refused.
pub fn parse(list: Vec<Params>) -> Result<BTreeMap<String, String>> {
    if list.len() > TAGS_MAX {
        return Err(AwsError::client(
            "TagLimitExceeded",
            format!("The request has {} tags; a resource has at most {TAGS_MAX}", list.len()),
        ));
    }
    let mut tags = BTreeMap::new();
    for mut tag in list {
        let key = tag.required("Key")?;
        let value = tag.take("Value").unwrap_or_default();
        tag.finish()?;
        check_key(&key)?;
        check_value(&key, &value)?;
        if tags.insert(key.clone(), value).is_some() {
            return Err(AwsError::invalid_value(format!("The tag key '{key}' is given more than once")));
        }
    }
    Ok(tags)
}

/// The tags a create's `TagSpecification.N` lists give the resource it makes, of EC2 type `kind` (`instance`,
/// `security-group`, `route-table`): a specification for another type is refused, as EC2 refuses it.
pub fn specified(params: &mut Params, kind: &str) -> Result<BTreeMap<String, String>> {
    let mut tags = BTreeMap::new();
    for mut spec in params.structures("TagSpecification")? {
        let given = spec.required("ResourceType")?;
        if given != kind {
            return Err(AwsError::invalid_value(format!(
                "'{given}' is not a valid taggable resource type for this operation (it makes a {kind})"
            )));
        }
        let spec_tags = parse(spec.structures("Tag")?)?;
        spec.finish()?;
        tags.extend(spec_tags);
    }
    Ok(tags)
}

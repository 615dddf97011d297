//! What an AWS call's parameters name, as each API reads them for the fault engine (`ec2::about`, `elb::about`,
//! `elbv2::about`; `about` puts it together): one resource, or what a create asks for.

use std::collections::BTreeMap;

use super::query::Params;
use crate::faults::Subject;
use crate::http::AppState;
use crate::store;

/// What a call names, as its API reads it from its parameters.
pub enum Named {
    /// One resource, by the cloud's ID.
    Resource(String),
    /// A create: the name, zone and tags it asks for.
    Create(Subject),
    /// Several resources, or none.
    Nothing,
}

/// The load balancer named `name` (classic ELB names them so; ELBv2 too in a describe).
pub async fn load_balancer_named(st: &AppState, name: &str) -> Named {
    // One that cannot be read now is about nothing a rule names.
    match store::load_balancers::id_named(&st.db, name).await {
        Ok(Some(id)) => Named::Resource(id),
        Ok(None) | Err(_) => Named::Nothing,
    }
}

/// The value of the list `prefix` (`InstanceId` for `InstanceId.1`), if it has exactly one.
pub fn only<'p>(params: &'p Params, prefix: &str) -> Option<&'p str> {
    params.peek(&format!("{prefix}.2")).is_none().then(|| params.peek(&format!("{prefix}.1"))).flatten()
}

/// The tags a create asks for: parameters `<prefix>….Key` and their `<prefix>….Value` (`Tags.member.1.Key`,
/// `TagSpecification.1.Tag.1.Key`).
pub fn tags(params: &Params, prefix: &str) -> BTreeMap<String, String> {
    params
        .iter()
        .filter_map(|(name, key)| {
            let at = name.strip_prefix(prefix)?.strip_suffix(".Key")?;
            let value = params.peek(&format!("{prefix}{at}.Value")).unwrap_or_default();
            Some((key.to_string(), value.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_list_of_one_names_it_and_tags_are_read_under_their_prefix() {
        let p = Params::parse("", b"InstanceId.1=i-1&Tags.member.1.Key=a&Tags.member.1.Value=b&Tags.member.2.Key=c")
            .unwrap();
        assert_eq!(only(&p, "InstanceId"), Some("i-1"));
        assert_eq!(tags(&p, "Tags.member."), BTreeMap::from([("a".into(), "b".into()), ("c".into(), String::new())]));
        let two = Params::parse("", b"InstanceId.1=i-1&InstanceId.2=i-2").unwrap();
        assert_eq!(only(&two, "InstanceId"), None);
        assert_eq!(only(&two, "GroupId"), None);
    }
}

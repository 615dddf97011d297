//! EC2's filters: a resource passes a filter when one of its values matches one of the filter's, `*` matching
//! any run of characters and `?` any one, and passes a request's filters when it passes each. And a resource's
//! tags, as every Describe filters and shows them.

use std::collections::BTreeMap;

use crate::aws::error::{AwsError, Result};
use crate::aws::query::Filter;
use crate::aws::xml::{Node, items, text};

/// `<tagSet>` of `tags`.
pub fn tag_set(tags: &BTreeMap<String, String>) -> Node {
    items("tagSet", tags.iter().map(|(k, v)| vec![text("key", k.clone()), text("value", v.clone())]))
}

/// A value filter `name`'s candidates match: any of `values`, with EC2's wildcards.
pub fn any(values: &[String], candidate: &str) -> bool {
    values.iter().any(|v| glob(v, candidate))
}

/// Whether `name` is one of the tag filters every Describe has: `tag:<key>`, `tag-key`, `tag-value`.
pub fn is_tag(name: &str) -> bool {
    matches!(name, "tag-key" | "tag-value") || name.strip_prefix("tag:").is_some_and(|k| !k.is_empty())
}

/// A resource with `tags` passes the tag filter `f` ([`is_tag`]): `tag:<key>` matches that tag's value,
/// `tag-key` any key, `tag-value` any value.
pub fn tags_pass(f: &Filter, tags: &BTreeMap<String, String>) -> bool {
    match f.name.as_str() {
        "tag-key" => tags.keys().any(|k| any(&f.values, k)),
        "tag-value" => tags.values().any(|v| any(&f.values, v)),
        name => name.strip_prefix("tag:").and_then(|k| tags.get(k)).is_some_and(|v| any(&f.values, v)),
    }
}

/// The refusal of a filter the operation does not have.
pub fn unknown(f: &Filter) -> AwsError {
    AwsError::invalid_value(format!("The filter '{}' is invalid", f.name))
}

/// Check each filter's name with `known` before any resource is read: an unknown filter is an error, not a
/// filter nothing passes.
pub fn check(filters: &[Filter], known: impl Fn(&str) -> bool) -> Result<()> {
    match filters.iter().find(|f| !known(&f.name)) {
        Some(f) => Err(unknown(f)),
        None => Ok(()),
    }
}

/// `text` matches `pattern` (`*`: any run, `?`: any one character), by backtracking to the last `*`.
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(c) if *c == '?' || *c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_as_ec2s_do() {
        for (pattern, text, matches) in [
            ("web", "web", true),
            ("web", "web-1", false),
            ("web*", "web-1", true),
            ("*-1", "web-1", true),
            ("w?b-*", "wab-12", true),
            ("*", "", true),
            ("?", "", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
        ] {
            assert_eq!(glob(pattern, text), matches, "{pattern} on {text}");
        }
    }
}

//! The Query protocol's request: `Action`, `Version` and the operation's parameters, from a POST's
//! `application/x-www-form-urlencoded` body or a GET's query string. An operation takes the parameters it
//! knows ([`Params::take`], [`Params::list`], [`Params::filters`]); one left over is refused, as EC2 does.

use std::collections::BTreeMap;

use super::error::{AwsError, Result};

/// The most parameters a request may have: far past what any operation takes (1,000 instance IDs), bounded.
const PARAMS_MAX: usize = 4096;
/// The longest parameter name: `Filter.N.Value.M` with large indices is well within it.
const NAME_MAX_BYTES: usize = 128;
/// The largest index of a list (`InstanceId.N`, `Filter.N`, `Filter.N.Value.M`).
const INDEX_MAX: usize = 1000;

/// A request's parameters, by name; or a structure's members (`Placement.AvailabilityZone` is `Placement`'s
/// `AvailabilityZone`), named in errors by their full name.
#[derive(Debug, Default)]
pub struct Params {
    map: BTreeMap<String, String>,
    /// `Placement.` or `Tag.1.` for a structure's members, empty for the request's own.
    path: String,
}

/// A `Filter.N`: its name and values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    pub name: String,
    pub values: Vec<String>,
}

impl Params {
    /// The parameters of `query` and `form` (a POST may have both; a name in both is refused).
    pub fn parse(query: &str, form: &[u8]) -> Result<Self> {
        let mut params = BTreeMap::new();
        for source in [query.as_bytes(), form] {
            // The bytes are UTF-8 once decoded, or the request is not what its sender meant: refused, not
            // decoded lossily into a value nobody sent.
            for (name, value) in form_urlencoded::parse(source) {
                if name.contains('\u{FFFD}') || value.contains('\u{FFFD}') {
                    return Err(malformed("a parameter that is not UTF-8"));
                }
                if name.is_empty() || name.len() > NAME_MAX_BYTES {
                    return Err(malformed(&format!("a parameter name of {} bytes", name.len())));
                }
                if params.len() == PARAMS_MAX {
                    return Err(malformed(&format!("more than {PARAMS_MAX} parameters")));
                }
                if params.insert(name.to_string(), value.into_owned()).is_some() {
                    return Err(AwsError::invalid_value(format!("The parameter {name} is given more than once")));
                }
            }
        }
        Ok(Self { map: params, path: String::new() })
    }

    /// Every parameter, by name, left in place.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.map.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The parameter `name`, left in place.
    pub fn peek(&self, name: &str) -> Option<&str> {
        self.map.get(name).map(String::as_str)
    }

    /// The parameter `name`, taken.
    pub fn take(&mut self, name: &str) -> Option<String> {
        self.map.remove(name)
    }

    /// The parameter `name`, which the operation needs.
    pub fn required(&mut self, name: &str) -> Result<String> {
        self.take(name).ok_or_else(|| {
            AwsError::client(
                "MissingParameter",
                format!("The request must contain the parameter {}", self.name_of(name)),
            )
        })
    }

    /// An integer parameter within `min..=max`.
    pub fn int(&mut self, name: &str, min: u32, max: u32) -> Result<Option<u32>> {
        let Some(v) = self.take(name) else { return Ok(None) };
        match v.parse::<u32>() {
            Ok(n) if (min..=max).contains(&n) => Ok(Some(n)),
            _ => Err(AwsError::invalid_value(format!(
                "Value ({v}) for parameter {} is invalid. Expecting a value between {min} and {max}",
                self.name_of(name)
            ))),
        }
    }

    /// An integer parameter within `min..=max`, which the operation needs.
    pub fn required_int(&mut self, name: &str, min: u32, max: u32) -> Result<u32> {
        self.int(name, min, max)?.ok_or_else(|| {
            AwsError::client(
                "MissingParameter",
                format!("The request must contain the parameter {}", self.name_of(name)),
            )
        })
    }

    /// The place a `NextToken` names, the start without one. The face's tokens are its own: a number (a count of
    /// what the pages before passed over, or the last one's position), refused as EC2 refuses a token it did not
    /// give.
    pub fn next_token<T: std::str::FromStr + Default>(token: Option<&str>) -> Result<T> {
        token.map_or(Ok(T::default()), |t| {
            t.parse().map_err(|_| {
                AwsError::client("InvalidPaginationToken", "The pagination token is invalid or has expired")
            })
        })
    }

    /// A boolean parameter, `false` if absent.
    pub fn bool(&mut self, name: &str) -> Result<bool> {
        Ok(self.flag(name)?.unwrap_or(false))
    }

    /// A boolean parameter if given (`true` or `false`, as the SDKs send them).
    pub fn flag(&mut self, name: &str) -> Result<Option<bool>> {
        match self.take(name).as_deref() {
            None => Ok(None),
            Some("false") => Ok(Some(false)),
            Some("true") => Ok(Some(true)),
            Some(v) => Err(AwsError::invalid_value(format!(
                "Value ({v}) for parameter {} is invalid. Expecting true or false",
                self.name_of(name)
            ))),
        }
    }

    /// The list `prefix.1`, `prefix.2`, … in index order.
    pub fn list(&mut self, prefix: &str) -> Result<Vec<String>> {
        let mut found = BTreeMap::new();
        let dotted = format!("{prefix}.");
        let names: Vec<String> = self.map.keys().filter(|k| k.starts_with(&dotted)).cloned().collect();
        for name in names {
            let index = index(&name, &name[dotted.len()..])?;
            if let Some(v) = self.map.remove(&name) {
                found.insert(index, v);
            }
        }
        Ok(found.into_values().collect())
    }

    /// The list `prefix.member.1`, `prefix.member.2`, … (the Query protocol's lists outside EC2); `prefix=` alone is
    /// an empty list, as the SDKs send one (botocore's and aws-sdk-go-v2's query serializers).
    pub fn members(&mut self, prefix: &str) -> Result<Vec<String>> {
        let empty = self.take_empty(prefix)?;
        let found = self.list(&format!("{prefix}.member"))?;
        self.not_both(prefix, empty, found.is_empty())?;
        Ok(found)
    }

    /// The list of structures `prefix.member.N.…`, in index order; `prefix=` alone is an empty list.
    pub fn member_structures(&mut self, prefix: &str) -> Result<Vec<Params>> {
        let empty = self.take_empty(prefix)?;
        let found = self.structures(&format!("{prefix}.member"))?;
        self.not_both(prefix, empty, found.is_empty())?;
        Ok(found)
    }

    /// Whether `prefix` is given as an empty list (`prefix=`); a value there is not a list.
    fn take_empty(&mut self, prefix: &str) -> Result<bool> {
        match self.map.get(prefix).map(String::as_str) {
            None => Ok(false),
            Some("") => {
                self.map.remove(prefix);
                Ok(true)
            }
            Some(_) => Err(AwsError::invalid_value(format!(
                "The parameter {} is a list: give its members as {0}.member.N",
                self.name_of(prefix)
            ))),
        }
    }

    fn not_both(&self, prefix: &str, empty: bool, none: bool) -> Result<()> {
        if empty && !none {
            return Err(AwsError::invalid_value(format!(
                "The list {} is given both empty and with members",
                self.name_of(prefix)
            )));
        }
        Ok(())
    }

    /// Whether nothing was given (a structure none of whose members the request has).
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// `Filter.N.Name` and `Filter.N.Value.M`, in index order; a filter needs a name and a value.
    pub fn filters(&mut self) -> Result<Vec<Filter>> {
        let mut by_index: BTreeMap<usize, (Option<String>, BTreeMap<usize, String>)> = BTreeMap::new();
        let names: Vec<String> = self.map.keys().filter(|k| k.starts_with("Filter.")).cloned().collect();
        for name in names {
            let rest = &name["Filter.".len()..];
            let (n, field) = rest.split_once('.').ok_or_else(|| unknown(&name))?;
            let n = index(&name, n)?;
            let Some(value) = self.map.remove(&name) else { continue };
            let entry = by_index.entry(n).or_default();
            match field.split_once('.') {
                None if field == "Name" => entry.0 = Some(value),
                Some(("Value", m)) => {
                    entry.1.insert(index(&name, m)?, value);
                }
                _ => return Err(unknown(&name)),
            }
        }
        by_index
            .into_iter()
            .map(|(n, (name, values))| {
                let name = name.ok_or_else(|| {
                    AwsError::client(
                        "MissingParameter",
                        format!("The request must contain the parameter Filter.{n}.Name"),
                    )
                })?;
                if values.is_empty() {
                    return Err(AwsError::invalid_value(format!(
                        "The filter '{name}' has no value (Filter.{n}.Value.1)"
                    )));
                }
                Ok(Filter { name, values: values.into_values().collect() })
            })
            .collect()
    }

    /// The members of the structure `prefix` (`Placement.…`), taken; empty if none was given.
    pub fn structure(&mut self, prefix: &str) -> Params {
        let dotted = format!("{prefix}.");
        let names: Vec<String> = self.map.keys().filter(|k| k.starts_with(&dotted)).cloned().collect();
        let mut map = BTreeMap::new();
        for name in names {
            if let Some(v) = self.map.remove(&name) {
                map.insert(name[dotted.len()..].to_string(), v);
            }
        }
        Params { map, path: format!("{}{dotted}", self.path) }
    }

    /// The list of structures `prefix.N.…` (`Tag.1.Key`, `Tag.1.Value`), in index order: each one's members.
    pub fn structures(&mut self, prefix: &str) -> Result<Vec<Params>> {
        let mut by_index: BTreeMap<usize, Params> = BTreeMap::new();
        let dotted = format!("{prefix}.");
        let names: Vec<String> = self.map.keys().filter(|k| k.starts_with(&dotted)).cloned().collect();
        for name in names {
            let full = format!("{}{name}", self.path);
            let (n, member) = name[dotted.len()..].split_once('.').ok_or_else(|| unknown(&full))?;
            let i = index(&full, n)?;
            let Some(v) = self.map.remove(&name) else { continue };
            let item = by_index
                .entry(i)
                .or_insert_with(|| Params { map: BTreeMap::new(), path: format!("{}{dotted}{i}.", self.path) });
            item.map.insert(member.to_string(), v);
        }
        Ok(by_index.into_values().collect())
    }

    /// The full name of `name`, as the request gave it (`Tag.1.Key`).
    pub fn name_of(&self, name: &str) -> String {
        format!("{}{name}", self.path)
    }

    /// Every parameter was taken: one left is one the operation does not know. A write checks it before it
    /// changes anything.
    pub fn finish(&mut self) -> Result<()> {
        match std::mem::take(&mut self.map).into_keys().next() {
            Some(name) => Err(unknown(&format!("{}{name}", self.path))),
            None => Ok(()),
        }
    }
}

/// A list's index: 1 to [`INDEX_MAX`].
fn index(name: &str, n: &str) -> Result<usize> {
    match n.parse::<usize>() {
        Ok(i) if (1..=INDEX_MAX).contains(&i) && !n.starts_with('0') => Ok(i),
        _ => Err(AwsError::invalid_value(format!(
            "The parameter {name} has an invalid index; indices are 1 to {INDEX_MAX}"
        ))),
    }
}

fn unknown(name: &str) -> AwsError {
    AwsError::client("UnknownParameter", format!("The parameter {name} is not recognized"))
}

fn malformed(what: &str) -> AwsError {
    AwsError::client("MalformedQueryString", format!("The request has {what}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn lists_and_filters_are_read_in_index_order() {
        let form = b"Action=DescribeInstances&InstanceId.2=i-b&InstanceId.1=i-a&InstanceId.10=i-j\
                     &Filter.1.Name=tag%3Arole&Filter.1.Value.2=web&Filter.1.Value.1=db&Filter.2.Name=tag-key&Filter.2.Value.1=x+y";
        let mut p = Params::parse("Version=2016-11-15", form).unwrap();
        assert_eq!(p.take("Action").as_deref(), Some("DescribeInstances"));
        assert_eq!(p.take("Version").as_deref(), Some("2016-11-15"));
        assert_eq!(p.list("InstanceId").unwrap(), ["i-a", "i-b", "i-j"]);
        let filters = p.filters().unwrap();
        assert_eq!(
            filters,
            [
                Filter { name: "tag:role".into(), values: vec!["db".into(), "web".into()] },
                Filter { name: "tag-key".into(), values: vec!["x y".into()] },
            ]
        );
        p.finish().unwrap();
    }

    #[test]
    fn structures_and_lists_of_them_are_read_with_their_full_names_in_errors() {
        let form = b"Placement.AvailabilityZone=z&TagSpecification.2.ResourceType=instance\
                     &TagSpecification.1.Tag.1.Key=a&TagSpecification.1.Tag.2.Key=b&TagSpecification.1.Tag.2.Value=v";
        let mut p = Params::parse("", form).unwrap();
        let mut placement = p.structure("Placement");
        assert_eq!(placement.take("AvailabilityZone").as_deref(), Some("z"));
        placement.finish().unwrap();
        let mut specs = p.structures("TagSpecification").unwrap();
        assert_eq!(specs.len(), 2);
        let mut tags = specs[0].structures("Tag").unwrap();
        assert_eq!((tags[0].take("Key").as_deref(), tags[1].take("Value").as_deref()), (Some("a"), Some("v")));
        let e = tags[1].finish().unwrap_err();
        assert_eq!(
            (e.code.as_ref(), e.message.as_str()),
            ("UnknownParameter", "The parameter TagSpecification.1.Tag.2.Key is not recognized")
        );
        let e = specs[1].required("Tag.1.Key").unwrap_err();
        assert_eq!(e.message, "The request must contain the parameter TagSpecification.2.Tag.1.Key");
        assert_eq!(specs[1].flag("ResourceType").unwrap_err().code, "InvalidParameterValue");
        p.finish().unwrap();
        let mut p = Params::parse("", b"Tag.x.Key=a").unwrap();
        assert_eq!(p.structures("Tag").unwrap_err().code, "InvalidParameterValue");
        let mut p = Params::parse("", b"Tag.1=a").unwrap();
        assert_eq!(p.structures("Tag").unwrap_err().code, "UnknownParameter");
    }

    #[test]
    fn member_lists_are_read_in_index_order_and_an_empty_one_is_given_bare() {
        let form = b"Names.member.2=b&Names.member.1=a&Empty=&L.member.1.Key=k&L.member.1.Value=v";
        let mut p = Params::parse("", form).unwrap();
        assert_eq!(p.members("Names").unwrap(), ["a", "b"]);
        assert!(p.members("Empty").unwrap().is_empty());
        assert!(p.members("Absent").unwrap().is_empty());
        let mut l = p.member_structures("L").unwrap();
        assert_eq!((l[0].take("Key").as_deref(), l[0].take("Value").as_deref()), (Some("k"), Some("v")));
        assert!(l[0].is_empty());
        p.finish().unwrap();
        let mut p = Params::parse("", b"Names=a").unwrap();
        assert_eq!(p.members("Names").unwrap_err().code, "InvalidParameterValue");
        let mut p = Params::parse("", b"Names=&Names.member.1=a").unwrap();
        assert_eq!(p.members("Names").unwrap_err().code, "InvalidParameterValue");
    }

    #[test]
    fn unknown_duplicated_malformed_and_out_of_bounds_parameters_are_refused() {
        let code = |r: Result<()>| r.unwrap_err().code.to_string();
        let mut p = Params::parse("", b"Action=X&Bogus=1").unwrap();
        p.take("Action");
        assert_eq!(code(p.finish()), "UnknownParameter");
        assert_eq!(code(Params::parse("Action=X", b"Action=Y").map(|_| ())), "InvalidParameterValue");
        assert_eq!(code(Params::parse("", b"A=%FF").map(|_| ())), "MalformedQueryString");
        let mut p = Params::parse("", b"InstanceId.0=i-a").unwrap();
        assert_eq!(code(p.list("InstanceId").map(|_| ())), "InvalidParameterValue");
        let mut p = Params::parse("", b"InstanceId.1001=i-a").unwrap();
        assert_eq!(code(p.list("InstanceId").map(|_| ())), "InvalidParameterValue");
        let mut p = Params::parse("", b"Filter.1.Value.1=x").unwrap();
        assert_eq!(code(p.filters().map(|_| ())), "MissingParameter");
        let mut p = Params::parse("", b"Filter.1.Name=x&Filter.1.Nope=y").unwrap();
        assert_eq!(code(p.filters().map(|_| ())), "UnknownParameter");
        let mut p = Params::parse("", b"MaxResults=4").unwrap();
        assert_eq!(code(p.int("MaxResults", 5, 1000).map(|_| ())), "InvalidParameterValue");
        let many = (0..=PARAMS_MAX).map(|i| format!("P{i}=1")).collect::<Vec<_>>().join("&");
        assert_eq!(code(Params::parse("", many.as_bytes()).map(|_| ())), "MalformedQueryString");
    }
}

//! Input checks shared by the resources. Each error names the field and says what a valid value looks like.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::OnceLock;

use fakecloud_api::codes;
use fakecloud_api::limits::{PAGE_SIZE_DEFAULT, PAGE_SIZE_MAX, PAGE_SIZE_MIN, PORT_MIN, TAGS_MAX, WINDOW_SECONDS_MAX};
use ipnet::IpNet;
use regex::Regex;

use crate::error::{ApiError, Result};

/// A text field's rule, stated once: checked here, and written into the OpenAPI document (`http::openapi`)
/// from the same pattern and lengths, so the document cannot promise what the checks refuse.
#[derive(Debug)]
pub struct Text {
    /// Anchored, in the syntax JSON Schema (ECMA-262) and the `regex` crate share.
    pub pattern: Option<&'static str>,
    /// In characters (Unicode scalar values), as JSON Schema counts.
    pub min_chars: usize,
    pub max_chars: usize,
    /// What a valid value looks like, after the value in an error message.
    says: &'static str,
    compiled: OnceLock<Option<Regex>>,
}

impl Text {
    const fn new(pattern: Option<&'static str>, min_chars: usize, max_chars: usize, says: &'static str) -> Self {
        Self { pattern, min_chars, max_chars, says, compiled: OnceLock::new() }
    }

    pub fn matches(&self, value: &str) -> bool {
        let n = value.chars().count();
        let pattern_ok = match self.pattern {
            None => true,
            // A pattern that does not compile matches nothing (a unit test compiles every one).
            Some(p) => self.compiled.get_or_init(|| Regex::new(p).ok()).as_ref().is_some_and(|r| r.is_match(value)),
        };
        (self.min_chars..=self.max_chars).contains(&n) && pattern_ok
    }

    pub fn check(&self, field: &str, value: &str) -> Result<()> {
        if self.matches(value) {
            Ok(())
        } else {
            Err(ApiError::invalid(field, format!("{} {}", quoted(value), self.says)))
        }
    }

    /// The rule as JSON Schema keywords.
    pub fn schema(&self) -> serde_json::Value {
        let mut s = serde_json::json!({"minLength": self.min_chars, "maxLength": self.max_chars});
        if let Some(p) = self.pattern {
            s["pattern"] = p.into();
        }
        s
    }
}

/// The longest value an error message repeats, in characters: a 100 KB value is not sent back whole.
const ECHO_MAX_CHARS: usize = 64;

/// `value` quoted for an error message; a long one cut after [`ECHO_MAX_CHARS`], saying how long it was.
pub fn quoted(value: &str) -> String {
    let n = value.chars().count();
    if n <= ECHO_MAX_CHARS {
        format!("{value:?}")
    } else {
        let head: String = value.chars().take(ECHO_MAX_CHARS).collect();
        format!("{head:?}... ({n} characters)")
    }
}

/// An instance name: a lowercase RFC 1123 subdomain (what Kubernetes accepts as a node name).
pub static INSTANCE_NAME: Text = Text::new(
    Some(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$"),
    1,
    253,
    "is not a valid name: use lowercase letters, digits, '-' and '.', labels of at most 63 that start and end with \
     a letter or digit, at most 253 characters",
);
/// A load balancer's, route table's, fault rule's or rate limit's name.
pub static NAME: Text = Text::new(Some(r"^[A-Za-z0-9._-]+$"), 1, 255, "must be 1-255 letters, digits, '-', '_' or '.'");
/// A route's name: free text.
pub static ACCOUNT_ID: Text = Text::new(
    Some(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),
    1,
    63,
    "must be 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit",
);

pub static ROUTE_NAME: Text = Text::new(None, 1, 255, "must be 1-255 characters");
/// Tag keys look like Kubernetes label keys; values are free text.
pub static TAG_KEY: Text = Text::new(
    Some(r"^[A-Za-z0-9._/:-]+$"),
    1,
    128,
    "is not a tag key: 1-128 letters, digits, '-', '_', '.', '/' or ':'",
);
pub static TAG_VALUE: Text = Text::new(None, 0, 256, "is too long for a tag value: at most 256 characters");
/// The error code a fault rule answers with.
pub static FAULT_CODE: Text =
    Text::new(Some(r"^[A-Za-z0-9._-]+$"), 1, 100, "must be 1-100 letters, digits, '.', '_' or '-'");
/// A tag to match: `key=value`, or `key` for "has the tag".
pub static TAG_FILTER: Text = Text::new(
    Some(r"^[A-Za-z0-9._/:-]{1,128}(=[^\x00]{0,256})?$"),
    1,
    385,
    "is not key=value or key (keys: 1-128 letters, digits, '-', '_', '.', '/' or ':'; values: at most 256 \
     characters, no NUL)",
);
/// A tag given as `key=value`.
pub static TAG_PAIR: Text = Text::new(
    Some(r"^[A-Za-z0-9._/:-]{1,128}=[\s\S]{0,256}$"),
    2,
    385,
    "is not key=value (keys: 1-128 letters, digits, '-', '_', '.', '/' or ':'; values: at most 256 characters)",
);
/// `Idempotency-Key`.
pub static IDEMPOTENCY_KEY: Text =
    Text::new(Some(r"^[!-~]+$"), 1, 255, "must be 1-255 printable ASCII characters without spaces");
/// A page token is the position after which the next page starts.
pub static PAGE_TOKEN: Text = Text::new(Some(r"^[0-9]+$"), 1, 18, "is not a page token this API returned");
/// An HTTP health check's path: an origin-form request target (RFC 9112 3.2.1), a path with an optional query,
/// in the characters RFC 3986 allows there — no space, no control character, so it cannot end the request line
/// and write headers or a second request of its own.
pub static HEALTH_CHECK_PATH: Text = Text::new(
    Some(r"^/[A-Za-z0-9._~!$&'()*+,;=:@/%?-]*$"),
    1,
    1024,
    "is not a health check path: '/' then at most 1023 of the characters a URL path and query may hold (letters, \
     digits and -._~!$&'()*+,;=:@/%?; no spaces)",
);
/// An ID in a path (`/v1/instances/{id}`): the IDs this API hands out are far shorter.
pub static PATH_ID: Text = Text::new(None, 1, 128, "is not an ID this API returned (at most 128 characters)");
/// A snapshot's file name.
pub static SNAPSHOT_NAME: Text = Text::new(
    Some(r"^[A-Za-z0-9_-][A-Za-z0-9._-]*$"),
    1,
    128,
    "may contain only letters, digits, '.', '_' and '-', not start with '.', and be at most 128 characters",
);

/// Tags: at most [`TAGS_MAX`], keys and values as [`TAG_KEY`] and [`TAG_VALUE`] say.
pub fn tags(tags: &BTreeMap<String, String>) -> Result<()> {
    if tags.len() > TAGS_MAX {
        return Err(ApiError::invalid("tags", format!("at most {TAGS_MAX} tags (got {})", tags.len())));
    }
    for (k, v) in tags {
        TAG_KEY.check("tags", k)?;
        TAG_VALUE.check(&format!("tags.{k}"), v)?;
    }
    Ok(())
}

/// A network in CIDR form. With `strict`, host bits must be zero (a route destination). IPv4 octets with
/// leading zeros are refused: some parsers read `010` as octal 8, others as decimal 10.
pub fn cidr(field: &str, value: &str, strict: bool) -> Result<IpNet> {
    let bad = |why: &str| {
        ApiError::bad_request(
            codes::INVALID_CIDR,
            format!("{field}: {value:?} is not a CIDR such as 10.244.1.0/24 or fd00::/64{why}"),
        )
    };
    let (addr, prefix) = value.split_once('/').ok_or_else(|| bad(""))?;
    // std's parser, unlike ipnet's, refuses leading zeros (in IPv4 and in IPv4 embedded in IPv6).
    let addr: IpAddr = addr.parse().map_err(|_| {
        let zero_led =
            |octet: &str| octet.len() > 1 && octet.starts_with('0') && octet.bytes().all(|b| b.is_ascii_digit());
        let dotted = addr.rsplit(':').next().unwrap_or(addr);
        bad(if dotted.contains('.') && dotted.split('.').any(zero_led) {
            " (IPv4 octets must not have leading zeros)"
        } else {
            ""
        })
    })?;
    let prefix: u8 = prefix.parse().map_err(|_| bad(""))?;
    let net = fakecloud_api::net::canonical_net(IpNet::new(addr, prefix).map_err(|_| bad(""))?);
    if strict && net.trunc() != net {
        return Err(ApiError::bad_request(
            codes::INVALID_CIDR,
            format!("{field}: {value} has host bits set; did you mean {}?", net.trunc()),
        ));
    }
    Ok(net)
}

/// A number the API bounds (see `fakecloud_api::limits`): `min..=max`, else a 400 that names the field and the
/// range. NaN is outside every range.
pub fn in_range<T: PartialOrd + std::fmt::Display + Copy>(field: &str, v: T, min: T, max: T) -> Result<T> {
    if v >= min && v <= max {
        Ok(v)
    } else {
        Err(ApiError::invalid(field, format!("must be between {min} and {max} (got {v})")))
    }
}

/// When a window of `duration_seconds` from `now` ends (Unix ms): `None` for no end; at most a week.
pub fn window_end(field: &str, duration_seconds: Option<f64>, now: i64) -> Result<Option<i64>> {
    match duration_seconds {
        None => Ok(None),
        Some(d) if d > 0.0 && d <= WINDOW_SECONDS_MAX => Ok(Some(now.saturating_add((d * 1000.0) as i64))),
        Some(d) => {
            Err(ApiError::invalid(field, format!("must be above 0 and at most {WINDOW_SECONDS_MAX} (a week; got {d})")))
        }
    }
}

pub fn port(field: &str, p: u16) -> Result<()> {
    in_range(field, p, PORT_MIN, u16::MAX).map(|_| ())
}

/// `page_size` for list calls.
pub fn page_size(v: Option<u32>) -> Result<i64> {
    Ok(i64::from(in_range("page_size", v.unwrap_or(PAGE_SIZE_DEFAULT), PAGE_SIZE_MIN, PAGE_SIZE_MAX)?))
}

/// A page token is the position after which the next page starts.
pub fn page_token(v: Option<&str>) -> Result<i64> {
    match v {
        None => Ok(0),
        Some(t) => t.parse::<i64>().ok().filter(|_| PAGE_TOKEN.matches(t)).ok_or_else(|| {
            ApiError::bad_request(codes::INVALID_PAGE_TOKEN, format!("page_token {t:?} is not one this API returned"))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_rfc1123() {
        for ok in ["node-1", "a", "worker.zone-a", "x1", &"x".repeat(63)] {
            assert!(INSTANCE_NAME.check("name", ok).is_ok(), "{ok}");
        }
        for bad in ["", "Node", "-a", "a-", "a..b", "a_b", &"x".repeat(64), &["x"; 128].join(".")] {
            let err = INSTANCE_NAME.check("name", bad).unwrap_err();
            assert!(err.message.starts_with("name:"), "{}", err.message);
        }
    }

    #[test]
    fn every_pattern_compiles() {
        for rule in [
            &INSTANCE_NAME,
            &NAME,
            &ROUTE_NAME,
            &TAG_KEY,
            &TAG_VALUE,
            &TAG_FILTER,
            &TAG_PAIR,
            &FAULT_CODE,
            &IDEMPOTENCY_KEY,
            &HEALTH_CHECK_PATH,
            &PATH_ID,
            &PAGE_TOKEN,
            &SNAPSHOT_NAME,
        ] {
            if let Some(p) = rule.pattern {
                assert!(Regex::new(p).is_ok(), "{p}");
            }
        }
        assert!(ROUTE_NAME.matches("é") && !ROUTE_NAME.matches(&"é".repeat(256)), "lengths count characters");
        assert!(TAG_VALUE.matches(""));
    }

    #[test]
    fn route_cidrs_must_be_networks() {
        assert!(cidr("destination", "10.244.1.0/24", true).is_ok());
        assert!(cidr("destination", "fd00:10:244::/64", true).is_ok());
        let err = cidr("destination", "10.244.1.5/24", true).unwrap_err();
        assert!(err.message.contains("did you mean 10.244.1.0/24"), "{}", err.message);
        assert_eq!(cidr("destination", "10.0.0.0/33", true).unwrap_err().code, codes::INVALID_CIDR);
        assert!(cidr("source_ranges[0]", "10.1.2.3/8", false).is_ok());
        for zeros in ["010.0.0.0/8", "10.0.0.00/32", "::ffff:10.0.0.01/128"] {
            assert!(cidr("destination", zeros, false).unwrap_err().message.contains("leading zeros"), "{zeros}");
        }
        assert_eq!(cidr("destination", "FD00:0::/64", true).unwrap().to_string(), "fd00::/64");
        // IPv4-mapped networks are the IPv4 networks they map.
        assert_eq!(cidr("destination", "::ffff:10.244.1.0/120", true).unwrap().to_string(), "10.244.1.0/24");
        assert_eq!(cidr("source_ranges[0]", "::ffff:127.0.0.1/128", false).unwrap().to_string(), "127.0.0.1/32");
    }

    #[test]
    fn health_check_paths_are_request_targets() {
        for ok in ["/", "/healthz", "/a/b?x=1&y=%20", "/~user/p;v=1"] {
            assert!(HEALTH_CHECK_PATH.matches(ok), "{ok}");
        }
        for bad in ["", "x", "/x HTTP/1.1", "/x\r\nHost: internal", "/\t", &format!("/{}", "a".repeat(1024))] {
            assert!(!HEALTH_CHECK_PATH.matches(bad), "{bad:?}");
        }
    }

    #[test]
    fn long_values_are_not_echoed_whole() {
        let err = IDEMPOTENCY_KEY.check("Idempotency-Key", &"k".repeat(60_000)).unwrap_err();
        assert!(err.message.len() < 300 && err.message.contains("60000 characters"), "{}", err.message);
        assert_eq!(quoted("abc"), "\"abc\"");
    }

    #[test]
    fn page_parameters_are_bounded() {
        assert_eq!(page_size(None).unwrap(), 100);
        assert!(page_size(Some(0)).is_err());
        assert!(page_size(Some(1001)).is_err());
        assert_eq!(page_token(Some("42")).unwrap(), 42);
        assert_eq!(page_token(Some("abc")).unwrap_err().code, codes::INVALID_PAGE_TOKEN);
    }
}

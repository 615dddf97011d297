//! Input checks shared by the resources. Each error names the field and says what a valid value looks like.

use std::collections::BTreeMap;
use std::net::IpAddr;

use fakecloud_api::codes;
use fakecloud_api::limits::WINDOW_SECONDS_MAX;
use ipnet::IpNet;

use crate::error::{ApiError, Result};

/// A lowercase RFC 1123 subdomain (what Kubernetes accepts as a node name), at most 253 characters.
pub fn dns_subdomain(field: &str, value: &str) -> Result<()> {
    let ok = !value.is_empty()
        && value.len() <= 253
        && value.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(
            field,
            format!(
                "{value:?} is not a valid name: use lowercase letters, digits, '-' and '.', start and end with a letter or digit, at most 253 characters"
            ),
        ))
    }
}

/// Letters, digits and `-`, 1–255 characters: a load balancer or route-table name.
pub fn simple_name(field: &str, value: &str) -> Result<()> {
    if value.is_empty()
        || value.len() > 255
        || !value.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
    {
        return Err(ApiError::invalid(field, format!("{value:?} must be 1-255 letters, digits, '-', '_' or '.'")));
    }
    Ok(())
}

/// Tag keys look like Kubernetes label keys; values are free text up to 256 characters.
pub fn tags(tags: &BTreeMap<String, String>) -> Result<()> {
    if tags.len() > 50 {
        return Err(ApiError::invalid("tags", format!("at most 50 tags (got {})", tags.len())));
    }
    for (k, v) in tags {
        tag_key("tags", k)?;
        if v.len() > 256 {
            return Err(ApiError::invalid(&format!("tags.{k}"), "values are at most 256 characters"));
        }
    }
    Ok(())
}

pub fn tag_key(field: &str, k: &str) -> Result<()> {
    if k.is_empty() || k.len() > 128 || !k.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./:".contains(&b)) {
        return Err(ApiError::invalid(
            field,
            format!("tag key {k:?} must be 1-128 letters, digits, '-', '_', '.', '/' or ':'"),
        ));
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
    let net = IpNet::new(addr, prefix).map_err(|_| bad(""))?;
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
    if p == 0 {
        return Err(ApiError::invalid(field, "must be between 1 and 65535"));
    }
    Ok(())
}

/// `page_size` for list calls: 1–1000, default 100.
pub fn page_size(v: Option<u32>) -> Result<i64> {
    match v {
        None => Ok(100),
        Some(n @ 1..=1000) => Ok(i64::from(n)),
        Some(n) => Err(ApiError::invalid("page_size", format!("must be between 1 and 1000 (got {n})"))),
    }
}

/// A page token is the position after which the next page starts.
pub fn page_token(v: Option<&str>) -> Result<i64> {
    match v {
        None => Ok(0),
        Some(t) => t.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
            ApiError::bad_request(codes::INVALID_PAGE_TOKEN, format!("page_token {t:?} is not one this API returned"))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_rfc1123() {
        for ok in ["node-1", "a", "worker.zone-a", "x1"] {
            assert!(dns_subdomain("name", ok).is_ok(), "{ok}");
        }
        for bad in ["", "Node", "-a", "a-", "a..b", "a_b", &"x".repeat(64)] {
            let err = dns_subdomain("name", bad).unwrap_err();
            assert!(err.message.starts_with("name:"), "{}", err.message);
        }
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

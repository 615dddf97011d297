//! How the database stores times (Unix milliseconds) and names resources.

use std::time::Duration;

/// Unix time in milliseconds: how the database stores every time.
pub fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

/// RFC 3339, as the API shows times.
pub fn rfc3339(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms).map(|t| t.to_string()).unwrap_or_default()
}

/// A new resource ID: a prefix and 17 hex digits, the shape of a cloud resource ID.
pub fn new_id(prefix: &str) -> String {
    let hex = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}-{}", &hex[..17])
}

/// `n` parameters from `$first` on, for `IN (…)`: `$2, $3, $4`; `NULL` for none (an `IN` that matches nothing).
/// (A list of parameters, not a JSON array unpacked in SQL: the two backends unpack JSON differently.)
pub fn params(first: usize, n: usize) -> String {
    if n == 0 {
        return "NULL".into();
    }
    (first..first + n).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ")
}

pub fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

//! The fakecloud emulator's API, defined once: the JSON types on the wire, the error codes, and the one
//! typed HTTP client that the CLI, the CCM, the scripts and the tests all use.

pub mod client;
pub mod cloud_config;
pub mod codes;
pub mod faults;
pub mod limits;
pub mod net;
pub mod types;

pub use client::{ApiError, Client, ClientError, RetryPolicy};
pub use cloud_config::{CloudConfig, CloudConfigError};
pub use faults::*;
pub use types::*;

/// Header carrying a create call's client token: a retry with the same key returns the original resource.
pub const IDEMPOTENCY_KEY_HEADER: &str = "Idempotency-Key";
/// Header set on the answer to a create that an `Idempotency-Key` replayed.
pub const REPLAYED_HEADER: &str = "Idempotent-Replayed";
/// Header with the request's ID, also found in error bodies and the audit log.
pub const REQUEST_ID_HEADER: &str = "X-Request-Id";
/// Environment variables shared by the CLI, scripts and tests.
pub const ENV_ENDPOINT: &str = "FAKECLOUD_ENDPOINT";
pub const ENV_USER_TOKEN: &str = "FAKECLOUD_USER_TOKEN";
pub const ENV_ADMIN_TOKEN: &str = "FAKECLOUD_ADMIN_TOKEN";

/// The value of `key` in a credentials file as `fakecloud serve` writes it (`export KEY=value` lines; `export`
/// and quotes optional); `None` when the key is missing or empty.
pub fn credential(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let l = l.trim();
        let v = l.strip_prefix("export ").unwrap_or(l).trim_start().strip_prefix(key)?.strip_prefix('=')?;
        let v = v.trim().trim_matches(|c| c == '"' || c == '\'');
        (!v.is_empty()).then(|| v.to_string())
    })
}

/// The instance ID in a Node's `spec.providerID` as the emulator writes it (`fakecloud://<zone>/<id>` →
/// `<id>`); `None` for another cloud's or a malformed one.
pub fn parse_provider_id(pid: &str) -> Option<&str> {
    let rest = pid.strip_prefix("fakecloud://")?;
    let (_zone, id) = rest.split_once('/')?;
    (!id.is_empty() && !id.contains('/')).then_some(id)
}

#[cfg(test)]
mod tests {
    #[test]
    fn provider_ids() {
        use super::parse_provider_id;
        assert_eq!(parse_provider_id("fakecloud://local-1a/i-0123"), Some("i-0123"));
        assert_eq!(parse_provider_id("aws:///us-east-1a/i-0123"), None);
        assert_eq!(parse_provider_id("fakecloud://local-1a/"), None);
        assert_eq!(parse_provider_id("fakecloud://local-1a/a/b"), None);
    }

    #[test]
    fn credentials_lines_are_read_with_or_without_export_and_quotes() {
        let text =
            "# fakecloud credentials\nexport FAKECLOUD_USER_TOKEN=u-123\nFAKECLOUD_ADMIN_TOKEN='a-456'\nEMPTY=\n";
        assert_eq!(super::credential(text, super::ENV_USER_TOKEN).as_deref(), Some("u-123"));
        assert_eq!(super::credential(text, super::ENV_ADMIN_TOKEN).as_deref(), Some("a-456"));
        assert_eq!(super::credential(text, "EMPTY"), None);
        assert_eq!(super::credential(text, "FAKECLOUD_USER"), None, "a prefix of a key is not the key");
    }
}

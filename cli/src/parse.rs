//! Parsers of command-line values, with messages that list what is accepted.

use fakecloud_api::{InstanceState, QuotaName};

pub fn tag(s: &str) -> Result<(String, String), String> {
    s.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())).ok_or_else(|| format!("{s:?} is not KEY=VALUE"))
}

pub fn state(s: &str) -> Result<InstanceState, String> {
    InstanceState::parse(s).ok_or_else(|| {
        let all: Vec<&str> = InstanceState::ALL.iter().map(|s| s.as_str()).collect();
        format!("{s:?} is not a state; states: {}", all.join(", "))
    })
}

pub fn quota(s: &str) -> Result<QuotaName, String> {
    QuotaName::parse(s).ok_or_else(|| {
        let all: Vec<&str> = QuotaName::ALL.iter().map(|q| q.as_str()).collect();
        format!("{s:?} is not a quota; quotas: {}", all.join(", "))
    })
}

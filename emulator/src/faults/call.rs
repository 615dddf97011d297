//! A call as the fault engine judges it, and its verdict.

use std::time::Duration;

use axum::http::Method;
use fakecloud_api::{NoResponseMode, Service};

use crate::auth::Role;
use crate::error::ApiError;

/// What the gatekeeper should do with a call.
#[derive(Debug)]
pub enum Verdict {
    /// Run it normally.
    Pass,
    /// Answer with this error instead (outage, error rule).
    Refuse { error: ApiError, fault: String },
    /// Answer with this rate limit's refusal instead: the native API in the limit's own status and code, a face
    /// of another cloud's API as that API throttles (EC2's `RequestLimitExceeded`, whatever the limit's shape).
    Throttle { error: ApiError, fault: String },
    /// Wait, then run it.
    Delay { by: Duration, fault: String },
    /// Give no answer.
    NoResponse { mode: NoResponseMode, hang: Duration, fault: String },
    /// Run it, then answer with this error.
    ApplyThenFail { error: ApiError, fault: String },
    /// Run it; what it creates stays invisible to reads for a while.
    Hide { for_: Duration, fault: String },
}

/// The call being judged.
#[derive(Debug)]
pub struct Call<'a> {
    /// The operation's name as its caller knows it: the native API's, or a face's (`DescribeInstances`).
    pub operation: &'a str,
    /// A face's call: the native operation it stands for (`ListInstances`), so that a fault naming either
    /// applies, and a service outage follows the native operation's service.
    pub stands_for: Option<&'a str>,
    /// A face's call is judged by the method of what it does (a read is a GET), not the one that carried it.
    pub method: &'a Method,
    pub resource_id: Option<&'a str>,
    pub role: Role,
    /// Admin-only operations (quotas, audit, faults, reset) are never faulted.
    pub admin_only: bool,
    /// The caller's token, for per-token rate limits (never stored or logged).
    pub token: &'a str,
    /// The resource the call is about, when some fault needs to know (see [`FaultEngine::wants_subject`]).
    pub subject: Option<&'a Subject>,
}

impl Call<'_> {
    /// Whether `matches` holds for one of the call's names: its own, or the native one it stands for.
    pub fn named(&self, matches: impl Fn(&str) -> bool) -> bool {
        matches(self.operation) || self.stands_for.is_some_and(matches)
    }

    /// The native operation the call is, or stands for.
    pub fn native(&self) -> &str {
        self.stands_for.unwrap_or(self.operation)
    }
}

/// What the call is about: read from the resource named in the path, or from a create's body.
#[derive(Debug, Default, Clone)]
pub struct Subject {
    pub name: Option<String>,
    pub zone: Option<String>,
    pub tags: std::collections::BTreeMap<String, String>,
}

impl From<crate::store::Labels> for Subject {
    fn from(l: crate::store::Labels) -> Self {
        Self { name: Some(l.name), zone: l.zone, tags: l.tags }
    }
}

/// The service an operation belongs to, for service outages.
pub fn service_of(operation: &str) -> Option<Service> {
    if operation.contains("LoadBalancer") {
        Some(Service::LoadBalancing)
    } else if operation.contains("Route") {
        Some(Service::Network)
    } else if operation.contains("Instance") || operation == "GetRegion" || operation == "ReclaimSpot" {
        Some(Service::Compute)
    } else {
        None
    }
}

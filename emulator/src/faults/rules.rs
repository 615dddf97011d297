//! Fault rules: a match, an action and a trigger, checked in order.

use std::time::Duration;

use axum::http::StatusCode;
use fakecloud_api::limits::{FAULT_SECONDS_MAX, LATENCY_MAX_MS};
use fakecloud_api::{FaultAction, FaultMatch, FaultRule, FaultTrigger};
use rand::Rng;
use serde::{Deserialize, Serialize};

use super::call::{Call, Verdict};
use super::trigger::{self, Firing, seconds};
use crate::db::{Db, rfc3339};
use crate::error::{ApiError, Kind, Result};
use crate::validate;

/// What is stored: the rule as given, plus its window resolved to absolute times.
#[derive(Serialize, Deserialize)]
struct Stored {
    matcher: FaultMatch,
    action: FaultAction,
    trigger: FaultTrigger,
    from_ms: Option<i64>,
    until_ms: Option<i64>,
}

pub struct ActiveRule {
    pub id: String,
    stored: Stored,
    operations: Vec<glob::Pattern>,
    names: Vec<glob::Pattern>,
    firing: Firing,
}

/// A rule's place in the list, if the request gives one: within the most rules there may be.
pub fn check_position(position: Option<usize>) -> Result<()> {
    if let Some(p) = position {
        let p = u64::try_from(p).unwrap_or(u64::MAX);
        validate::in_range("position", p, 0, fakecloud_api::limits::FAULT_COUNT_MAX)?;
    }
    Ok(())
}

fn invalid(field: &str, problem: impl std::fmt::Display) -> ApiError {
    ApiError::invalid(field, problem)
}

fn error_status(field: &str, status: u16) -> Result<StatusCode> {
    StatusCode::from_u16(status)
        .ok()
        .filter(|s| s.is_client_error() || s.is_server_error())
        .ok_or_else(|| invalid(field, format!("must be an HTTP error status, 400-599 (got {status})")))
}

/// `match.names`: globs, as API and data-plane rules take them.
pub fn check_name_globs(names: &[String]) -> Result<()> {
    for (i, n) in names.iter().enumerate() {
        glob::Pattern::new(n)
            .map_err(|e| invalid(&format!("match.names[{i}]"), format!("{n:?} is not a valid glob: {e}")))?;
    }
    Ok(())
}

/// Compile checked globs (a stored rule's, checked when it was added).
pub fn globs(v: &[String]) -> Result<Vec<glob::Pattern>> {
    v.iter().map(|o| glob::Pattern::new(o).map_err(|e| ApiError::internal(e.to_string()))).collect()
}

/// A latency fault's delay and jitter (API and data-plane rules alike).
pub fn check_latency(ms: u64, jitter_ms: u64) -> Result<()> {
    validate::in_range("action.ms", ms, 0, LATENCY_MAX_MS)?;
    validate::in_range("action.jitter_ms", jitter_ms, 0, LATENCY_MAX_MS)?;
    if ms.saturating_add(jitter_ms) > LATENCY_MAX_MS {
        return Err(invalid(
            "action.jitter_ms",
            format!("action.ms plus action.jitter_ms must be at most {LATENCY_MAX_MS} (got {ms} + {jitter_ms})"),
        ));
    }
    Ok(())
}

/// Checked when a rule is built, so that a stored rule is checked again when it is restored.
fn check_action(action: &FaultAction) -> Result<()> {
    match action {
        FaultAction::Error { status, code, headers, .. } => {
            error_status("action.status", *status)?;
            validate::FAULT_CODE.check("action.code", code)?;
            for (k, v) in headers {
                let field = format!("action.headers.{}", validate::quoted(k));
                let Ok(name) = axum::http::HeaderName::try_from(k.as_str()) else {
                    return Err(invalid(&field, "is not a valid HTTP header name"));
                };
                if axum::http::HeaderValue::try_from(v.as_str()).is_err() {
                    return Err(invalid(&field, "has a value that is not a valid HTTP header value"));
                }
                if crate::error::SERVER_HEADERS.contains(&name.as_str()) {
                    return Err(invalid(
                        &field,
                        format!(
                            "is set by the server (it frames the answer or ends the connection); a fault's headers \
                             may not set {}",
                            crate::error::SERVER_HEADERS.join(", ")
                        ),
                    ));
                }
            }
        }
        FaultAction::ApplyThenFail { status, code, .. } => {
            error_status("action.status", *status)?;
            validate::FAULT_CODE.check("action.code", code)?;
        }
        FaultAction::Latency { ms, jitter_ms } => check_latency(*ms, *jitter_ms)?,
        FaultAction::NoResponse { hang_seconds, .. } => {
            if let Some(h) = hang_seconds {
                seconds("action.hang_seconds", *h, FAULT_SECONDS_MAX)?;
            }
        }
        FaultAction::EventualConsistency { seconds: s } => {
            seconds("action.seconds", *s, FAULT_SECONDS_MAX)?;
        }
    }
    Ok(())
}

impl ActiveRule {
    pub fn new(
        id: String,
        matcher: FaultMatch,
        action: FaultAction,
        trigger: FaultTrigger,
        operations: &[String],
        seed: u64,
        now: i64,
    ) -> Result<Self> {
        validate::NAME.check("id", &id)?;
        for (i, op) in matcher.operations.iter().enumerate() {
            let field = format!("match.operations[{i}]");
            let pat =
                glob::Pattern::new(op).map_err(|e| invalid(&field, format!("{op:?} is not a valid glob: {e}")))?;
            if !operations.iter().any(|o| pat.matches(o)) {
                return Err(invalid(
                    &field,
                    format!("{op:?} matches no operation; operations: {}", operations.join(", ")),
                ));
            }
        }
        check_name_globs(&matcher.names)?;
        for (i, t) in matcher.tags.iter().enumerate() {
            validate::TAG_FILTER.check(&format!("match.tags[{i}]"), t)?;
        }
        for (i, m) in matcher.methods.iter().enumerate() {
            if !["GET", "POST", "PUT", "PATCH", "DELETE"].contains(&m.as_str()) {
                return Err(invalid(
                    &format!("match.methods[{i}]"),
                    format!("{m:?} is not one of GET, POST, PUT, PATCH, DELETE"),
                ));
            }
        }
        for (i, r) in matcher.roles.iter().enumerate() {
            if r != "user" && r != "admin" {
                return Err(invalid(&format!("match.roles[{i}]"), format!("{r:?} is not user or admin")));
            }
        }
        let (from_ms, until_ms) = trigger::window(&trigger, now)?;
        Self::build(id, Stored { matcher, action, trigger, from_ms, until_ms }, seed)
    }

    fn build(id: String, stored: Stored, seed: u64) -> Result<Self> {
        check_action(&stored.action)?;
        let operations = globs(&stored.matcher.operations)?;
        let names = globs(&stored.matcher.names)?;
        Ok(Self { firing: Firing::new(seed, &id), id, stored, operations, names })
    }

    pub fn restore(id: &str, spec: &str, seed: u64) -> Result<Self> {
        let stored: Stored = serde_json::from_str(spec).map_err(|e| ApiError::internal(e.to_string()))?;
        Self::build(id.to_string(), stored, seed)
    }

    pub fn stored(&self) -> String {
        serde_json::to_string(&self.stored).unwrap_or_default()
    }

    /// The rule matches on what the call is about, not just on the call.
    pub fn wants_subject(&self) -> bool {
        let m = &self.stored.matcher;
        !(m.zones.is_empty() && m.names.is_empty() && m.tags.is_empty())
    }

    /// The rule matches on the resource a call names, or hides what a change wrote (eventual consistency keeps
    /// the changed resource's version from before it): a face whose calls name resources in their bodies finds
    /// it out only then.
    pub fn wants_resource(&self) -> bool {
        !self.stored.matcher.resource_ids.is_empty()
            || matches!(self.stored.action, FaultAction::EventualConsistency { .. })
            || self.wants_subject()
    }

    fn subject_matches(&self, call: &Call<'_>) -> bool {
        let m = &self.stored.matcher;
        if !self.wants_subject() {
            return true;
        }
        let Some(subject) = call.subject else { return false };
        let zone_ok = m.zones.is_empty() || subject.zone.as_ref().is_some_and(|z| m.zones.contains(z));
        let name_ok =
            self.names.is_empty() || subject.name.as_ref().is_some_and(|n| self.names.iter().any(|p| p.matches(n)));
        let tag_ok = m.tags.is_empty()
            || m.tags.iter().any(|t| match t.split_once('=') {
                Some((k, v)) => subject.tags.get(k).is_some_and(|have| have == v),
                None => subject.tags.contains_key(t),
            });
        zone_ok && name_ok && tag_ok
    }

    fn matches(&self, call: &Call<'_>, now: i64) -> bool {
        let m = &self.stored.matcher;
        trigger::in_window((self.stored.from_ms, self.stored.until_ms), now)
            && (self.operations.is_empty() || call.named(|name| self.operations.iter().any(|p| p.matches(name))))
            && (m.methods.is_empty() || m.methods.iter().any(|x| x == call.method.as_str()))
            && (m.resource_ids.is_empty() || call.resource_id.is_some_and(|r| m.resource_ids.iter().any(|x| x == r)))
            && (m.roles.is_empty() || m.roles.iter().any(|x| x == call.role.as_str()))
            && self.subject_matches(call)
    }

    /// `Some` when this rule fires for the call. `shared`: the database several emulators count the rule's
    /// matches in.
    pub async fn judge(&self, call: &Call<'_>, now: i64, shared: Option<&Db>) -> Option<Verdict> {
        if !self.matches(call, now) {
            return None;
        }
        let mut rng = match shared {
            Some(db) => self.firing.fire_shared(&self.stored.trigger, db, &self.id).await?,
            None => self.firing.fire(&self.stored.trigger)?,
        };
        let fault = self.id.clone();
        Some(match &self.stored.action {
            FaultAction::Error { status, code, message, headers } => {
                let mut error = ApiError::new(
                    Kind::Status(*status),
                    code.clone(),
                    message.clone().unwrap_or_else(|| format!("injected by fault rule {}", self.id)),
                );
                error.headers = headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                Verdict::Refuse { error, fault }
            }
            FaultAction::Latency { ms, jitter_ms } => {
                let jitter = if *jitter_ms > 0 { rng.random_range(0..=*jitter_ms) } else { 0 };
                Verdict::Delay { by: Duration::from_millis(ms.saturating_add(jitter)), fault }
            }
            FaultAction::NoResponse { mode, hang_seconds } => {
                Verdict::NoResponse { mode: *mode, hang: Duration::from_secs_f64(hang_seconds.unwrap_or(300.0)), fault }
            }
            FaultAction::EventualConsistency { seconds } => {
                Verdict::Hide { for_: Duration::from_secs_f64(*seconds), fault }
            }
            FaultAction::ApplyThenFail { status, code, message } => Verdict::ApplyThenFail {
                error: ApiError::new(
                    Kind::Status(*status),
                    code.clone(),
                    message
                        .clone()
                        .unwrap_or_else(|| format!("injected by fault rule {} after the call was applied", self.id)),
                ),
                fault,
            },
        })
    }

    /// As the API shows it. `shared`: its counts (matched, injected) from the database, when kept there.
    pub fn to_api(&self, shared: Option<(u64, u64)>) -> FaultRule {
        let (matched, injected) = shared.unwrap_or_else(|| self.firing.counts());
        FaultRule {
            id: self.id.clone(),
            matcher: self.stored.matcher.clone(),
            action: self.stored.action.clone(),
            trigger: self.stored.trigger.clone(),
            active_until: self.stored.until_ms.map(rfc3339),
            matched,
            injected,
        }
    }
}

//! Fault rules: a match, an action and a trigger, checked in order.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::http::StatusCode;
use fakecloud_api::limits::{FAULT_COUNT_MAX, FAULT_SECONDS_MAX, LATENCY_MAX_MS, WINDOW_SECONDS_MAX};
use fakecloud_api::{FaultAction, FaultMatch, FaultRule, FaultTrigger};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::{Call, Verdict};
use crate::db::{ms, rfc3339};
use crate::error::{ApiError, Result};
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
    /// Seeded from the emulator's seed and the rule's name, so the same rules make the same draws every run.
    rng: Mutex<StdRng>,
    matched: AtomicU64,
    injected: AtomicU64,
}

fn invalid(field: &str, problem: impl std::fmt::Display) -> ApiError {
    ApiError::invalid(field, problem)
}

fn parse_time(field: &str, s: &str) -> Result<i64> {
    s.parse::<jiff::Timestamp>()
        .map(|t| t.as_millisecond())
        .map_err(|e| invalid(field, format!("{s:?} is not an RFC 3339 time such as 2026-11-22T10:00:00Z ({e})")))
}

fn seconds(field: &str, v: f64, max: f64) -> Result<Duration> {
    Ok(Duration::from_secs_f64(validate::in_range(field, v, 0.0, max)?))
}

fn error_status(field: &str, status: u16) -> Result<StatusCode> {
    StatusCode::from_u16(status)
        .ok()
        .filter(|s| s.is_client_error() || s.is_server_error())
        .ok_or_else(|| invalid(field, format!("must be an HTTP error status, 400-599 (got {status})")))
}

/// Checked when a rule is built, so that a stored rule is checked again when it is restored.
fn check_action(action: &FaultAction) -> Result<()> {
    match action {
        FaultAction::Error { status, code, headers, .. } => {
            error_status("action.status", *status)?;
            validate::FAULT_CODE.check("action.code", code)?;
            for (k, v) in headers {
                let ok = axum::http::HeaderName::try_from(k.as_str()).is_ok()
                    && axum::http::HeaderValue::try_from(v.as_str()).is_ok();
                if !ok {
                    return Err(invalid(&format!("action.headers.{k}"), "is not a valid HTTP header"));
                }
            }
        }
        FaultAction::ApplyThenFail { status, code, .. } => {
            error_status("action.status", *status)?;
            validate::FAULT_CODE.check("action.code", code)?;
        }
        FaultAction::Latency { ms, jitter_ms } => {
            validate::in_range("action.ms", *ms, 0, LATENCY_MAX_MS)?;
            validate::in_range("action.jitter_ms", *jitter_ms, 0, LATENCY_MAX_MS)?;
            if ms.saturating_add(*jitter_ms) > LATENCY_MAX_MS {
                return Err(invalid(
                    "action.jitter_ms",
                    format!(
                        "action.ms plus action.jitter_ms must be at most {LATENCY_MAX_MS} (got {ms} + {jitter_ms})"
                    ),
                ));
            }
        }
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

fn seed_for(seed: u64, id: &str) -> u64 {
    // FNV-1a of the name, mixed with the seed: stable across runs and platforms.
    id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)) ^ seed
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
        for (i, n) in matcher.names.iter().enumerate() {
            glob::Pattern::new(n)
                .map_err(|e| invalid(&format!("match.names[{i}]"), format!("{n:?} is not a valid glob: {e}")))?;
        }
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
        if let Some(p) = trigger.probability {
            validate::in_range("trigger.probability", p, 0.0, 1.0)?;
        }
        validate::in_range("trigger.skip", trigger.skip, 0, FAULT_COUNT_MAX)?;
        if let Some(t) = trigger.times {
            validate::in_range("trigger.times", t, 0, FAULT_COUNT_MAX)?;
        }
        let from_ms = trigger.from.as_deref().map(|s| parse_time("trigger.from", s)).transpose()?;
        let mut until_ms = trigger.until.as_deref().map(|s| parse_time("trigger.until", s)).transpose()?;
        if let Some(d) = trigger.duration_seconds {
            let d = seconds("trigger.duration_seconds", d, WINDOW_SECONDS_MAX)?;
            let end = from_ms.unwrap_or(now).max(now).saturating_add(ms(d));
            until_ms = Some(until_ms.map_or(end, |u| u.min(end)));
        }
        if let (Some(f), Some(u)) = (from_ms, until_ms)
            && u <= f
        {
            return Err(invalid("trigger.until", "must be after trigger.from"));
        }
        Self::build(id, Stored { matcher, action, trigger, from_ms, until_ms }, seed)
    }

    fn build(id: String, stored: Stored, seed: u64) -> Result<Self> {
        check_action(&stored.action)?;
        let globs = |v: &[String]| {
            v.iter()
                .map(|o| glob::Pattern::new(o).map_err(|e| ApiError::internal(e.to_string())))
                .collect::<Result<Vec<_>>>()
        };
        let operations = globs(&stored.matcher.operations)?;
        let names = globs(&stored.matcher.names)?;
        Ok(Self {
            rng: Mutex::new(StdRng::seed_from_u64(seed_for(seed, &id))),
            id,
            stored,
            operations,
            names,
            matched: AtomicU64::new(0),
            injected: AtomicU64::new(0),
        })
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
        let in_window = self.stored.from_ms.is_none_or(|f| now >= f) && self.stored.until_ms.is_none_or(|u| now < u);
        in_window
            && (self.operations.is_empty() || self.operations.iter().any(|p| p.matches(call.operation)))
            && (m.methods.is_empty() || m.methods.iter().any(|x| x == call.method.as_str()))
            && (m.resource_ids.is_empty() || call.resource_id.is_some_and(|r| m.resource_ids.iter().any(|x| x == r)))
            && (m.roles.is_empty() || m.roles.iter().any(|x| x == call.role.as_str()))
            && self.subject_matches(call)
    }

    /// `Some` when this rule fires for the call.
    pub fn judge(&self, call: &Call<'_>, now: i64) -> Option<Verdict> {
        if !self.matches(call, now) {
            return None;
        }
        let t = &self.stored.trigger;
        let n = self.matched.fetch_add(1, Ordering::SeqCst) + 1;
        if n <= t.skip {
            return None;
        }
        let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = t.probability
            && rng.random::<f64>() >= p
        {
            return None;
        }
        if let Some(times) = t.times {
            // Count the injection only if there is room left, atomically.
            let fired =
                self.injected.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |i| (i < times).then_some(i + 1));
            if fired.is_err() {
                return None;
            }
        } else {
            self.injected.fetch_add(1, Ordering::SeqCst);
        }
        let fault = self.id.clone();
        Some(match &self.stored.action {
            FaultAction::Error { status, code, message, headers } => {
                let mut error = ApiError::new(
                    StatusCode::from_u16(*status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
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
                    StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                    code.clone(),
                    message
                        .clone()
                        .unwrap_or_else(|| format!("injected by fault rule {} after the call was applied", self.id)),
                ),
                fault,
            },
        })
    }

    pub fn to_api(&self) -> FaultRule {
        FaultRule {
            id: self.id.clone(),
            matcher: self.stored.matcher.clone(),
            action: self.stored.action.clone(),
            trigger: self.stored.trigger.clone(),
            active_until: self.stored.until_ms.map(rfc3339),
            matched: self.matched.load(Ordering::SeqCst),
            injected: self.injected.load(Ordering::SeqCst),
        }
    }
}

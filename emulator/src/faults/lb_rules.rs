//! Data-plane fault rules: what a load balancer's new connections (`reset`, `latency`) and its backends' health
//! checks (`black-hole`) get. Matched on the load balancer (ID, name), the listener port and the
//! backend; fired by the same trigger as API rules. The data plane asks for every connection and health check.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use fakecloud_api::limits::{LB_RESET_AFTER_MAX_MS, PORT_MIN};
use fakecloud_api::{FaultTrigger, LbFaultAction, LbFaultMatch, LbFaultRule};
use rand::Rng;
use serde::{Deserialize, Serialize};

use super::rules::{check_latency, check_name_globs, globs};
use super::trigger::{self, Firing};
use crate::db::rfc3339;
use crate::error::{ApiError, Result};
use crate::validate;

/// The load balancer some traffic is for, as rules match it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LbSubject {
    pub id: String,
    pub name: String,
}

/// What happens on a load balancer that a rule may fault.
#[derive(Debug, Clone, Copy)]
pub enum LbEvent<'a> {
    /// A new connection on listener `port`, about to be sent to `backend` (an instance ID).
    Connection { port: u16, backend: &'a str },
    /// A health check of `backend`.
    HealthCheck { backend: &'a str },
}

/// What the data plane does about a faulted event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LbVerdict {
    /// Reset the connection: at once, or after forwarding it this long.
    Reset { after: Option<Duration> },
    /// Hold the connection this long before connecting it to its backend.
    Delay(Duration),
    /// Fail the health check.
    BlackHole,
}

/// A rule fired.
#[derive(Debug)]
pub struct LbFired {
    pub rule: String,
    pub action: &'static str,
    pub verdict: LbVerdict,
    /// The first time this rule fired on this load balancer (since it was added, or the emulator started).
    pub first_on_lb: bool,
}

#[derive(Serialize, Deserialize)]
struct Stored {
    matcher: LbFaultMatch,
    action: LbFaultAction,
    trigger: FaultTrigger,
    from_ms: Option<i64>,
    until_ms: Option<i64>,
}

pub struct ActiveLbRule {
    pub id: String,
    stored: Stored,
    names: Vec<glob::Pattern>,
    firing: Firing,
    /// The load balancers it has fired on.
    fired_on: Mutex<HashSet<String>>,
}

fn check(matcher: &LbFaultMatch, action: &LbFaultAction) -> Result<()> {
    for (i, id) in matcher.load_balancers.iter().enumerate() {
        validate::NAME.check(&format!("match.load_balancers[{i}]"), id)?;
    }
    for (i, id) in matcher.backends.iter().enumerate() {
        validate::NAME.check(&format!("match.backends[{i}]"), id)?;
    }
    for (i, p) in matcher.ports.iter().enumerate() {
        validate::in_range(&format!("match.ports[{i}]"), *p, PORT_MIN, u16::MAX)?;
    }
    check_name_globs(&matcher.names)?;
    match action {
        LbFaultAction::Reset { after_ms: Some(after) } => {
            validate::in_range("action.after_ms", *after, 0, LB_RESET_AFTER_MAX_MS)?;
        }
        LbFaultAction::Reset { after_ms: None } => {}
        LbFaultAction::Latency { ms, jitter_ms } => check_latency(*ms, *jitter_ms)?,
        LbFaultAction::BlackHole {} if !matcher.ports.is_empty() => {
            return Err(ApiError::invalid(
                "match.ports",
                "a black-hole fails a backend's health checks, which are not per listener; leave ports out",
            ));
        }
        LbFaultAction::BlackHole {} => {}
    }
    Ok(())
}

impl ActiveLbRule {
    pub fn new(
        id: String,
        matcher: LbFaultMatch,
        action: LbFaultAction,
        trigger: FaultTrigger,
        seed: u64,
        now: i64,
    ) -> Result<Self> {
        validate::NAME.check("id", &id)?;
        let (from_ms, until_ms) = trigger::window(&trigger, now)?;
        Self::build(id, Stored { matcher, action, trigger, from_ms, until_ms }, seed)
    }

    fn build(id: String, stored: Stored, seed: u64) -> Result<Self> {
        check(&stored.matcher, &stored.action)?;
        let names = globs(&stored.matcher.names)?;
        Ok(Self { firing: Firing::new(seed, &id), id, stored, names, fired_on: Mutex::default() })
    }

    pub fn restore(id: &str, spec: &str, seed: u64) -> Result<Self> {
        let stored: Stored = serde_json::from_str(spec).map_err(|e| ApiError::internal(e.to_string()))?;
        Self::build(id.to_string(), stored, seed)
    }

    pub fn stored(&self) -> String {
        serde_json::to_string(&self.stored).unwrap_or_default()
    }

    /// A black-hole that may fire at `now`: health checks must run to notice it come and go.
    pub fn black_hole_active(&self, now: i64) -> bool {
        self.stored.action == LbFaultAction::BlackHole {} && self.in_window(now)
    }

    fn in_window(&self, now: i64) -> bool {
        trigger::in_window((self.stored.from_ms, self.stored.until_ms), now)
    }

    fn matches(&self, lb: &LbSubject, event: LbEvent<'_>, now: i64) -> bool {
        let m = &self.stored.matcher;
        let (port, backend) = match (event, &self.stored.action) {
            (LbEvent::HealthCheck { backend }, LbFaultAction::BlackHole {}) => (None, backend),
            (LbEvent::Connection { port, backend }, LbFaultAction::Reset { .. } | LbFaultAction::Latency { .. }) => {
                (Some(port), backend)
            }
            _ => return false,
        };
        self.in_window(now)
            && (m.load_balancers.is_empty() || m.load_balancers.contains(&lb.id))
            && (self.names.is_empty() || self.names.iter().any(|p| p.matches(&lb.name)))
            && (m.ports.is_empty() || port.is_some_and(|p| m.ports.contains(&p)))
            && (m.backends.is_empty() || m.backends.iter().any(|b| b == backend))
    }

    /// `Some` when this rule fires for `event` on `lb`.
    pub fn judge(&self, lb: &LbSubject, event: LbEvent<'_>, now: i64) -> Option<LbFired> {
        if !self.matches(lb, event, now) {
            return None;
        }
        let mut rng = self.firing.fire(&self.stored.trigger)?;
        let verdict = match &self.stored.action {
            LbFaultAction::Reset { after_ms } => LbVerdict::Reset { after: after_ms.map(Duration::from_millis) },
            LbFaultAction::Latency { ms, jitter_ms } => {
                let jitter = if *jitter_ms > 0 { rng.random_range(0..=*jitter_ms) } else { 0 };
                LbVerdict::Delay(Duration::from_millis(ms.saturating_add(jitter)))
            }
            LbFaultAction::BlackHole {} => LbVerdict::BlackHole,
        };
        drop(rng);
        let first_on_lb = self.fired_on.lock().unwrap_or_else(|p| p.into_inner()).insert(lb.id.clone());
        Some(LbFired { rule: self.id.clone(), action: self.stored.action.name(), verdict, first_on_lb })
    }

    pub fn to_api(&self) -> LbFaultRule {
        let (matched, injected) = self.firing.counts();
        LbFaultRule {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn rule(matcher: LbFaultMatch, action: LbFaultAction, trigger: FaultTrigger) -> Result<ActiveLbRule> {
        ActiveLbRule::new("r".into(), matcher, action, trigger, 7, 0)
    }

    fn web() -> LbSubject {
        LbSubject { id: "lb-1".into(), name: "web-a".into() }
    }

    #[test]
    fn matches_on_the_load_balancer_port_and_backend_and_only_its_kind_of_event() {
        let m = LbFaultMatch {
            names: vec!["web-*".into()],
            ports: vec![80],
            backends: vec!["i-1".into()],
            ..Default::default()
        };
        let r = rule(m, LbFaultAction::Reset { after_ms: None }, FaultTrigger::default()).unwrap();
        let hit = r.judge(&web(), LbEvent::Connection { port: 80, backend: "i-1" }, 0).unwrap();
        assert_eq!((hit.verdict, hit.first_on_lb), (LbVerdict::Reset { after: None }, true));
        assert!(!r.judge(&web(), LbEvent::Connection { port: 80, backend: "i-1" }, 0).unwrap().first_on_lb);
        assert!(r.judge(&web(), LbEvent::Connection { port: 81, backend: "i-1" }, 0).is_none());
        assert!(r.judge(&web(), LbEvent::Connection { port: 80, backend: "i-2" }, 0).is_none());
        assert!(r.judge(&web(), LbEvent::HealthCheck { backend: "i-1" }, 0).is_none());
        let other = LbSubject { name: "api".into(), ..web() };
        assert!(r.judge(&other, LbEvent::Connection { port: 80, backend: "i-1" }, 0).is_none());
        assert_eq!(r.to_api().injected, 2);
    }

    #[test]
    fn a_black_hole_fails_health_checks_within_its_trigger() {
        let trigger = FaultTrigger { skip: 1, times: Some(2), ..Default::default() };
        let r = rule(LbFaultMatch::default(), LbFaultAction::BlackHole {}, trigger).unwrap();
        let fired: Vec<bool> =
            (0..5).map(|_| r.judge(&web(), LbEvent::HealthCheck { backend: "i-1" }, 0).is_some()).collect();
        assert_eq!(fired, [false, true, true, false, false]);
        assert!(r.judge(&web(), LbEvent::Connection { port: 80, backend: "i-1" }, 0).is_none());
        let api = r.to_api();
        assert_eq!((api.matched, api.injected), (5, 2));
    }

    #[test]
    fn bad_rules_say_which_field_is_wrong() {
        let no = |m: LbFaultMatch, a: LbFaultAction| rule(m, a, FaultTrigger::default()).err().unwrap().to_string();
        let reset = LbFaultAction::Reset { after_ms: None };
        assert!(no(LbFaultMatch { ports: vec![0], ..Default::default() }, reset.clone()).contains("match.ports[0]"));
        assert!(no(LbFaultMatch { names: vec!["[".into()], ..Default::default() }, reset).contains("match.names[0]"));
        let ports = LbFaultMatch { ports: vec![80], ..Default::default() };
        assert!(no(ports, LbFaultAction::BlackHole {}).contains("match.ports"));
        let slow = LbFaultAction::Latency { ms: LATENCY_MAX, jitter_ms: 1 };
        assert!(no(LbFaultMatch::default(), slow).contains("action.jitter_ms"));
        let late = LbFaultAction::Reset { after_ms: Some(LB_RESET_AFTER_MAX_MS + 1) };
        assert!(no(LbFaultMatch::default(), late).contains("action.after_ms"));
    }

    const LATENCY_MAX: u64 = fakecloud_api::limits::LATENCY_MAX_MS;
}

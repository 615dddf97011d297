//! Printing API objects as tables for people or JSON for scripts.

use anyhow::Result;
use clap::ValueEnum;
use comfy_table::{Table, presets::NOTHING};
use fakecloud_api::{
    Account, AuditEntry, BackendState, CreatedAccount, DataPlaneState, FaultAction, FaultRule, FaultTrigger,
    Forwarding, Hang, Instance, LbFaultAction, LbFaultRule, LbProvisioning, LeasedAccount, ListenerState, LoadBalancer,
    Outage, Quota, RateLimit, RateLimitPresetInfo, Region, Route, SessionAffinity,
};
use serde::Serialize;

/// How a command prints what it got (`--output`).
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Format {
    /// Aligned columns for people.
    Table,
    /// The API's JSON, for scripts.
    Json,
}

pub struct Output(Format);

/// An account's tokens as lines a shell can `source`, with the AWS keys its AWS face takes (derived from them).
fn tokens_to_source(id: &str, note: &str, user: &str, admin: &str) -> String {
    use fakecloud_api::{ENV_ADMIN_TOKEN, ENV_USER_TOKEN};
    let tokens = fakecloud_emulator::auth::Tokens { user: user.into(), admin: admin.into() };
    let aws = fakecloud_emulator::aws::credentials::Keys::of(&tokens).file_lines();
    format!(
        "# account {id}{note}: `source` these lines to act in it (the tokens are shown this once)\n\
         export {ENV_USER_TOKEN}={user}\nexport {ENV_ADMIN_TOKEN}={admin}\n{}",
        aws.trim_end()
    )
}

fn table(header: &[&str], rows: impl IntoIterator<Item = Vec<String>>) -> String {
    let mut t = Table::new();
    t.load_preset(NOTHING).set_header(header.iter().copied());
    for row in rows {
        t.add_row(row);
    }
    t.to_string()
}

/// A rule's trigger, briefly: `p=0.5 skip 2 3 times until …`.
fn trigger_text(t: &FaultTrigger, active_until: Option<&str>) -> String {
    let mut trigger = Vec::new();
    if let Some(p) = t.probability {
        trigger.push(format!("p={p}"));
    }
    if t.skip > 0 {
        trigger.push(format!("skip {}", t.skip));
    }
    if let Some(n) = t.times {
        trigger.push(format!("{n} times"));
    }
    if let Some(u) = active_until {
        trigger.push(format!("until {u}"));
    }
    trigger.join(" ")
}

/// Load balancers, one a row. With the data plane on, BACKENDS counts the healthy ones, a listener that is
/// not listening is marked, and STATE says when traffic does not all get through (`active (degraded)`).
fn load_balancer_table(items: &[LoadBalancer]) -> String {
    table(
        &["ID", "NAME", "SCHEME", "STATE", "ADDRESS", "LISTENERS", "BACKENDS"],
        items.iter().map(|lb| {
            let listeners: Vec<String> = lb
                .listeners
                .iter()
                .map(|l| {
                    let state = lb.listener_status.iter().find(|s| (s.protocol, s.port) == (l.protocol, l.port));
                    let mark = match state.map(|s| s.state) {
                        Some(ListenerState::Failed) => " (failed)",
                        Some(ListenerState::Unsupported) => " (not served)",
                        Some(ListenerState::Listening) | None => "",
                    };
                    format!("{}{mark}", format!("{:?}/{}→{}", l.protocol, l.port, l.backend_port).to_uppercase())
                })
                .collect();
            let backends = if lb.backend_health.is_empty() {
                lb.backends.len().to_string()
            } else {
                let healthy = lb.backend_health.iter().filter(|h| h.state == BackendState::Healthy).count();
                format!("{healthy}/{} healthy", lb.backends.len())
            };
            vec![
                lb.id.clone(),
                lb.name.clone(),
                lb.scheme.as_str().into(),
                match &lb.data_plane {
                    Some(d) if d.state != DataPlaneState::Serving => {
                        format!("{} ({})", lb.state.as_str(), d.state.as_str())
                    }
                    _ => lb.state.as_str().into(),
                },
                lb.address.map(|a| a.to_string()).unwrap_or_else(|| "<pending>".into()),
                listeners.join(","),
                backends,
            ]
        }),
    )
}

/// One load balancer (`lb get`); with the data plane on, also its backends' health and its listeners that are
/// not listening, with why.
fn load_balancer_text(lb: &LoadBalancer) -> String {
    let mut out = load_balancer_table(std::slice::from_ref(lb));
    if lb.session_affinity != SessionAffinity::None {
        out.push_str(&format!("\n\nsession affinity: {}", lb.session_affinity.as_str()));
    }
    if lb.forwarding != Forwarding::Proxy {
        out.push_str(&format!("\n\nforwarding: {} (packets routed to a node unchanged)", lb.forwarding.as_str()));
    }
    if let Some(d) = &lb.data_plane {
        out.push_str(&format!("\n\ndata plane: {}", d.state.as_str()));
        for r in &d.reasons {
            out.push_str(&format!("\n  - {r}"));
        }
    }
    let not_listening: Vec<Vec<String>> = lb
        .listener_status
        .iter()
        .filter(|l| l.state != ListenerState::Listening)
        .map(|l| {
            vec![
                format!("{:?}/{}", l.protocol, l.port).to_uppercase(),
                format!("{:?}", l.state).to_lowercase(),
                l.reason.clone().unwrap_or_default(),
            ]
        })
        .collect();
    if !not_listening.is_empty() {
        out.push_str("\n\n");
        out.push_str(&table(&["LISTENER", "STATE", "REASON"], not_listening));
    }
    if !lb.backend_health.is_empty() {
        out.push_str("\n\n");
        out.push_str(&table(
            &["BACKEND", "HEALTH", "SINCE", "LAST ERROR"],
            lb.backend_health.iter().map(|h| {
                vec![
                    h.instance.clone(),
                    format!("{:?}", h.state).to_lowercase(),
                    h.since.clone(),
                    h.last_error.clone().unwrap_or_default(),
                ]
            }),
        ));
    }
    out
}

impl Output {
    pub fn new(format: Format) -> Self {
        Self(format)
    }

    fn print<T: Serialize + ?Sized>(&self, items: &T, render: impl FnOnce() -> String) -> Result<()> {
        match self.0 {
            Format::Json => println!("{}", serde_json::to_string_pretty(items)?),
            Format::Table => println!("{}", render()),
        }
        Ok(())
    }

    pub fn instances(&self, items: &[Instance]) -> Result<()> {
        self.print(items, || {
            table(
                &["ID", "NAME", "ZONE", "TYPE", "MARKET", "STATE", "PRIVATE IP"],
                items.iter().map(|i| {
                    vec![
                        i.id.clone(),
                        i.name.clone(),
                        i.zone.clone(),
                        i.instance_type.clone(),
                        i.market.as_str().into(),
                        i.state.to_string(),
                        i.addresses().map(|a| a.to_string()).collect::<Vec<_>>().join(","),
                    ]
                }),
            )
        })
    }

    pub fn region(&self, r: &Region) -> Result<()> {
        self.print(r, || {
            let zones = table(&["ZONE", "SUBNET"], r.zones.iter().map(|z| vec![z.name.clone(), z.subnet.clone()]));
            let types = table(
                &["TYPE", "VCPUS", "MEMORY MiB"],
                r.instance_types.iter().map(|t| vec![t.name.clone(), t.vcpus.to_string(), t.memory_mib.to_string()]),
            );
            format!(
                "region {}  vpc {}  public pool {}  internal LB subnet {}\n\n{zones}\n\n{types}",
                r.name, r.vpc_cidr, r.public_pool, r.internal_lb_subnet
            )
        })
    }

    pub fn routes(&self, items: &[Route]) -> Result<()> {
        self.print(items, || {
            table(
                &["ID", "NAME", "DESTINATION", "TARGET", "STATE"],
                items.iter().map(|r| {
                    vec![
                        r.id.clone(),
                        r.name.clone(),
                        r.destination.clone(),
                        r.target_instance.clone(),
                        format!("{:?}", r.state).to_lowercase(),
                    ]
                }),
            )
        })
    }

    pub fn load_balancers(&self, items: &[LoadBalancer]) -> Result<()> {
        self.print(items, || load_balancer_table(items))
    }

    pub fn load_balancer(&self, lb: &LoadBalancer) -> Result<()> {
        // JSON as a list of one, as `lb list` and the other commands print.
        self.print(std::slice::from_ref(lb), || load_balancer_text(lb))
    }

    pub fn lb_provisioning(&self, p: &LbProvisioning) -> Result<()> {
        self.print(p, || {
            let secs = |s: f64| format!("{s}s");
            let mut rows = vec![vec!["default (serve --lb-provision-delay)".to_string(), secs(p.default_seconds)]];
            rows.extend(p.seconds.map(|s| vec!["every load balancer".to_string(), secs(s)]));
            rows.extend(p.load_balancers.iter().map(|(name, s)| vec![format!("load balancer {name}"), secs(*s)]));
            table(&["APPLIES TO", "PROVISIONING"], rows)
        })
    }

    pub fn quotas(&self, items: &[Quota]) -> Result<()> {
        self.print(items, || {
            table(
                &["QUOTA", "LIMIT", "USAGE"],
                items.iter().map(|q| {
                    vec![
                        q.name.to_string(),
                        q.limit.to_string(),
                        q.usage.map(|u| u.to_string()).unwrap_or_else(|| "-".into()),
                    ]
                }),
            )
        })
    }

    pub fn audit(&self, items: &[AuditEntry]) -> Result<()> {
        self.print(items, || {
            table(
                &["SEQ", "TIME", "ROLE", "OPERATION", "RESOURCE", "STATUS", "ERROR", "MS"],
                items.iter().map(|e| {
                    vec![
                        e.seq.to_string(),
                        e.time.clone(),
                        e.role.clone(),
                        e.operation.clone(),
                        e.resource_id.clone().unwrap_or_default(),
                        e.status.to_string(),
                        e.error_code.clone().unwrap_or_default(),
                        format!("{:.2}", e.latency_ms),
                    ]
                }),
            )
        })
    }

    pub fn faults(&self, items: &[FaultRule]) -> Result<()> {
        self.print(items, || {
            table(
                &["ID", "OPERATIONS", "ACTION", "TRIGGER", "MATCHED", "INJECTED"],
                items.iter().map(|r| {
                    let action = match &r.action {
                        FaultAction::Error { status, code, .. } => format!("error {status} {code}"),
                        FaultAction::ApplyThenFail { status, code, .. } => format!("apply-then-fail {status} {code}"),
                        FaultAction::Latency { ms, jitter_ms } => format!("latency {ms}ms+{jitter_ms}ms"),
                        FaultAction::NoResponse { mode, .. } => format!("no-response {mode:?}").to_lowercase(),
                        FaultAction::EventualConsistency { seconds } => format!("hidden for {seconds}s"),
                    };
                    let trigger = trigger_text(&r.trigger, r.active_until.as_deref());
                    let ops =
                        if r.matcher.operations.is_empty() { "*".to_string() } else { r.matcher.operations.join(",") };
                    vec![r.id.clone(), ops, action, trigger, r.matched.to_string(), r.injected.to_string()]
                }),
            )
        })
    }

    pub fn lb_faults(&self, items: &[LbFaultRule]) -> Result<()> {
        self.print(items, || {
            table(
                &["ID", "LOAD BALANCERS", "PORTS", "BACKENDS", "ACTION", "TRIGGER", "MATCHED", "INJECTED"],
                items.iter().map(|r| {
                    let m = &r.matcher;
                    let any = |v: Vec<String>| if v.is_empty() { "*".to_string() } else { v.join(",") };
                    let action = match &r.action {
                        LbFaultAction::Reset { after_ms: None } => "reset".to_string(),
                        LbFaultAction::Reset { after_ms: Some(after) } => format!("reset after {after}ms"),
                        LbFaultAction::Latency { ms, jitter_ms } => format!("latency {ms}ms+{jitter_ms}ms"),
                        LbFaultAction::BlackHole {} => "black-hole".to_string(),
                    };
                    vec![
                        r.id.clone(),
                        any(m.load_balancers.iter().chain(&m.names).cloned().collect()),
                        any(m.ports.iter().map(u16::to_string).collect()),
                        any(m.backends.clone()),
                        action,
                        trigger_text(&r.trigger, r.active_until.as_deref()),
                        r.matched.to_string(),
                        r.injected.to_string(),
                    ]
                }),
            )
        })
    }

    pub fn rate_limits(&self, items: &[RateLimit]) -> Result<()> {
        self.print(items, || {
            table(
                &["ID", "SCOPE", "CAPACITY", "REFILL", "PER TOKEN", "TOKENS NOW", "STATUS", "REFUSED"],
                items.iter().map(|l| {
                    let scope = match (&l.limit.operation, &l.limit.operations[..]) {
                        (Some(op), _) => op.clone(),
                        (None, []) => format!("{:?}", l.limit.scope).to_lowercase(),
                        (None, ops) => ops.join(","),
                    };
                    // A fixed window's calls come back whole when it ends; a bucket's a token at a time.
                    let refill = match l.limit.window_seconds {
                        Some(w) => format!("every {w}s"),
                        None => format!("{}/s", l.limit.refill_per_second.unwrap_or_default()),
                    };
                    vec![
                        l.id.clone(),
                        scope,
                        l.limit.capacity.to_string(),
                        refill,
                        l.limit.per_token.to_string(),
                        l.buckets.iter().map(|b| format!("{} {:.1}", b.key, b.tokens)).collect::<Vec<_>>().join(", "),
                        l.limit.status.to_string(),
                        l.refused.to_string(),
                    ]
                }),
            )
        })
    }

    pub fn rate_limit_presets(&self, items: &[RateLimitPresetInfo]) -> Result<()> {
        self.print(items, || {
            table(
                &["PRESET", "INSTALLED", "LIMITS", "QUOTA REFUSALS"],
                items.iter().map(|p| {
                    let refusals = p.quota_refusals.iter().map(|r| format!("{} {} {}", r.quota, r.status, r.code));
                    vec![
                        p.name.to_string(),
                        p.installed.to_string(),
                        p.limits.iter().map(|l| l.id.as_str()).collect::<Vec<_>>().join(", "),
                        refusals.collect::<Vec<_>>().join("\n"),
                    ]
                }),
            )
        })
    }

    pub fn outages(&self, items: &[Outage]) -> Result<()> {
        self.print(items, || {
            table(
                &["ID", "SCOPE", "WHAT", "STARTED", "UNTIL"],
                items.iter().map(|o| {
                    let what = o
                        .zone
                        .clone()
                        .or_else(|| o.service.map(|s| format!("{s:?}").to_lowercase()))
                        .unwrap_or_else(|| "all".into());
                    vec![
                        o.id.clone(),
                        format!("{:?}", o.scope).to_lowercase(),
                        what,
                        o.started_at.clone(),
                        o.until.clone().unwrap_or_else(|| "-".into()),
                    ]
                }),
            )
        })
    }

    pub fn hangs(&self, items: &[Hang]) -> Result<()> {
        self.print(items, || {
            table(
                &["INSTANCE", "NAME", "HUNG SINCE"],
                items.iter().map(|h| vec![h.instance_id.clone(), h.name.clone(), h.since.clone()]),
            )
        })
    }

    pub fn accounts(&self, items: &[Account]) -> Result<()> {
        self.print(items, || {
            table(
                &["ACCOUNT", "CREATED", "LEASED BY", "UNTIL"],
                items.iter().map(|a| {
                    let (holder, until) = a.lease.as_ref().map_or(("-", "-"), |l| (&l.holder, &l.expires_at));
                    vec![a.id.clone(), a.created_at.clone(), holder.to_string(), until.to_string()]
                }),
            )
        })
    }

    /// A new account: its tokens as lines a shell can `source` (they are shown this once), or the JSON.
    pub fn created_account(&self, a: &CreatedAccount) -> Result<()> {
        self.print(a, || tokens_to_source(&a.id, "", &a.user_token, &a.admin_token))
    }

    /// A lease taken: the account's tokens as lines to `source`, or the JSON.
    pub fn leased_account(&self, a: &LeasedAccount) -> Result<()> {
        let until = a.account.lease.as_ref().map(|l| format!(", leased until {}", l.expires_at)).unwrap_or_default();
        self.print(a, || tokens_to_source(&a.account.id, &until, &a.user_token, &a.admin_token))
    }

    pub fn value(&self, v: &serde_json::Value) -> Result<()> {
        println!("{}", serde_json::to_string_pretty(v)?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use fakecloud_api::DataPlaneStatus;

    /// A load balancer as the API answers when its data plane is on: `state` the data plane's, the listener on
    /// 18002 failed, the second of two backends unhealthy (its checks cannot connect).
    fn load_balancer(state: &str) -> LoadBalancer {
        serde_json::from_value(serde_json::json!({
            "id": "lb-1", "name": "web", "scheme": "internet-facing", "state": "active",
            "listeners": [
                {"protocol": "TCP", "port": 18001, "backend_port": 30001},
                {"protocol": "TCP", "port": 18002, "backend_port": 30002}
            ],
            "backends": ["i-1", "i-2"], "source_ranges": [], "address": "203.0.113.7",
            "created_at": "2026-11-28T00:00:00Z", "updated_at": "2026-11-28T00:00:00Z",
            "listener_status": [
                {"protocol": "TCP", "port": 18001, "state": "listening"},
                {"protocol": "TCP", "port": 18002, "state": "failed", "reason": "address in use"}
            ],
            "backend_health": [
                {"instance": "i-1", "state": "healthy", "since": "2026-11-28T00:00:01Z"},
                {"instance": "i-2", "state": "unhealthy", "since": "2026-11-28T00:00:02Z",
                 "last_error": "connect: connection refused"}
            ],
            "data_plane": {"state": state, "reasons": ["listener TCP/18002 failed: address in use"]}
        }))
        .unwrap()
    }

    #[test]
    fn lb_list_says_when_the_data_plane_does_not_carry_all_traffic() {
        let listed = load_balancer_table(&[load_balancer("degraded"), load_balancer("down")]);
        assert!(listed.contains("active (degraded)") && listed.contains("active (down)"), "{listed}");
        assert!(listed.contains("TCP/18002→30002 (failed)") && listed.contains("1/2 healthy"), "{listed}");
        let serving = load_balancer_table(&[LoadBalancer {
            data_plane: Some(DataPlaneStatus { state: DataPlaneState::Serving, reasons: Vec::new() }),
            ..load_balancer("serving")
        }]);
        assert!(!serving.contains("(serving)"), "{serving}");
    }

    #[test]
    fn lb_get_shows_the_data_plane_listeners_and_backend_health_with_why() {
        let got = load_balancer_text(&load_balancer("degraded"));
        assert!(got.contains("data plane: degraded") && got.contains("listener TCP/18002 failed"), "{got}");
        assert!(!got.contains("session affinity"), "said only when there is one: {got}");
        let sticky = LoadBalancer { session_affinity: SessionAffinity::ClientIp, ..load_balancer("degraded") };
        assert!(load_balancer_text(&sticky).contains("session affinity: client-ip"));
        assert!(!got.contains("forwarding"), "said only when it is not a proxy: {got}");
        let routed = LoadBalancer { forwarding: Forwarding::Passthrough, ..load_balancer("degraded") };
        assert!(load_balancer_text(&routed).contains("forwarding: passthrough"));
        assert!(got.contains("1/2 healthy") && got.contains("unhealthy") && got.contains("connect"), "{got}");
    }
}

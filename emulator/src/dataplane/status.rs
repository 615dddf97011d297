//! What the data plane shows through the API: each listener's state and each backend's health, per load
//! balancer, and what they add up to (`data_plane`). Written by the supervisor (listeners) and the health
//! checkers (backends), read by `GET`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use fakecloud_api::{
    BackendHealth, BackendState, DataPlaneState, DataPlaneStatus, Forwarding, IpMode, ListenerState, ListenerStatus,
    LoadBalancer, LoadBalancerState, Protocol,
};

use super::budget::Limit;

#[derive(Clone, Debug, Default)]
pub struct Status(Arc<Mutex<HashMap<String, LbStatus>>>);

#[derive(Debug, Default)]
struct LbStatus {
    listeners: BTreeMap<(Protocol, u16), ListenerStatus>,
    backends: HashMap<String, BackendHealth>,
    refusals: BTreeMap<(Protocol, u16, Limit), Refusals>,
}

/// Connections (sessions) one listener refused at one limit.
#[derive(Debug)]
struct Refusals {
    count: u64,
    last: Instant,
    /// The limit in words.
    limit: String,
}

/// How long a refusal at a limit is among a load balancer's reasons after the last one.
const REFUSALS_SHOWN_FOR: Duration = Duration::from_secs(60);

impl Status {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, LbStatus>> {
        // Every write replaces whole entries, so a panic elsewhere cannot leave one half-written.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn set_listener(&self, lb: &str, protocol: Protocol, port: u16, state: ListenerState, reason: Option<String>) {
        let status = ListenerStatus { protocol, port, state, reason };
        self.lock().entry(lb.to_string()).or_default().listeners.insert((protocol, port), status);
    }

    pub fn remove_listener(&self, lb: &str, protocol: Protocol, port: u16) {
        if let Some(s) = self.lock().get_mut(lb) {
            s.listeners.remove(&(protocol, port));
        }
    }

    /// Replace the backends' health of `lb` with `health`.
    pub fn set_backends(&self, lb: &str, health: Vec<BackendHealth>) {
        let backends = health.into_iter().map(|h| (h.instance.clone(), h)).collect();
        self.lock().entry(lb.to_string()).or_default().backends = backends;
    }

    /// A listener of `lb` refused a connection (a UDP session) at `limit`, described by `describe`.
    pub fn refused(&self, lb: &str, protocol: Protocol, port: u16, limit: Limit, describe: impl FnOnce() -> String) {
        let mut map = self.lock();
        let r = map
            .entry(lb.to_string())
            .or_default()
            .refusals
            .entry((protocol, port, limit))
            .or_insert_with(|| Refusals { count: 0, last: Instant::now(), limit: describe() });
        r.count += 1;
        r.last = Instant::now();
    }

    pub fn remove(&self, lb: &str) {
        self.lock().remove(lb);
    }

    /// Fill in `lb`'s listener states and backend health, in the order the load balancer lists them. Only an
    /// active load balancer is served; one the data plane has not caught up with yet shows nothing.
    pub fn annotate(&self, lb: &mut LoadBalancer) {
        lb.ip_mode = match lb.forwarding {
            Forwarding::Proxy => IpMode::Proxy,
            Forwarding::Passthrough => IpMode::Vip,
        };
        if lb.state != LoadBalancerState::Active {
            return;
        }
        let map = self.lock();
        let Some(s) = map.get(&lb.id) else { return };
        lb.listener_status =
            lb.listeners.iter().filter_map(|l| s.listeners.get(&(l.protocol, l.port)).cloned()).collect();
        lb.backend_health = lb.backends.iter().filter_map(|b| s.backends.get(b).cloned()).collect();
        let refused: Vec<String> = s
            .refusals
            .iter()
            .filter(|(_, r)| r.last.elapsed() < REFUSALS_SHOWN_FOR)
            .map(|((protocol, port, _), r)| {
                let what = if *protocol == Protocol::Udp { "sessions" } else { "connections" };
                format!(
                    "listener {}/{port} refused {} {what} at {}, the last {} s ago",
                    protocol.as_str(),
                    r.count,
                    r.limit,
                    r.last.elapsed().as_secs()
                )
            })
            .collect();
        lb.data_plane = Some(summarize(&lb.listener_status, &lb.backends, &lb.backend_health, refused));
    }
}

/// What a load balancer's listeners and backends add up to: down when no listener listens or no backend is
/// healthy (nothing gets through), degraded when some of either are out or connections were `refused` at a
/// limit lately, serving otherwise.
fn summarize(
    listeners: &[ListenerStatus],
    backends: &[String],
    health: &[BackendHealth],
    refused: Vec<String>,
) -> DataPlaneStatus {
    let mut reasons = Vec::new();
    for l in listeners.iter().filter(|l| l.state != ListenerState::Listening) {
        let what = format!("listener {}/{} {}", l.protocol.as_str(), l.port, l.state.as_str());
        reasons.push(match &l.reason {
            Some(r) => format!("{what}: {r}"),
            None => what,
        });
    }
    let healthy = health.iter().filter(|h| h.state == BackendState::Healthy).count();
    for b in backends {
        match health.iter().find(|h| &h.instance == b) {
            Some(h) if h.state == BackendState::Healthy => {}
            Some(h) => reasons.push(match &h.last_error {
                Some(e) => format!("backend {b} {}: {e}", h.state.as_str()),
                None => format!("backend {b} {}", h.state.as_str()),
            }),
            None => reasons.push(format!("backend {b} not checked yet")),
        }
    }
    if backends.is_empty() {
        reasons.push("no backends".to_string());
    }
    reasons.extend(refused);
    let listening = listeners.iter().any(|l| l.state == ListenerState::Listening);
    let state = if !listening || healthy == 0 {
        DataPlaneState::Down
    } else if reasons.is_empty() {
        DataPlaneState::Serving
    } else {
        DataPlaneState::Degraded
    };
    DataPlaneStatus { state, reasons }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listener(port: u16, state: ListenerState, reason: Option<&str>) -> ListenerStatus {
        ListenerStatus { protocol: Protocol::Tcp, port, state, reason: reason.map(str::to_string) }
    }

    fn backend(id: &str, state: BackendState, error: Option<&str>) -> BackendHealth {
        BackendHealth { instance: id.into(), state, since: String::new(), last_error: error.map(str::to_string) }
    }

    #[test]
    fn listeners_and_backends_add_up_to_serving_degraded_or_down() {
        use BackendState::*;
        use ListenerState::*;
        let ids = ["i-1".to_string(), "i-2".to_string()];
        let up = [backend("i-1", Healthy, None), backend("i-2", Healthy, None)];
        let ok = summarize(&[listener(80, Listening, None)], &ids, &up, vec![]);
        assert_eq!((ok.state, ok.reasons.len()), (DataPlaneState::Serving, 0));

        let taken = listener(81, Failed, Some("cannot listen on 127.0.0.1:81: Address in use"));
        let half = summarize(&[listener(80, Listening, None), taken.clone()], &ids, &up, vec![]);
        assert_eq!(half.state, DataPlaneState::Degraded);
        assert_eq!(half.reasons, ["listener TCP/81 failed: cannot listen on 127.0.0.1:81: Address in use"]);

        let none = summarize(&[taken], &ids, &up, vec![]);
        assert_eq!(none.state, DataPlaneState::Down);

        let one_down = [backend("i-1", Healthy, None), backend("i-2", Unhealthy, Some("connect refused"))];
        let sick = summarize(&[listener(80, Listening, None)], &ids, &one_down, vec![]);
        assert_eq!(
            (sick.state, sick.reasons.as_slice()),
            (DataPlaneState::Degraded, &["backend i-2 unhealthy: connect refused".to_string()][..])
        );

        let all_down = summarize(&[listener(80, Listening, None)], &ids, &[backend("i-1", Unknown, None)], vec![]);
        assert_eq!(all_down.state, DataPlaneState::Down);
        assert_eq!(all_down.reasons, ["backend i-1 unknown", "backend i-2 not checked yet"]);
        assert_eq!(summarize(&[listener(80, Listening, None)], &[], &[], vec![]).reasons, ["no backends"]);

        let refused = vec!["listener TCP/80 refused 3 connections at the limit of 2 connections per listener".into()];
        let full = summarize(&[listener(80, Listening, None)], &ids, &up, refused.clone());
        assert_eq!((full.state, full.reasons), (DataPlaneState::Degraded, refused));
    }
}

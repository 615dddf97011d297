//! What the data plane shows through the API: each listener's state and each backend's health, per load
//! balancer. Written by the supervisor (listeners) and the health checkers (backends), read by `GET`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use fakecloud_api::{BackendHealth, IpMode, ListenerState, ListenerStatus, LoadBalancer, LoadBalancerState, Protocol};

#[derive(Clone, Debug, Default)]
pub struct Status(Arc<Mutex<HashMap<String, LbStatus>>>);

#[derive(Debug, Default)]
struct LbStatus {
    listeners: BTreeMap<(Protocol, u16), ListenerStatus>,
    backends: HashMap<String, BackendHealth>,
}

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

    pub fn remove(&self, lb: &str) {
        self.lock().remove(lb);
    }

    /// Fill in `lb`'s listener states and backend health, in the order the load balancer lists them. Only an
    /// active load balancer is served; one the data plane has not caught up with yet shows nothing.
    pub fn annotate(&self, lb: &mut LoadBalancer) {
        lb.ip_mode = IpMode::Proxy;
        if lb.state != LoadBalancerState::Active {
            return;
        }
        let map = self.lock();
        let Some(s) = map.get(&lb.id) else { return };
        lb.listener_status =
            lb.listeners.iter().filter_map(|l| s.listeners.get(&(l.protocol, l.port)).cloned()).collect();
        lb.backend_health = lb.backends.iter().filter_map(|b| s.backends.get(b).cloned()).collect();
    }
}

//! What a listener's loop works with, TCP ([`super::tcp`]) or UDP ([`super::udp`]): where it forwards (its
//! [`Route`], swapped in place by the supervisor) and where it counts, reports and is bounded ([`Ctx`]).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use fakecloud_api::Protocol;
use ipnet::IpNet;
use tokio::sync::watch;

use super::budget::{Budget, Caps, Limit};
use super::faults::Faults;
use super::health::Healthy;
use super::status::Status;
use crate::faults::LbSubject;
use crate::metrics::{ConnectionLabels, DataPlaneMetrics};

/// Pause after a failed accept or receive (out of file descriptors, say), so the loop does not spin.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Aborts its task when dropped, so what the supervisor drops stops.
#[derive(Debug)]
pub struct AbortOnDrop(pub tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Where a listener sends connections, besides the healthy backends of its load balancer.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// The load balancer, as fault rules match it.
    pub subject: LbSubject,
    pub backend_port: u16,
    /// Empty: every source is allowed.
    pub source_ranges: Vec<IpNet>,
}

impl Route {
    /// Whether a client at `source` may connect (ranges and source both in their canonical form).
    pub fn allows(&self, source: IpAddr) -> bool {
        let source = fakecloud_api::net::canonical(source);
        self.source_ranges.is_empty() || self.source_ranges.iter().any(|r| r.contains(&source))
    }
}

/// What one listener works with, made once: where it counts and reports, and what bounds it.
#[derive(Debug)]
pub struct Ctx {
    pub metrics: DataPlaneMetrics,
    pub faults: Faults,
    pub lb: String,
    pub protocol: Protocol,
    pub port: u16,
    pub budget: Budget,
    /// Its load balancer's caps, shared with its other listeners.
    pub caps: Caps,
    pub status: Status,
}

/// What a listener of a load balancer shares with the others: its backends, budget, caps and status.
#[derive(Debug, Clone)]
pub struct Shared {
    pub healthy: watch::Receiver<Healthy>,
    pub metrics: DataPlaneMetrics,
    pub faults: Faults,
    pub budget: Budget,
    pub caps: Caps,
    pub status: Status,
}

impl Ctx {
    pub fn labels(&self, outcome: &'static str) -> ConnectionLabels {
        ConnectionLabels { load_balancer: self.lb.clone(), protocol: self.protocol.as_str(), port: self.port, outcome }
    }

    pub fn count(&self, outcome: &'static str) {
        self.metrics.connections.get_or_create(&self.labels(outcome)).inc();
    }

    /// A connection (session) refused at `limit`: counted, and among the load balancer's reasons for a while.
    pub fn refuse(&self, limit: Limit) {
        self.count(limit.outcome());
        self.status.refused(&self.lb, self.protocol, self.port, limit, || limit.describe(&self.budget.limits));
    }
}

/// Resolves when the listener is gone (its route's sender dropped).
pub async fn removed(route: &mut watch::Receiver<Arc<Route>>) {
    while route.changed().await.is_ok() {}
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn source_ranges_allow_only_their_members() {
        let any = Route { subject: LbSubject::default(), backend_port: 80, source_ranges: vec![] };
        assert!(any.allows("198.51.100.7".parse().unwrap()));
        let some = Route {
            subject: LbSubject::default(),
            backend_port: 80,
            source_ranges: vec!["127.90.0.0/16".parse().unwrap(), "2001:db8::/32".parse().unwrap()],
        };
        assert!(some.allows("127.90.3.4".parse().unwrap()));
        assert!(some.allows("::ffff:127.90.0.1".parse().unwrap()));
        assert!(some.allows("2001:db8::1".parse().unwrap()));
        assert!(!some.allows("127.91.0.1".parse().unwrap()));
        assert!(!some.allows("2001:db9::1".parse().unwrap()));
    }
}

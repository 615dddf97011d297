//! What a listener's loop works with, TCP ([`super::tcp`]) or UDP ([`super::udp`]): where it forwards (its
//! [`Route`], swapped in place by the supervisor) and where it counts, reports and is bounded ([`Ctx`]).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use fakecloud_api::{Protocol, SessionAffinity};
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

/// Who may connect to a listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sources {
    /// Every client: a load balancer with neither source ranges nor security groups.
    Any,
    /// Clients in these networks (canonical form); none, no client (a load balancer's security groups with no
    /// rule for the listener).
    Only(Vec<IpNet>),
}

impl Sources {
    /// Whether a client at `source` may connect.
    pub fn allow(&self, source: IpAddr) -> bool {
        let source = fakecloud_api::net::canonical(source);
        match self {
            Self::Any => true,
            Self::Only(nets) => nets.iter().any(|r| r.contains(&source)),
        }
    }
}

/// Where a listener sends connections, besides the healthy backends of its load balancer.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// The load balancer, as fault rules match it.
    pub subject: LbSubject,
    pub backend_port: u16,
    pub sources: Sources,
    pub affinity: SessionAffinity,
}

impl Route {
    /// Whether a client at `source` may connect.
    pub fn allows(&self, source: IpAddr) -> bool {
        self.sources.allow(source)
    }

    /// Which of `healthy` backends a new connection (UDP session) from `client` goes to first: the next in
    /// `turn`, or, with client-IP affinity, always the same one for one client address while the healthy set
    /// stays the same (a hash of the address; FNV-1a, so it is the same in every run).
    pub fn pick(&self, healthy: usize, client: IpAddr, turn: &mut usize) -> usize {
        match self.affinity {
            SessionAffinity::None => {
                let first = *turn % healthy;
                *turn = turn.wrapping_add(1);
                first
            }
            SessionAffinity::ClientIp => {
                let octets = match fakecloud_api::net::canonical(client) {
                    IpAddr::V4(v4) => v4.octets().to_vec(),
                    IpAddr::V6(v6) => v6.octets().to_vec(),
                };
                let hash = octets
                    .iter()
                    .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3));
                usize::try_from(hash % healthy as u64).unwrap_or(0)
            }
        }
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
        let any = Route {
            subject: LbSubject::default(),
            backend_port: 80,
            sources: Sources::Any,
            affinity: SessionAffinity::None,
        };
        assert!(any.allows("198.51.100.7".parse().unwrap()));
        let none = Route { sources: Sources::Only(vec![]), ..any.clone() };
        assert!(!none.allows("198.51.100.7".parse().unwrap()), "no network admits no client");
        let some = Route {
            subject: LbSubject::default(),
            backend_port: 80,
            sources: Sources::Only(vec!["127.90.0.0/16".parse().unwrap(), "2001:db8::/32".parse().unwrap()]),
            affinity: SessionAffinity::None,
        };
        assert!(some.allows("127.90.3.4".parse().unwrap()));
        assert!(some.allows("::ffff:127.90.0.1".parse().unwrap()));
        assert!(some.allows("2001:db8::1".parse().unwrap()));
        assert!(!some.allows("127.91.0.1".parse().unwrap()));
        assert!(!some.allows("2001:db9::1".parse().unwrap()));
    }

    #[test]
    fn client_ip_affinity_keeps_a_client_on_one_backend_and_spreads_clients() {
        let route =
            |affinity| Route { subject: LbSubject::default(), backend_port: 80, sources: Sources::Any, affinity };
        let (mut turn, client) = (0, "172.18.0.1".parse().unwrap());
        let sticky = route(SessionAffinity::ClientIp);
        let first = sticky.pick(3, client, &mut turn);
        assert!((0..10).all(|_| sticky.pick(3, client, &mut turn) == first), "one client, one backend");
        assert_eq!(sticky.pick(3, "::ffff:172.18.0.1".parse().unwrap(), &mut turn), first, "its IPv4-mapped form too");
        let spread: std::collections::HashSet<usize> =
            (1..=30u8).map(|k| sticky.pick(3, IpAddr::from([172, 18, 0, k]), &mut turn)).collect();
        assert_eq!(spread.len(), 3, "clients spread over every backend");
        let in_turn = route(SessionAffinity::None);
        let picks: Vec<usize> = (0..4).map(|_| in_turn.pick(3, client, &mut turn)).collect();
        assert_eq!(picks, [0, 1, 2, 0], "without affinity, one after another");
    }
}

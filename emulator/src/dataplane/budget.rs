//! What the data plane may hold open. Every file it opens is counted against its own budget
//! (`serve --lb-max-files`), apart from the API's connections (`--max-connections`): a flood of connections or
//! UDP clients to a load balancer is refused once the budget is spent, and the API keeps the files it needs.
//!
//! Traffic (a TCP connection: the client's socket and the backend's; a UDP session: its upstream socket) stops
//! short of a headroom kept for the load balancers' own sockets: listening sockets and health checks, so that a
//! flood does not keep a new listener from binding or mark every backend unhealthy.
//!
//! Within the budget, each load balancer has its caps too: TCP connections per listener and per load balancer,
//! UDP sessions per load balancer ([`Caps`]).

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::DataPlaneLimits;

/// Files kept from traffic for listening sockets and health checks: at most this, at most a quarter of it all.
const HEADROOM_MAX: u32 = 64;

/// Files in use by the data plane; cheap to clone.
#[derive(Debug, Clone)]
pub struct Budget {
    files: Arc<Semaphore>,
    headroom: usize,
    pub limits: Arc<DataPlaneLimits>,
}

impl Budget {
    pub fn new(limits: DataPlaneLimits) -> Self {
        let files = limits.max_files.max(1);
        Self {
            files: Arc::new(Semaphore::new(files as usize)),
            headroom: HEADROOM_MAX.min(files / 4) as usize,
            limits: Arc::new(limits),
        }
    }

    /// `n` files for a connection or session, if the budget has them beyond the headroom.
    pub fn for_traffic(&self, n: u32) -> Option<OwnedSemaphorePermit> {
        // Racing takers may dip a little into the headroom; they cannot take more than the budget.
        if self.files.available_permits() < self.headroom + n as usize {
            return None;
        }
        self.files.clone().try_acquire_many_owned(n).ok()
    }

    /// A file for a listening socket, if any is left.
    pub fn for_listener(&self) -> Option<OwnedSemaphorePermit> {
        self.files.clone().try_acquire_owned().ok()
    }

    /// A file for a health check: waits for one (the checker's own timeout bounds the wait).
    pub async fn for_probe(&self) -> Option<OwnedSemaphorePermit> {
        self.files.clone().acquire_owned().await.ok()
    }

    /// The caps of one load balancer, new.
    pub fn caps(&self) -> Caps {
        Caps {
            connections: Arc::new(Semaphore::new(self.limits.connections_per_lb as usize)),
            udp_sessions: Arc::new(Semaphore::new(self.limits.udp_sessions_per_lb as usize)),
        }
    }
}

/// One load balancer's caps, shared by its listeners.
#[derive(Debug, Clone)]
pub struct Caps {
    pub connections: Arc<Semaphore>,
    pub udp_sessions: Arc<Semaphore>,
}

/// Which limit refused a connection or session: its metric outcome and what the load balancer's `data_plane`
/// says of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Limit {
    Listener,
    LoadBalancer,
    UdpSessions,
    Files,
}

impl Limit {
    pub fn outcome(self) -> &'static str {
        match self {
            Self::Listener => "refused_listener_full",
            Self::LoadBalancer => "refused_lb_full",
            Self::UdpSessions => "refused_sessions_full",
            Self::Files => "refused_files_full",
        }
    }

    /// The limit, in words, with its value and the flag that sets it.
    pub fn describe(self, limits: &DataPlaneLimits) -> String {
        match self {
            Self::Listener => format!(
                "the limit of {} connections per listener (--lb-max-connections-per-listener)",
                limits.connections_per_listener
            ),
            Self::LoadBalancer => {
                format!(
                    "the limit of {} connections per load balancer (--lb-max-connections)",
                    limits.connections_per_lb
                )
            }
            Self::UdpSessions => format!(
                "the limit of {} UDP sessions per load balancer (--lb-max-udp-sessions)",
                limits.udp_sessions_per_lb
            ),
            Self::Files => format!("the data plane's budget of {} open files (--lb-max-files)", limits.max_files),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traffic_stops_short_of_the_headroom_and_listeners_may_use_it() {
        let budget = Budget::new(DataPlaneLimits { max_files: 40, ..DataPlaneLimits::default() });
        // Headroom: a quarter of 40.
        let traffic: Vec<_> = std::iter::from_fn(|| budget.for_traffic(2)).collect();
        assert_eq!(traffic.len(), 15, "30 files for traffic, 10 kept");
        let listeners: Vec<_> = std::iter::from_fn(|| budget.for_listener()).collect();
        assert_eq!(listeners.len(), 10);
        drop(traffic);
        assert!(budget.for_traffic(2).is_some(), "files come back when connections end");
    }
}

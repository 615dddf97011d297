//! One TCP listener of a load balancer: accept on `VIP:port`, refuse sources outside the source ranges and
//! connections when no backend is healthy (closed at once), and forward the rest to the healthy backends in
//! turn. What it forwards to is read from watch channels on every connection, so the supervisor changes it in
//! place: a listener that did not change keeps its socket and its connections.
//!
//! Data-plane fault rules are asked about every connection before it is forwarded: a `reset` closes it with a
//! TCP RST (`SO_LINGER` 0), at once or after forwarding for a while; a `latency` holds it before its backend
//! is connected.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use fakecloud_api::Protocol;
use ipnet::IpNet;
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::watch;

use super::AbortOnDrop;
use super::faults::Faults;
use super::health::Healthy;
use crate::faults::{LbEvent, LbSubject, LbVerdict};
use crate::http::metrics::{ConnectionLabels, DataPlaneMetrics};

/// The longest a connection to one backend may take before the next healthy one is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Pause after a failed accept or receive (out of file descriptors, say), so the loop does not spin.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

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
    pub fn allows(&self, source: IpAddr) -> bool {
        let source = match source {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(source, IpAddr::V4),
            v4 => v4,
        };
        self.source_ranges.is_empty() || self.source_ranges.iter().any(|r| r.contains(&source))
    }
}

/// A bound listener, TCP or UDP. Dropping it closes the socket and every connection (session) it forwards.
#[derive(Debug)]
pub struct Listener {
    route: watch::Sender<Arc<Route>>,
    _accept: AbortOnDrop,
}

/// Labels of one listener's connection counter, made once.
#[derive(Debug)]
pub struct Counters {
    pub metrics: DataPlaneMetrics,
    faults: Faults,
    pub lb: String,
    pub protocol: Protocol,
    pub port: u16,
}

impl Counters {
    pub fn labels(&self, outcome: &'static str) -> ConnectionLabels {
        ConnectionLabels { load_balancer: self.lb.clone(), protocol: self.protocol.as_str(), port: self.port, outcome }
    }

    pub fn count(&self, outcome: &'static str) {
        self.metrics.connections.get_or_create(&self.labels(outcome)).inc();
    }
}

impl Listener {
    /// Bind `addr` for `protocol` and start accepting (TCP) or receiving (UDP, see [`super::udp`]).
    pub async fn start(
        lb: &str,
        protocol: Protocol,
        addr: SocketAddr,
        route: Route,
        healthy: watch::Receiver<Healthy>,
        metrics: DataPlaneMetrics,
        faults: Faults,
    ) -> std::io::Result<Self> {
        let (tx, rx) = watch::channel(Arc::new(route));
        let counters = Counters { metrics, faults, lb: lb.to_string(), protocol, port: addr.port() };
        let accept = match protocol {
            Protocol::Tcp => tokio::spawn(accept_loop(TcpListener::bind(addr).await?, rx, healthy, counters)),
            Protocol::Udp => {
                tokio::spawn(super::udp::receive_loop(UdpSocket::bind(addr).await?, rx, healthy, counters))
            }
        };
        Ok(Self { route: tx, _accept: AbortOnDrop(accept) })
    }

    /// Forward new connections as `route` says; established ones are left alone.
    pub fn update(&self, route: Route) {
        self.route.send_if_modified(|r| {
            let changed = **r != route;
            if changed {
                *r = Arc::new(route);
            }
            changed
        });
    }
}

async fn accept_loop(
    socket: TcpListener,
    route: watch::Receiver<Arc<Route>>,
    healthy: watch::Receiver<Healthy>,
    counters: Counters,
) {
    let mut turn: usize = 0;
    loop {
        let (client, peer) = match socket.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(lb = %counters.lb, port = counters.port, error = %e, "load balancer listener cannot accept");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let current = route.borrow().clone();
        if !current.allows(peer.ip()) {
            counters.count("refused_source");
            tracing::debug!(lb = %counters.lb, port = counters.port, %peer, "refused: outside the source ranges");
            continue;
        }
        let backends = healthy.borrow().clone();
        if backends.is_empty() {
            counters.count("refused_no_backend");
            tracing::debug!(lb = %counters.lb, port = counters.port, %peer, "refused: no healthy backend");
            continue;
        }
        let first = turn % backends.len();
        turn = turn.wrapping_add(1);
        let counted = counters.labels("");
        let (metrics, faults) = (counters.metrics.clone(), counters.faults.clone());
        let to = Upstream { backends, first, route: current };
        tokio::spawn(forward(client, to, route.clone(), metrics, faults, counted));
    }
}

/// Where one connection goes: the healthy backends from `first` on, as `route` says.
struct Upstream {
    backends: Healthy,
    first: usize,
    route: Arc<Route>,
}

/// Ask the fault rules, then connect to the healthy backends from `first` on until one answers, then copy both
/// ways until either side closes or the listener is removed.
async fn forward(
    mut client: TcpStream,
    to: Upstream,
    mut route: watch::Receiver<Arc<Route>>,
    metrics: DataPlaneMetrics,
    faults: Faults,
    mut labels: ConnectionLabels,
) {
    let Upstream { backends, first, route: current } = to;
    let event = LbEvent::Connection { port: labels.port, backend: &backends[first].0 };
    let mut reset_after = None;
    match faults.judge(&current.subject, event).await {
        None | Some(LbVerdict::BlackHole) => {}
        Some(LbVerdict::Reset { after: None }) => {
            labels.outcome = "reset_by_fault";
            metrics.connections.get_or_create(&labels).inc();
            reset(&client);
            return;
        }
        Some(LbVerdict::Reset { after }) => reset_after = after,
        Some(LbVerdict::Delay(by)) => {
            tokio::select! {
                () = tokio::time::sleep(by) => {}
                () = removed(&mut route) => return,
            }
        }
    }
    let port = current.backend_port;
    let mut upstream = None;
    for i in 0..backends.len() {
        let addr = SocketAddr::new(backends[(first + i) % backends.len()].1, port);
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => {
                upstream = Some(s);
                break;
            }
            Ok(Err(e)) => {
                tracing::debug!(lb = %labels.load_balancer, %addr, error = %e, "backend refused; trying the next")
            }
            Err(_) => tracing::debug!(lb = %labels.load_balancer, %addr, "backend did not answer; trying the next"),
        }
    }
    let Some(mut upstream) = upstream else {
        labels.outcome = "backend_failed";
        metrics.connections.get_or_create(&labels).inc();
        return;
    };
    labels.outcome = "accepted";
    metrics.connections.get_or_create(&labels).inc();
    // Proxied bytes should not wait for Nagle: the client already chose how to write them.
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let reset_timer = async {
        match reset_after {
            Some(after) => tokio::time::sleep(after).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
        () = removed(&mut route) => {}
        () = reset_timer => {
            reset(&client);
            reset(&upstream);
        }
    }
}

/// Make the coming close a reset (RST) instead of an orderly FIN.
fn reset(stream: &TcpStream) {
    if let Err(e) = stream.set_zero_linger() {
        tracing::debug!(error = %e, "cannot set SO_LINGER 0; the connection closes without a reset");
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

//! One UDP listener of a load balancer. UDP has no connections, so the datagrams of one client address make a
//! session: the first opens an upstream socket connected to one healthy backend (in turn, as TCP connections
//! are spread), and every datagram after it goes there; what the backend answers goes back to the client from
//! the load balancer's address. A session ends after [`IDLE`] without a datagram either way, and at most
//! [`SESSIONS_MAX`] are open at once: a new client past that is dropped until one ends. Source ranges are
//! checked on every datagram; with no healthy backend, a new client's datagrams are dropped.
//!
//! Data-plane fault rules act on TCP connections; UDP sessions are not faulted.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::sync::watch;
use tokio::time::Instant;

use super::AbortOnDrop;
use super::health::Healthy;
use super::proxy::{ACCEPT_BACKOFF, Counters, Route};

/// How long a session lives without a datagram either way (as conntrack's UDP stream timeout, 120 s, roughly).
const IDLE: Duration = Duration::from_secs(120);
/// Sessions open at once on one listener.
const SESSIONS_MAX: usize = 4096;
/// How often idle sessions are looked for.
const SWEEP: Duration = Duration::from_secs(5);
/// The largest datagram: the most a UDP payload can be.
const DATAGRAM_MAX: usize = 65_535;

/// One client's session.
struct Session {
    upstream: Arc<UdpSocket>,
    /// When a datagram last went either way, in ms since the listener started.
    last: Arc<AtomicU64>,
    _replies: AbortOnDrop,
}

/// The open sessions, by client address; bounded, and swept of idle ones.
struct Sessions {
    by_client: HashMap<SocketAddr, Session>,
    max: usize,
    idle_ms: u64,
}

impl Sessions {
    fn new(max: usize, idle: Duration) -> Self {
        Self { by_client: HashMap::new(), max, idle_ms: u64::try_from(idle.as_millis()).unwrap_or(u64::MAX) }
    }

    /// `client`'s session, if open, marked as used at `now`.
    fn touch(&self, client: SocketAddr, now: u64) -> Option<&Session> {
        let s = self.by_client.get(&client)?;
        s.last.store(now, Ordering::Relaxed);
        Some(s)
    }

    /// End the sessions idle at `now`.
    fn sweep(&mut self, now: u64) {
        let idle = self.idle_ms;
        self.by_client.retain(|_, s| now.saturating_sub(s.last.load(Ordering::Relaxed)) < idle);
    }

    /// Whether a new session fits, after ending the idle ones.
    fn has_room(&mut self, now: u64) -> bool {
        if self.by_client.len() >= self.max {
            self.sweep(now);
        }
        self.by_client.len() < self.max
    }
}

/// Milliseconds since `epoch`.
fn since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Receive on `socket` until the listener is dropped, forwarding each client's datagrams to its session's
/// backend.
pub async fn receive_loop(
    socket: UdpSocket,
    route: watch::Receiver<Arc<Route>>,
    healthy: watch::Receiver<Healthy>,
    counters: Counters,
) {
    let socket = Arc::new(socket);
    let epoch = Instant::now();
    let mut sessions = Sessions::new(SESSIONS_MAX, IDLE);
    let mut buf = vec![0u8; DATAGRAM_MAX];
    let mut sweep = tokio::time::interval(SWEEP);
    let mut turn: usize = 0;
    loop {
        let (n, client) = tokio::select! {
            received = socket.recv_from(&mut buf) => match received {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(lb = %counters.lb, port = counters.port, error = %e, "load balancer UDP listener cannot receive");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            _ = sweep.tick() => {
                sessions.sweep(since(epoch));
                continue;
            }
        };
        let datagram = &buf[..n];
        let current = route.borrow().clone();
        if !current.allows(client.ip()) {
            counters.count("refused_source");
            continue;
        }
        let now = since(epoch);
        if let Some(s) = sessions.touch(client, now) {
            if let Err(e) = s.upstream.send(datagram).await {
                tracing::debug!(lb = %counters.lb, %client, error = %e, "UDP: cannot forward a datagram");
            }
            continue;
        }
        if !sessions.has_room(now) {
            counters.count("refused_sessions_full");
            tracing::debug!(lb = %counters.lb, port = counters.port, %client, "UDP: too many sessions; dropped");
            continue;
        }
        let backends = healthy.borrow().clone();
        if backends.is_empty() {
            counters.count("refused_no_backend");
            continue;
        }
        let (instance, ip) = &backends[turn % backends.len()];
        turn = turn.wrapping_add(1);
        let backend = SocketAddr::new(*ip, current.backend_port);
        match open(&socket, client, backend, epoch, now).await {
            Ok(session) => {
                counters.count("accepted");
                tracing::debug!(lb = %counters.lb, %client, %instance, "UDP: session opened");
                if let Err(e) = session.upstream.send(datagram).await {
                    tracing::debug!(lb = %counters.lb, %client, error = %e, "UDP: cannot forward a datagram");
                }
                sessions.by_client.insert(client, session);
            }
            Err(e) => {
                counters.count("backend_failed");
                tracing::debug!(lb = %counters.lb, %backend, error = %e, "UDP: cannot open a socket to the backend");
            }
        }
    }
}

/// A session for `client` to `backend`: an upstream socket, and a task sending its answers back to `client`
/// from the listener's socket.
async fn open(
    listener: &Arc<UdpSocket>,
    client: SocketAddr,
    backend: SocketAddr,
    epoch: Instant,
    now: u64,
) -> std::io::Result<Session> {
    let any = match backend.ip() {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    let upstream = UdpSocket::bind((any, 0)).await?;
    upstream.connect(backend).await?;
    let upstream = Arc::new(upstream);
    let last = Arc::new(AtomicU64::new(now));
    let replies = tokio::spawn({
        let (listener, upstream, last) = (listener.clone(), upstream.clone(), last.clone());
        async move {
            let mut buf = vec![0u8; DATAGRAM_MAX];
            // Ends when the backend refuses (ICMP unreachable) or the session is dropped (aborted).
            while let Ok(n) = upstream.recv(&mut buf).await {
                last.store(since(epoch), Ordering::Relaxed);
                if let Err(e) = listener.send_to(&buf[..n], client).await {
                    tracing::debug!(%client, error = %e, "UDP: cannot answer the client");
                }
            }
        }
    });
    Ok(Session { upstream, last, _replies: AbortOnDrop(replies) })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    async fn session(last: u64) -> Session {
        let upstream = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
        Session { upstream, last: Arc::new(AtomicU64::new(last)), _replies: AbortOnDrop(tokio::spawn(async {})) }
    }

    fn client(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[tokio::test]
    async fn sessions_end_when_idle_and_are_bounded() {
        let mut s = Sessions::new(2, Duration::from_millis(100));
        s.by_client.insert(client(1), session(0).await);
        s.by_client.insert(client(2), session(0).await);
        // Full, and nothing idle yet: no room.
        assert!(!s.has_room(50));
        // A datagram keeps client 1's session alive; client 2's ends.
        assert!(s.touch(client(1), 90).is_some());
        assert!(s.has_room(120));
        assert!(s.touch(client(2), 120).is_none());
        assert_eq!(s.by_client.len(), 1);
        s.sweep(189);
        assert_eq!(s.by_client.len(), 1, "used at 90: idle for 100 ms only at 190");
        s.sweep(190);
        assert!(s.by_client.is_empty());
    }
}

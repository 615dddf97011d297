//! One UDP listener of a load balancer. UDP has no connections, so the datagrams of one client address make a session:
//! the first opens an upstream socket connected to one healthy backend (chosen as a TCP connection's is: in turn, or by
//! the client's address with client-IP affinity), and every datagram after it goes there; what the backend answers goes
//! back to the client from the load balancer's address. A session ends after [`IDLE`] without a datagram either way, or
//! as soon as its backend refuses a datagram (ICMP port unreachable, as kube-proxy answers a NodePort with no endpoint
//! yet): the client's next datagram opens a new one, so a client that keeps its source port, as a DNS resolver or
//! upstream's UDP e2e specs do, is not stuck on a session that nothing answers. Sessions are bounded per load balancer,
//! across its UDP listeners, and each takes a file of the data plane's budget (see [`super::budget`]): a new client
//! past either is dropped until a session ends. Source ranges are checked on every datagram; with no healthy backend, a
//! new client's datagrams are dropped.
//!
//! Data-plane fault rules act on TCP connections; UDP sessions are not faulted.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::sync::{OwnedSemaphorePermit, watch};
use tokio::time::Instant;

use super::budget::{Budget, Caps, Limit};
use super::context::{ACCEPT_BACKOFF, AbortOnDrop, Ctx, Route};
use super::health::Healthy;

/// How long a session lives without a datagram either way (as conntrack's UDP stream timeout, 120 s, roughly).
const IDLE: Duration = Duration::from_secs(120);
/// How often idle sessions are looked for.
const SWEEP: Duration = Duration::from_secs(5);
/// The largest datagram: the most a UDP payload can be.
const DATAGRAM_MAX: usize = 65_535;

/// One client's session.
struct Session {
    upstream: Arc<UdpSocket>,
    /// When a datagram last went either way, in ms since the listener started.
    last: Arc<AtomicU64>,
    /// Set when the backend refused a datagram: nothing will answer on this upstream socket again.
    refused: Arc<AtomicBool>,
    _replies: AbortOnDrop,
    _held: Held,
}

/// A session's place under its load balancer's cap and its socket's file, given back when it ends.
type Held = (OwnedSemaphorePermit, OwnedSemaphorePermit);

/// What [`Sessions::touch`] found for a client.
enum Touched<'a> {
    Open(&'a Session),
    /// None now: its backend had refused, so it ended.
    Refused,
    None,
}

/// This listener's open sessions, by client address; swept of idle ones.
struct Sessions {
    by_client: HashMap<SocketAddr, Session>,
    idle_ms: u64,
}

impl Sessions {
    fn new(idle: Duration) -> Self {
        Self { by_client: HashMap::new(), idle_ms: u64::try_from(idle.as_millis()).unwrap_or(u64::MAX) }
    }

    /// `client`'s session, if open, marked as used at `now`; a session its backend refused is ended here.
    fn touch(&mut self, client: SocketAddr, now: u64) -> Touched<'_> {
        let refused = match self.by_client.get(&client) {
            None => return Touched::None,
            Some(s) => s.refused.load(Ordering::Relaxed),
        };
        if refused {
            self.by_client.remove(&client);
            return Touched::Refused;
        }
        match self.by_client.get(&client) {
            Some(s) => {
                s.last.store(now, Ordering::Relaxed);
                Touched::Open(s)
            }
            None => Touched::None,
        }
    }

    /// End the sessions idle at `now`.
    fn sweep(&mut self, now: u64) {
        let idle = self.idle_ms;
        self.by_client.retain(|_, s| now.saturating_sub(s.last.load(Ordering::Relaxed)) < idle);
    }

    /// Room for a new session under the load balancer's cap and the budget (after ending this listener's idle
    /// sessions, if that is what it takes), or the limit that refuses it.
    fn room(&mut self, caps: &Caps, budget: &Budget, now: u64) -> Result<Held, Limit> {
        let take = || -> Result<Held, Limit> {
            let slot = caps.udp_sessions.clone().try_acquire_owned().map_err(|_| Limit::UdpSessions)?;
            Ok((slot, budget.for_traffic(1).ok_or(Limit::Files)?))
        };
        take().or_else(|_| {
            self.sweep(now);
            take()
        })
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
    ctx: Ctx,
) {
    let socket = Arc::new(socket);
    let epoch = Instant::now();
    let mut sessions = Sessions::new(IDLE);
    let mut buf = vec![0u8; DATAGRAM_MAX];
    let mut sweep = tokio::time::interval(SWEEP);
    let mut turn: usize = 0;
    loop {
        let (n, client) = tokio::select! {
            received = socket.recv_from(&mut buf) => match received {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(lb = %ctx.lb, port = ctx.port, error = %e, "load balancer UDP listener cannot receive");
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
            ctx.count("refused_source");
            continue;
        }
        let now = since(epoch);
        match sessions.touch(client, now) {
            Touched::Open(s) => {
                if let Err(e) = s.upstream.send(datagram).await {
                    tracing::debug!(lb = %ctx.lb, %client, error = %e, "UDP: cannot forward a datagram");
                }
                continue;
            }
            Touched::Refused => ctx.count("backend_refused"),
            Touched::None => {}
        }
        let backends = healthy.borrow().clone();
        if backends.is_empty() {
            ctx.count("refused_no_backend");
            continue;
        }
        let held = match sessions.room(&ctx.caps, &ctx.budget, now) {
            Ok(held) => held,
            Err(limit) => {
                ctx.refuse(limit);
                tracing::debug!(lb = %ctx.lb, port = ctx.port, %client, ?limit, "UDP: at a limit; dropped");
                continue;
            }
        };
        let (instance, ip) = &backends[current.pick(backends.len(), client.ip(), &mut turn)];
        let backend = SocketAddr::new(*ip, current.backend_port);
        match open(&socket, client, backend, epoch, now, held).await {
            Ok(session) => {
                ctx.count("accepted");
                tracing::debug!(lb = %ctx.lb, %client, %instance, "UDP: session opened");
                if let Err(e) = session.upstream.send(datagram).await {
                    tracing::debug!(lb = %ctx.lb, %client, error = %e, "UDP: cannot forward a datagram");
                }
                sessions.by_client.insert(client, session);
            }
            Err(e) => {
                ctx.count("backend_failed");
                tracing::debug!(lb = %ctx.lb, %backend, error = %e, "UDP: cannot open a socket to the backend");
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
    held: Held,
) -> std::io::Result<Session> {
    let any = match backend.ip() {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    let upstream = UdpSocket::bind((any, 0)).await?;
    upstream.connect(backend).await?;
    let upstream = Arc::new(upstream);
    let last = Arc::new(AtomicU64::new(now));
    let refused = Arc::new(AtomicBool::new(false));
    let replies = tokio::spawn({
        let (listener, upstream, last, refused) = (listener.clone(), upstream.clone(), last.clone(), refused.clone());
        async move {
            let mut buf = vec![0u8; DATAGRAM_MAX];
            // Ends when the backend refuses (ICMP unreachable) or the session is dropped (aborted).
            loop {
                match upstream.recv(&mut buf).await {
                    Ok(n) => {
                        last.store(since(epoch), Ordering::Relaxed);
                        if let Err(e) = listener.send_to(&buf[..n], client).await {
                            tracing::debug!(%client, error = %e, "UDP: cannot answer the client");
                        }
                    }
                    Err(e) => {
                        tracing::debug!(%client, %backend, error = %e, "UDP: the backend refused; session ends");
                        refused.store(true, Ordering::Relaxed);
                        return;
                    }
                }
            }
        }
    });
    Ok(Session { upstream, last, refused, _replies: AbortOnDrop(replies), _held: held })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::config::DataPlaneLimits;

    async fn session(last: u64, held: Held) -> Session {
        let upstream = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
        Session {
            upstream,
            last: Arc::new(AtomicU64::new(last)),
            refused: Arc::new(AtomicBool::new(false)),
            _replies: AbortOnDrop(tokio::spawn(async {})),
            _held: held,
        }
    }

    fn client(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[tokio::test]
    async fn sessions_end_when_idle_and_are_bounded_per_load_balancer() {
        let limits = DataPlaneLimits { udp_sessions_per_lb: 2, max_files: 1000, ..DataPlaneLimits::default() };
        let budget = Budget::new(limits);
        let caps = budget.caps();
        let mut s = Sessions::new(Duration::from_millis(100));
        let mut other_listener = Sessions::new(Duration::from_millis(100));
        let held = s.room(&caps, &budget, 0).unwrap();
        s.by_client.insert(client(1), session(0, held).await);
        // The load balancer's other listener takes the second place.
        let held = other_listener.room(&caps, &budget, 0).unwrap();
        other_listener.by_client.insert(client(2), session(0, held).await);
        // Full, and nothing idle yet: no room on either listener.
        assert_eq!(s.room(&caps, &budget, 50).err(), Some(Limit::UdpSessions));
        // A datagram keeps client 1's session alive; once the other listener's idle session ends, there is room.
        assert!(matches!(s.touch(client(1), 90), Touched::Open(_)));
        assert_eq!(
            s.room(&caps, &budget, 120).err(),
            Some(Limit::UdpSessions),
            "the other listener's is not this one's to end"
        );
        other_listener.sweep(120);
        assert!(s.room(&caps, &budget, 120).is_ok());
        s.sweep(189);
        assert_eq!(s.by_client.len(), 1, "used at 90: idle for 100 ms only at 190");
        s.sweep(190);
        assert!(s.by_client.is_empty());
    }

    #[tokio::test]
    async fn sessions_take_files_from_the_budget() {
        let budget = Budget::new(DataPlaneLimits { max_files: 4, ..DataPlaneLimits::default() });
        let caps = budget.caps();
        let mut s = Sessions::new(Duration::from_secs(60));
        // 4 files, a quarter kept for listeners and health checks.
        let held: Vec<Held> = (0..3).map(|_| s.room(&caps, &budget, 0).unwrap()).collect();
        assert_eq!(s.room(&caps, &budget, 0).err(), Some(Limit::Files));
        drop(held);
        assert!(s.room(&caps, &budget, 0).is_ok());
    }
}

//! One TCP listener of a load balancer: accept on `VIP:port`, refuse sources outside the source ranges and
//! connections when no backend is healthy (closed at once), and forward the rest to the healthy backends in
//! turn. What it forwards to is read from watch channels on every connection, so the supervisor changes it in
//! place: a listener that did not change keeps its socket and its connections.
//!
//! Data-plane fault rules are asked about every connection before it is forwarded: a `reset` closes it with a
//! TCP RST (`SO_LINGER` 0), at once or after forwarding for a while; a `latency` holds it before its backend
//! is connected.
//!
//! Every connection is bounded (see [`super::budget`]): past the listener's, the load balancer's or the data
//! plane's limit it is closed at once and counted, and one that passes no byte for the idle timeout is closed.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use fakecloud_api::Protocol;
use ipnet::IpNet;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;

use super::AbortOnDrop;
use super::budget::{Budget, Caps, Limit};
use super::faults::Faults;
use super::health::Healthy;
use super::status::Status;
use crate::faults::{LbEvent, LbSubject, LbVerdict};
use crate::metrics::{ConnectionLabels, DataPlaneMetrics};

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
    /// Whether a client at `source` may connect (ranges and source both in their canonical form).
    pub fn allows(&self, source: IpAddr) -> bool {
        let source = fakecloud_api::net::canonical(source);
        self.source_ranges.is_empty() || self.source_ranges.iter().any(|r| r.contains(&source))
    }
}

/// A bound listener, TCP or UDP. Dropping it closes the socket and every connection (session) it forwards.
#[derive(Debug)]
pub struct Listener {
    route: watch::Sender<Arc<Route>>,
    _accept: AbortOnDrop,
    /// Its socket's file, in the data plane's budget.
    _file: OwnedSemaphorePermit,
}

/// What one listener works with, made once: where it counts and reports, and what bounds it.
#[derive(Debug)]
pub struct Ctx {
    pub metrics: DataPlaneMetrics,
    faults: Faults,
    pub lb: String,
    pub protocol: Protocol,
    pub port: u16,
    pub budget: Budget,
    /// Its load balancer's caps, shared with its other listeners.
    pub caps: Caps,
    status: Status,
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

impl Listener {
    /// Bind `addr` for `protocol` and start accepting (TCP) or receiving (UDP, see [`super::udp`]).
    pub async fn start(
        lb: &str,
        protocol: Protocol,
        addr: SocketAddr,
        route: Route,
        shared: Shared,
    ) -> io::Result<Self> {
        let Some(file) = shared.budget.for_listener() else {
            let spent = Limit::Files.describe(&shared.budget.limits);
            return Err(io::Error::other(format!("{spent} is spent")));
        };
        let (tx, rx) = watch::channel(Arc::new(route));
        let Shared { healthy, metrics, faults, budget, caps, status } = shared;
        let ctx = Ctx { metrics, faults, lb: lb.to_string(), protocol, port: addr.port(), budget, caps, status };
        let accept = match protocol {
            Protocol::Tcp => tokio::spawn(accept_loop(TcpListener::bind(addr).await?, rx, healthy, ctx)),
            Protocol::Udp => tokio::spawn(super::udp::receive_loop(UdpSocket::bind(addr).await?, rx, healthy, ctx)),
        };
        Ok(Self { route: tx, _accept: AbortOnDrop(accept), _file: file })
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

/// What a forwarded connection holds while it is open: its places under each cap and its two files.
struct Held {
    _listener: OwnedSemaphorePermit,
    _lb: OwnedSemaphorePermit,
    _files: OwnedSemaphorePermit,
}

/// Room for one more connection under `listener`'s, the load balancer's and the budget's limits, or the limit
/// that refuses it.
fn admit(ctx: &Ctx, listener: &Arc<Semaphore>) -> Result<Held, Limit> {
    let listener = listener.clone().try_acquire_owned().map_err(|_| Limit::Listener)?;
    let lb = ctx.caps.connections.clone().try_acquire_owned().map_err(|_| Limit::LoadBalancer)?;
    let files = ctx.budget.for_traffic(2).ok_or(Limit::Files)?;
    Ok(Held { _listener: listener, _lb: lb, _files: files })
}

async fn accept_loop(
    socket: TcpListener,
    route: watch::Receiver<Arc<Route>>,
    healthy: watch::Receiver<Healthy>,
    ctx: Ctx,
) {
    let ctx = Arc::new(ctx);
    let open = Arc::new(Semaphore::new(ctx.budget.limits.connections_per_listener as usize));
    let mut turn: usize = 0;
    loop {
        let (client, peer) = match socket.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(lb = %ctx.lb, port = ctx.port, error = %e, "load balancer listener cannot accept");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let current = route.borrow().clone();
        if !current.allows(peer.ip()) {
            ctx.count("refused_source");
            tracing::debug!(lb = %ctx.lb, port = ctx.port, %peer, "refused: outside the source ranges");
            continue;
        }
        let backends = healthy.borrow().clone();
        if backends.is_empty() {
            ctx.count("refused_no_backend");
            tracing::debug!(lb = %ctx.lb, port = ctx.port, %peer, "refused: no healthy backend");
            continue;
        }
        let held = match admit(&ctx, &open) {
            Ok(held) => held,
            Err(limit) => {
                ctx.refuse(limit);
                tracing::debug!(lb = %ctx.lb, port = ctx.port, %peer, ?limit, "refused: at a limit");
                continue;
            }
        };
        let first = turn % backends.len();
        turn = turn.wrapping_add(1);
        let to = Upstream { backends, first, route: current };
        tokio::spawn(forward(client, to, route.clone(), ctx.clone(), held));
    }
}

/// Where one connection goes: the healthy backends from `first` on, as `route` says.
struct Upstream {
    backends: Healthy,
    first: usize,
    route: Arc<Route>,
}

/// Ask the fault rules, then connect to the healthy backends from `first` on until one answers, then copy both
/// ways until either side closes, it is idle for the idle timeout, or the listener is removed.
async fn forward(
    mut client: TcpStream,
    to: Upstream,
    mut route: watch::Receiver<Arc<Route>>,
    ctx: Arc<Ctx>,
    _held: Held,
) {
    let Upstream { backends, first, route: current } = to;
    let event = LbEvent::Connection { port: ctx.port, backend: &backends[first].0 };
    let mut reset_after = None;
    match ctx.faults.judge(&current.subject, event).await {
        None | Some(LbVerdict::BlackHole) => {}
        Some(LbVerdict::Reset { after: None }) => {
            ctx.count("reset_by_fault");
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
            Ok(Err(e)) => tracing::debug!(lb = %ctx.lb, %addr, error = %e, "backend refused; trying the next"),
            Err(_) => tracing::debug!(lb = %ctx.lb, %addr, "backend did not answer; trying the next"),
        }
    }
    let Some(mut upstream) = upstream else {
        ctx.count("backend_failed");
        return;
    };
    ctx.count("accepted");
    // Proxied bytes should not wait for Nagle: the client already chose how to write them.
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let reset_timer = async {
        match reset_after {
            Some(after) => tokio::time::sleep(after).await,
            None => std::future::pending().await,
        }
    };
    let idle = ctx.budget.limits.idle_timeout;
    let last = Arc::new(LastByte::new());
    let (mut c, mut u) =
        (Touching { stream: &mut client, last: &last }, Touching { stream: &mut upstream, last: &last });
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut c, &mut u) => {}
        () = removed(&mut route) => {}
        () = last.quiet_for(idle) => {
            ctx.metrics.idle_closed.get_or_create(&ctx.labels("idle")).inc();
            tracing::debug!(lb = %ctx.lb, port = ctx.port, ?idle, "closing a proxied connection: idle");
        }
        () = reset_timer => {
            reset(&client);
            reset(&upstream);
        }
    }
}

/// When a byte last went either way on a proxied connection.
struct LastByte {
    epoch: Instant,
    /// Milliseconds since `epoch`.
    at: AtomicU64,
}

impl LastByte {
    fn new() -> Self {
        Self { epoch: Instant::now(), at: AtomicU64::new(0) }
    }

    fn touch(&self) {
        self.at.store(u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Resolves once no byte has gone either way for `idle`.
    async fn quiet_for(&self, idle: Duration) {
        loop {
            let last = self.epoch + Duration::from_millis(self.at.load(Ordering::Relaxed));
            let quiet = last.elapsed();
            if quiet >= idle {
                return;
            }
            tokio::time::sleep(idle - quiet).await;
        }
    }
}

/// A proxied stream that notes when bytes go through it.
struct Touching<'a> {
    stream: &'a mut TcpStream,
    last: &'a LastByte,
}

impl AsyncRead for Touching<'_> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut *self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.last.touch();
        }
        read
    }
}

impl AsyncWrite for Touching<'_> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut *self.stream).poll_write(cx, buf);
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            self.last.touch();
        }
        written
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.stream).poll_shutdown(cx)
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

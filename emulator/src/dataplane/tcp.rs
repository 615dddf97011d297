//! A TCP listener's loop: accept on `VIP:port`, refuse sources outside the source ranges and
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
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;

use super::budget::Limit;
use super::context::{ACCEPT_BACKOFF, Ctx, Route, removed};
use super::health::Healthy;
use crate::faults::{LbEvent, LbVerdict};

/// The longest a connection to one backend may take before the next healthy one is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
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

pub(super) async fn accept_loop(
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
        let first = current.pick(backends.len(), peer.ip(), &mut turn);
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

//! Serving HTTP/1 connections with the limits a server on a shared machine needs: a request's head must arrive
//! within the header-read timeout of its first byte, a keep-alive connection may sit idle only for the idle
//! timeout, an answer the client stops reading is given up after the idle timeout without progress, and at most
//! `max_connections` are open at once. At that cap, idle keep-alive connections are closed to make room for new
//! ones; when every connection is busy, new ones wait in the listen backlog. A connection is busy from its
//! request's head to its answer's last byte: a long answer (the audit stream) is never cut as idle. (A request's
//! body has a deadline of its own, which the gatekeeper keeps: see `http`.)

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tower::ServiceExt;

/// File descriptors kept back from connections: the database, its WAL, the listener, logs.
const RESERVED_FDS: u64 = 128;

/// The connection limits (`fakecloud serve --header-read-timeout`, `--body-read-timeout`, `--idle-timeout`,
/// `--max-connections`).
#[derive(Debug, Clone)]
pub struct Limits {
    pub header_read_timeout: Duration,
    /// From the end of a request's head to the end of its body, however it trickles in.
    pub body_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            max_connections: default_max_connections(),
        }
    }
}

/// Raise this process's open-file limit to its hard limit, as servers do: the soft default (often 1024) is
/// far below what a machine allows.
pub fn raise_fd_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
        && let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
    {
        tracing::warn!(error = %e, soft, hard, "cannot raise the open-file limit");
    }
}

/// A connection cap that leaves room below the open-file limit for everything else the process opens.
pub fn default_max_connections() -> u32 {
    let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).map_or(1024, |(s, _)| s);
    u32::try_from(soft.saturating_sub(RESERVED_FDS).max(16)).unwrap_or(u32::MAX)
}

/// Serve `router` on `listener` until `shutdown` turns true, then let open calls finish.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    mut shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let max = limits.max_connections.max(1);
    let slots = Arc::new(Semaphore::new(usize::try_from(max).unwrap_or(Semaphore::MAX_PERMITS)));
    // Wakes every idle connection to close, when the cap is reached.
    let make_room = Arc::new(Notify::new());
    let mut last_warning: Option<Instant> = None;
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before it was accepted: keep serving.
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopping(&mut shutdown) => break,
        };
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                if last_warning.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                    tracing::warn!(
                        max_connections = max,
                        "connection limit reached: closing idle keep-alive connections to make room; new connections \
                         wait while all are busy (raise it with --max-connections)"
                    );
                    last_warning = Some(Instant::now());
                }
                match make_room_for_one(&slots, &make_room, &mut shutdown).await {
                    Some(slot) => slot,
                    None => break,
                }
            }
        };
        let (router, limits, make_room, shutdown) =
            (router.clone(), limits.clone(), make_room.clone(), shutdown.clone());
        tokio::spawn(async move {
            connection(stream, router, &limits, &make_room, shutdown).await;
            drop(slot);
        });
    }
    // Every connection gives its slot back when it ends.
    let _all = slots.acquire_many(max).await;
    Ok(())
}

/// Close idle connections until a slot is free (asking again now and then: a connection only hears the call
/// once it waits idle, and the newest may not have yet). `None` when shutting down.
async fn make_room_for_one(
    slots: &Arc<Semaphore>,
    make_room: &Notify,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<OwnedSemaphorePermit> {
    loop {
        make_room.notify_waiters();
        tokio::select! {
            slot = slots.clone().acquire_owned() => return slot.ok(),
            _ = tokio::time::sleep(Duration::from_millis(10)) => {}
            _ = stopping(shutdown) => return None,
        }
    }
}

/// Resolves once `shutdown` is true (the watch's guard is not held: it may not cross an await).
async fn stopping(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

/// Where a connection is between requests, and since when.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// Waiting for a request to start (a new connection, or keep-alive after a response).
    Idle,
    /// A request's head has started arriving.
    Head,
    /// A call is being handled.
    Busy,
}

#[derive(Debug, Clone, Copy)]
struct Now {
    phase: Phase,
    since: Instant,
    /// Since when a write has waited for the client to read (its receive window full), if one does.
    stalled: Option<Instant>,
}

#[derive(Debug)]
struct Activity {
    now: Mutex<Now>,
    changed: Notify,
}

impl Activity {
    fn new() -> Self {
        Self {
            now: Mutex::new(Now { phase: Phase::Idle, since: Instant::now(), stalled: None }),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Now> {
        self.now.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self) -> Now {
        *self.lock()
    }

    fn set(&self, phase: Phase) {
        let mut now = self.lock();
        (now.phase, now.since) = (phase, Instant::now());
        self.changed.notify_one();
    }

    fn bytes_arrived(&self) {
        let mut now = self.lock();
        if now.phase == Phase::Idle {
            (now.phase, now.since) = (Phase::Head, Instant::now());
            self.changed.notify_one();
        }
    }

    /// A write found the client not reading (`true`), or went through (`false`).
    fn write_stalled(&self, stalled: bool) {
        let mut now = self.lock();
        match (stalled, now.stalled) {
            (true, None) => {
                now.stalled = Some(Instant::now());
                self.changed.notify_one();
            }
            (false, Some(_)) => now.stalled = None,
            _ => {}
        }
    }
}

/// A response body that marks its connection idle once it has been sent (or dropped unsent).
struct Answer {
    body: axum::body::Body,
    activity: Arc<Activity>,
}

impl Drop for Answer {
    fn drop(&mut self) {
        self.activity.set(Phase::Idle);
    }
}

impl hyper::body::Body for Answer {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

async fn connection(
    stream: TcpStream,
    router: Router,
    limits: &Limits,
    make_room: &Notify,
    mut shutdown: watch::Receiver<bool>,
) {
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched { stream, activity: activity.clone() });
    let calls = activity.clone();
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let (router, calls) = (router.clone(), calls.clone());
        calls.set(Phase::Busy);
        async move {
            let resp = router.oneshot(req.map(axum::body::Body::new)).await;
            // Busy until the answer's last byte is handed over (see `Answer`).
            resp.map(|r| r.map(|body| Answer { body, activity: calls }))
        }
    });
    let conn = hyper::server::conn::http1::Builder::new().header_read_timeout(None).serve_connection(io, service);
    tokio::pin!(conn);
    loop {
        let Now { phase, since, stalled } = activity.get();
        // checked_add: a timeout too long for the clock is no timeout.
        let deadline = match phase {
            Phase::Idle => since.checked_add(limits.idle_timeout),
            Phase::Head => since.checked_add(limits.header_read_timeout),
            // A call may take as long as it takes; a client that stops reading its answer may not.
            Phase::Busy => stalled.and_then(|s| s.checked_add(limits.idle_timeout)),
        };
        if deadline.is_some_and(|d| Instant::now() >= d) {
            let why = match phase {
                Phase::Busy => "the client stopped reading its answer",
                _ => "timed out waiting for a request",
            };
            tracing::debug!(?phase, "closing a connection: {why}");
            return;
        }
        tokio::select! {
            // The connection first: bytes that arrived while this task waited are read (and a request started)
            // before a call to make room can find the connection idle.
            biased;
            ended = conn.as_mut() => {
                if let Err(e) = ended {
                    tracing::debug!(error = %e, "connection ended");
                }
                return;
            }
            _ = tokio::time::sleep_until(deadline.unwrap_or(since).into()), if deadline.is_some() => {}
            _ = activity.changed.notified() => {}
            _ = make_room.notified(), if phase == Phase::Idle => {
                // `phase` is from before this wait: a request may have started since, or an answer still be
                // leaving (its body is done but its last write waits). Only a connection idle now is closed.
                let now = activity.get();
                if now.phase == Phase::Idle && now.stalled.is_none() {
                    tracing::debug!("closing an idle connection to make room for a new one");
                    return;
                }
            }
            _ = stopping(&mut shutdown) => {
                conn.as_mut().graceful_shutdown();
                if let Err(e) = conn.await {
                    tracing::debug!(error = %e, "connection ended during shutdown");
                }
                return;
            }
        }
    }
}

/// A connection's socket, telling its [`Activity`] when bytes arrive.
struct Watched {
    stream: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.stream).poll_read(cx, buf);
        if matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.bytes_arrived();
        }
        read
    }
}

impl AsyncWrite for Watched {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.activity.write_stalled(written.is_pending());
        written
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.activity.write_stalled(written.is_pending());
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

//! Health checks: one checker per load balancer probes every backend (TCP connect, or HTTP GET wanting a 2xx)
//! each interval and publishes the backends that may get traffic.
//!
//! A backend's first check decides its state at once (so a new load balancer carries traffic after one
//! check); after that it takes [`UNHEALTHY_THRESHOLD`] failed checks in a row to turn unhealthy and
//! [`HEALTHY_THRESHOLD`] passed check to turn healthy again. A backend whose instance does not exist
//! or is not running is unhealthy at once. Without a health check, every running backend is healthy.
//!
//! A data-plane `black-hole` fault rule fails the checks of the backends it matches, as a backend that stopped
//! answering would; without a health check that turns the backend unhealthy at once. Checkers look again as
//! soon as the rules change.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use fakecloud_api::{BackendHealth, BackendState, HealthCheck, HealthCheckProtocol};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::budget::Budget;
use super::faults::Faults;
use super::status::Status;
use crate::db::{now_ms, rfc3339};
use crate::faults::{LbEvent, LbSubject, LbVerdict};
use crate::metrics::{BackendLabels, DataPlaneMetrics};
use crate::validate;

/// Failed checks in a row that turn a healthy backend unhealthy.
pub const UNHEALTHY_THRESHOLD: u32 = 2;
/// Passed checks in a row that turn an unhealthy backend healthy: one, as GCE's L4 checks of Kubernetes nodes
/// ("start sending requests as soon as one healthcheck succeeds"). A rolling update moves on to the next node as
/// soon as the last one's pod is ready, and each node's kube-proxy answers on its own time: the next node's first
/// fail may come a round before the last node's first pass. Back after one pass, the last node is in before the
/// next node's second fail takes that one out.
pub const HEALTHY_THRESHOLD: u32 = 1;
/// How often a load balancer without a health check looks again while a black-hole rule may fire.
const BLACK_HOLE_RECHECK: Duration = Duration::from_secs(1);
/// The longest a probe may take, whatever the interval.
const PROBE_TIMEOUT_MAX: Duration = Duration::from_secs(5);
/// The most of an HTTP answer read to find its status line.
const STATUS_LINE_MAX: usize = 1024;

/// What a load balancer's checker checks: its backends, and how.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    /// The load balancer, as fault rules match it.
    pub subject: LbSubject,
    pub backends: Vec<Backend>,
    pub check: Option<HealthCheck>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Backend {
    pub instance: String,
    /// The instance's private IP, or why it cannot get traffic (missing, not running).
    pub addr: Result<IpAddr, String>,
}

/// The healthy backends, in the load balancer's order: instance ID and address.
pub type Healthy = Arc<Vec<(String, IpAddr)>>;

/// One backend's health, as checks move it.
#[derive(Debug, Clone, PartialEq)]
struct Tracker {
    state: BackendState,
    since_ms: i64,
    last_error: Option<String>,
    /// Checks in a row that disagree with `state`.
    streak: u32,
}

impl Tracker {
    fn new(now: i64) -> Self {
        Self { state: BackendState::Unknown, since_ms: now, last_error: None, streak: 0 }
    }

    fn enter(&mut self, state: BackendState, now: i64) {
        if self.state != state {
            self.state = state;
            self.since_ms = now;
        }
        self.streak = 0;
    }

    /// Record a check's result; `decisive` results (no health check, or no instance to check) set the state
    /// at once.
    fn observe(&mut self, result: Result<(), String>, decisive: bool, now: i64) {
        match result {
            Ok(()) => {
                let turns = decisive || self.state == BackendState::Unknown || {
                    self.streak += u32::from(self.state == BackendState::Unhealthy);
                    self.state == BackendState::Healthy || self.streak >= HEALTHY_THRESHOLD
                };
                if turns {
                    self.enter(BackendState::Healthy, now);
                    self.last_error = None;
                }
            }
            Err(e) => {
                self.last_error = Some(e);
                let turns = decisive || self.state == BackendState::Unknown || {
                    self.streak += u32::from(self.state == BackendState::Healthy);
                    self.state == BackendState::Unhealthy || self.streak >= UNHEALTHY_THRESHOLD
                };
                if turns {
                    self.enter(BackendState::Unhealthy, now);
                }
            }
        }
    }
}

/// Check `lb`'s backends as `spec` says, until `spec`'s sender is dropped, publishing the healthy ones on
/// `healthy`, their health on `status` and the metrics.
pub async fn run(
    lb: String,
    mut spec: watch::Receiver<Spec>,
    healthy: watch::Sender<Healthy>,
    status: Status,
    metrics: DataPlaneMetrics,
    faults: Faults,
    budget: Budget,
) {
    let mut rules_changed = faults.changed();
    let mut trackers: HashMap<String, Tracker> = HashMap::new();
    loop {
        let current = spec.borrow_and_update().clone();
        let results = check_all(&current, &faults, &budget).await;
        let now = now_ms();
        trackers.retain(|id, _| {
            let kept = current.backends.iter().any(|b| &b.instance == id);
            if !kept {
                metrics.backend_healthy.remove(&BackendLabels { load_balancer: lb.clone(), backend: id.clone() });
            }
            kept
        });
        let mut up = Vec::new();
        let mut report = Vec::new();
        for (backend, result) in current.backends.iter().zip(results) {
            let decisive = current.check.is_none() || backend.addr.is_err();
            let t = trackers.entry(backend.instance.clone()).or_insert_with(|| Tracker::new(now));
            let before = t.state;
            t.observe(result, decisive, now);
            if t.state != before {
                tracing::info!(%lb, backend = %backend.instance, from = ?before, to = ?t.state, error = ?t.last_error,
                    "load balancer backend health changed");
            }
            let labels = BackendLabels { load_balancer: lb.clone(), backend: backend.instance.clone() };
            metrics.backend_healthy.get_or_create(&labels).set(i64::from(t.state == BackendState::Healthy));
            if let (BackendState::Healthy, Ok(ip)) = (t.state, &backend.addr) {
                up.push((backend.instance.clone(), *ip));
            }
            report.push(BackendHealth {
                instance: backend.instance.clone(),
                state: t.state,
                since: rfc3339(t.since_ms),
                last_error: t.last_error.clone(),
            });
        }
        status.set_backends(&lb, report);
        healthy.send_if_modified(|h| {
            let changed = **h != up;
            if changed {
                *h = Arc::new(up);
            }
            changed
        });
        // The next round: after the interval, or at once when the backends, the check or the fault rules change.
        let wait = match &current.check {
            Some(c) => Some(Duration::from_secs(u64::from(c.interval_seconds.max(1)))),
            None => faults.black_hole_active().await.then_some(BLACK_HOLE_RECHECK),
        };
        let interval = async {
            match wait {
                Some(w) => tokio::time::sleep(w).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = spec.changed() => if r.is_err() { return },
            _ = rules_changed.changed() => {}
            () = interval => {}
        }
    }
}

/// Probe every backend at once; one result per backend, in order. A black-holed backend fails without a probe.
async fn check_all(spec: &Spec, faults: &Faults, budget: &Budget) -> Vec<Result<(), String>> {
    let probes = spec.backends.iter().map(|b| async move {
        let ip = b.addr.clone()?;
        let event = LbEvent::HealthCheck { backend: &b.instance };
        if faults.judge(&spec.subject, event).await == Some(LbVerdict::BlackHole) {
            return Err(format!("{ip}: no answer (black-holed by a data-plane fault rule)"));
        }
        match &spec.check {
            None => Ok(()),
            Some(check) => probe(ip, check, budget).await,
        }
    });
    futures::future::join_all(probes).await
}

/// One check of one backend, within the interval (at most [`PROBE_TIMEOUT_MAX`]), on a file of the data
/// plane's budget.
async fn probe(ip: IpAddr, check: &HealthCheck, budget: &Budget) -> Result<(), String> {
    let addr = SocketAddr::new(ip, check.port);
    let path = check.path.as_deref().unwrap_or("/");
    // The API refuses such a path; one stored by an older emulator is not sent either.
    if check.protocol == HealthCheckProtocol::Http && !validate::HEALTH_CHECK_PATH.matches(path) {
        return Err(format!("the health check's path {} is not a request target; not sent", validate::quoted(path)));
    }
    let limit = Duration::from_secs(u64::from(check.interval_seconds.max(1))).min(PROBE_TIMEOUT_MAX);
    let attempt = async {
        let _file = budget.for_probe().await;
        let mut stream = TcpStream::connect(addr).await.map_err(|e| format!("connect {addr}: {e}"))?;
        match check.protocol {
            HealthCheckProtocol::Http => http_get(&mut stream, addr, path).await,
            HealthCheckProtocol::Tcp => Ok(()),
        }
    };
    tokio::time::timeout(limit, attempt).await.unwrap_or_else(|_| Err(format!("{addr}: no answer within {limit:?}")))
}

/// `GET path` over `stream`; a 2xx status passes.
async fn http_get(stream: &mut TcpStream, addr: SocketAddr, path: &str) -> Result<(), String> {
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: fakecloud-health-check\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.map_err(|e| format!("GET {path} on {addr}: {e}"))?;
    let mut buf = Vec::with_capacity(128);
    let mut chunk = [0u8; 256];
    while !buf.contains(&b'\n') && buf.len() < STATUS_LINE_MAX {
        let n = stream.read(&mut chunk).await.map_err(|e| format!("GET {path} on {addr}: {e}"))?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    match status_code(&buf) {
        Some(code) if (200..300).contains(&code) => Ok(()),
        Some(code) => Err(format!("GET {path} on {addr}: HTTP {code}")),
        None => Err(format!("GET {path} on {addr}: not an HTTP answer")),
    }
}

/// The status code of an HTTP/1.x status line at the start of `answer`.
fn status_code(answer: &[u8]) -> Option<u16> {
    let line = answer.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?.trim_end();
    let mut parts = line.splitn(3, ' ');
    let version = parts.next()?;
    let code = parts.next()?;
    (version.starts_with("HTTP/1.") && code.len() == 3).then(|| code.parse().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(t: &mut Tracker, results: &[bool]) -> Vec<BackendState> {
        results
            .iter()
            .enumerate()
            .map(|(i, ok)| {
                t.observe(if *ok { Ok(()) } else { Err("refused".into()) }, false, i as i64);
                t.state
            })
            .collect()
    }

    #[test]
    fn the_first_check_decides_then_thresholds_apply() {
        use BackendState::*;
        let mut t = Tracker::new(0);
        assert_eq!(
            run(&mut t, &[true, false, true, false, false, false]),
            [Healthy, Healthy, Healthy, Healthy, Unhealthy, Unhealthy]
        );
        assert_eq!(t.last_error.as_deref(), Some("refused"));
        assert_eq!(run(&mut t, &[true, false]), [Healthy, Healthy]);
        assert_eq!(t.last_error.as_deref(), Some("refused"));
        let mut t = Tracker::new(0);
        assert_eq!(run(&mut t, &[false, true]), [Unhealthy, Healthy]);
    }

    /// Kubernetes' rolling-update spec with `externalTrafficPolicy: Local`: node b's old pod starts terminating
    /// as node a's new one turns ready, and a's kube-proxy reports it a round after b's reports b's. Some node
    /// must carry traffic through every round.
    #[test]
    fn a_node_coming_back_is_in_before_the_next_node_leaves() {
        let (mut a, mut b) = (Tracker::new(0), Tracker::new(0));
        run(&mut a, &[true, false, false]);
        run(&mut b, &[true, true, true]);
        for (round, (pass_a, pass_b)) in
            [(false, false), (true, false), (true, false), (true, true)].into_iter().enumerate()
        {
            run(&mut a, &[pass_a]);
            run(&mut b, &[pass_b]);
            assert!(
                a.state == BackendState::Healthy || b.state == BackendState::Healthy,
                "round {round}: both out ({:?}, {:?})",
                a.state,
                b.state
            );
        }
    }

    #[test]
    fn since_moves_only_when_the_state_does() {
        let mut t = Tracker::new(0);
        t.observe(Ok(()), false, 5);
        t.observe(Ok(()), false, 9);
        assert_eq!((t.state, t.since_ms), (BackendState::Healthy, 5));
        t.observe(Err("gone".into()), true, 12);
        assert_eq!((t.state, t.since_ms), (BackendState::Unhealthy, 12));
    }

    #[test]
    fn status_lines_are_read_strictly() {
        assert_eq!(status_code(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n"), Some(200));
        assert_eq!(status_code(b"HTTP/1.0 503 Service Unavailable\r\n"), Some(503));
        assert_eq!(status_code(b"HTTP/1.1 204\r\n"), Some(204));
        assert_eq!(status_code(b"SSH-2.0-OpenSSH\r\n"), None);
        assert_eq!(status_code(b"HTTP/1.1 2000 OK\r\n"), None);
        assert_eq!(status_code(b""), None);
    }
}

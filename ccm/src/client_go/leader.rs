//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's algorithm (`leaderelection.go`), so
//! `--leader-elect-lease-duration`, `-renew-deadline` and `-retry-period` mean what they mean upstream:
//!
//! - a candidate tries every retry period (jittered ×1.2) to take the Lease; it may once the holder's record
//!   has not changed for a lease duration *as observed on this process's clock* (never comparing clocks);
//! - the leader renews every retry period; if no renewal succeeds within the renew deadline it stops leading,
//!   and the binary exits (upstream: "leaderelection lost", exit 1);
//! - every write is a PUT carrying the resourceVersion read, so two candidates cannot both win.
//!
//! `kube-lease-manager` was the candidate crate, but it has no renew deadline (a leader cut off from the API
//! keeps believing it leads after its lease expired) and it judges expiry by the holder's `renewTime`, i.e. by
//! comparing clocks.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};

use crate::client_go::events::{EventType, Recorder};

/// client-go's `JitterFactor` for the acquire loop.
pub const JITTER_FACTOR: f64 = 1.2;
/// client-go's `HealthzAdaptor` tolerance: the check fails once the leader's lease has been expired this long.
const MAX_TOLERABLE_EXPIRED_LEASE: Duration = Duration::from_secs(20);

#[derive(Debug, Clone)]
pub struct LeaderConfig {
    pub namespace: String,
    pub name: String,
    /// `<hostname>_<uuid>`, as upstream, so two processes on one host never share an identity.
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

/// Whether this process leads, for `/healthz` and `leader_election_master_status`.
#[derive(Debug, Default)]
pub struct Status {
    leading: AtomicBool,
    /// When this process last saw its own record written.
    renewed: Mutex<Option<Instant>>,
}

impl Status {
    pub fn is_leader(&self) -> bool {
        self.leading.load(Ordering::Relaxed)
    }

    /// The `leaderElection` health check: failing when this process leads but has not renewed for a lease
    /// duration plus 20 s (a stuck renew loop); a follower is healthy.
    pub fn check(&self, lease_duration: Duration) -> Result<(), String> {
        let renewed = *self.renewed.lock().unwrap_or_else(|p| p.into_inner());
        match renewed {
            Some(at) if self.is_leader() && at.elapsed() > lease_duration + MAX_TOLERABLE_EXPIRED_LEASE => {
                Err("failed election to renew leadership on lease".into())
            }
            _ => Ok(()),
        }
    }
}

/// The record last seen, and when this process first saw it (client-go's `observedRecord`/`observedTime`).
struct Observed {
    lease: Lease,
    at: Instant,
}

pub struct Elector {
    api: Api<Lease>,
    cfg: LeaderConfig,
    observed: Option<Observed>,
    status: Arc<Status>,
    recorder: Recorder,
}

fn spec(lease: &Lease) -> LeaseSpec {
    lease.spec.clone().unwrap_or_default()
}

fn holder(lease: &Lease) -> String {
    spec(lease).holder_identity.unwrap_or_default()
}

impl Elector {
    /// `recorder` records the `LeaderElection` events on the Lease (component `cloud-controller-manager`).
    pub fn new(client: kube::Client, cfg: LeaderConfig, recorder: Recorder) -> Self {
        let api = Api::namespaced(client, &cfg.namespace);
        Self { api, cfg, observed: None, status: Arc::default(), recorder }
    }

    pub fn status(&self) -> Arc<Status> {
        self.status.clone()
    }

    fn is_leader(&self) -> bool {
        self.observed.as_ref().is_some_and(|o| holder(&o.lease) == self.cfg.identity)
    }

    /// When the observed record stops being valid (`observedTime + leaseDuration`).
    fn valid_until(&self) -> Option<Instant> {
        self.observed.as_ref().map(|o| o.at + self.cfg.lease_duration)
    }

    fn lease_valid(&self) -> bool {
        self.valid_until().is_some_and(|t| t > Instant::now())
    }

    fn observe(&mut self, lease: Lease) {
        let changed = self.observed.as_ref().is_none_or(|o| o.lease.spec != lease.spec);
        let at = match &self.observed {
            Some(o) if !changed => o.at,
            _ => Instant::now(),
        };
        if changed && self.observed.as_ref().is_none_or(|o| holder(&o.lease) != holder(&lease)) {
            tracing::info!(lease = %self.cfg.name, holder = %holder(&lease), "new leader elected");
        }
        self.observed = Some(Observed { lease, at });
        let leading = self.is_leader();
        self.status.leading.store(leading, Ordering::Relaxed);
        if leading && changed {
            *self.status.renewed.lock().unwrap_or_else(|p| p.into_inner()) = Some(at);
        }
    }

    fn record(&self, now: Timestamp, acquire: Option<MicroTime>, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.cfg.identity.clone()),
            lease_duration_seconds: Some(i32::try_from(self.cfg.lease_duration.as_secs()).unwrap_or(i32::MAX)),
            acquire_time: acquire.or(Some(MicroTime(now))),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    /// client-go's `tryAcquireOrRenew`.
    async fn try_acquire_or_renew(&mut self) -> bool {
        let now = Timestamp::now();
        // 1. The leader's fast path: update the record it wrote last, assuming nobody else did.
        if self.is_leader()
            && self.lease_valid()
            && let Some(o) = &self.observed
        {
            let old = spec(&o.lease);
            let mut lease = o.lease.clone();
            lease.spec = Some(self.record(now, old.acquire_time, old.lease_transitions.unwrap_or(0)));
            match self.api.replace(&self.cfg.name, &PostParams::default(), &lease).await {
                Ok(l) => {
                    self.observe(l);
                    return true;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "failed to update lease optimistically; falling back to slow path")
                }
            }
        }
        // 2. Read the record, or create it.
        let current = match self.api.get_opt(&self.cfg.name).await {
            Ok(Some(l)) => l,
            Ok(None) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.cfg.name.clone()),
                        namespace: Some(self.cfg.namespace.clone()),
                        ..Default::default()
                    },
                    spec: Some(self.record(now, None, 0)),
                };
                return match self.api.create(&PostParams::default(), &lease).await {
                    Ok(l) => {
                        self.observe(l);
                        true
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "error initially creating leader election record");
                        false
                    }
                };
            }
            Err(e) => {
                tracing::warn!(error = %e, lease = %self.cfg.name, "error retrieving the lease");
                return false;
            }
        };
        // 3. Somebody else's valid record: wait.
        self.observe(current.clone());
        if !holder(&current).is_empty() && self.lease_valid() && !self.is_leader() {
            return false;
        }
        // 4. Take it (or renew on the slow path).
        let old = spec(&current);
        let transitions = old.lease_transitions.unwrap_or(0);
        let new = if self.is_leader() {
            self.record(now, old.acquire_time, transitions)
        } else {
            self.record(now, None, transitions + 1)
        };
        let mut lease = current;
        lease.spec = Some(new);
        match self.api.replace(&self.cfg.name, &PostParams::default(), &lease).await {
            Ok(l) => {
                self.observe(l);
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "failed to update lease");
                false
            }
        }
    }

    /// Return once this process holds the Lease.
    pub async fn acquire(&mut self) {
        tracing::info!(lease = %format!("{}/{}", self.cfg.namespace, self.cfg.name), identity = %self.cfg.identity, "attempting to acquire leader lease");
        loop {
            if self.try_acquire_or_renew().await {
                tracing::info!(lease = %self.cfg.name, "successfully acquired lease");
                self.event("became leader");
                return;
            }
            // A jittered retry period, as upstream; but no later than the moment the observed record expires,
            // so a dead leader is replaced one lease duration after its last renewal was seen.
            let jittered = self.cfg.retry_period.mul_f64(1.0 + rand::random::<f64>() * JITTER_FACTOR);
            let wake = match self.valid_until() {
                Some(t) if t > Instant::now() => jittered.min(t - Instant::now()),
                _ => jittered,
            };
            tokio::time::sleep(wake).await;
        }
    }

    /// Keep renewing every retry period; return when no renewal succeeded within the renew deadline.
    pub async fn hold(mut self) {
        loop {
            let deadline = tokio::time::Instant::now() + self.cfg.renew_deadline;
            loop {
                let renewed = tokio::time::timeout_at(deadline, self.try_acquire_or_renew()).await.unwrap_or(false);
                if renewed {
                    break;
                }
                if tokio::time::Instant::now() + self.cfg.retry_period >= deadline {
                    tracing::error!(lease = %self.cfg.name, "failed to renew lease: timed out");
                    self.status.leading.store(false, Ordering::Relaxed);
                    self.event("stopped leading");
                    return;
                }
                tokio::time::sleep(self.cfg.retry_period).await;
            }
            tokio::time::sleep(self.cfg.retry_period).await;
        }
    }

    /// client-go's `LeaseLock.RecordEvent`: `Normal LeaderElection "<identity> <what>"` on the Lease.
    fn event(&self, what: &str) {
        let reference = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some("coordination.k8s.io/v1".into()),
            kind: Some("Lease".into()),
            namespace: Some(self.cfg.namespace.clone()),
            name: Some(self.cfg.name.clone()),
            uid: self.observed.as_ref().and_then(|o| o.lease.metadata.uid.clone()),
            ..Default::default()
        };
        self.recorder.publish(reference, EventType::Normal, "LeaderElection", format!("{} {what}", self.cfg.identity));
    }
}

/// Upstream's identity: `<hostname>_<uuid>`.
pub fn identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into());
    format!("{host}_{}", uuid::Uuid::new_v4())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_health_check_fails_only_for_a_stuck_leader() {
        let s = Status::default();
        let lease = Duration::from_secs(15);
        assert!(s.check(lease).is_ok(), "not leading");
        s.leading.store(true, Ordering::Relaxed);
        *s.renewed.lock().unwrap() = Some(Instant::now());
        assert!(s.check(lease).is_ok(), "renewed just now");
        *s.renewed.lock().unwrap() = Instant::now().checked_sub(Duration::from_secs(36));
        assert!(s.check(lease).is_err(), "leader that has not renewed for 15 s + 20 s");
        s.leading.store(false, Ordering::Relaxed);
        assert!(s.check(lease).is_ok(), "a follower is healthy");
    }

    #[test]
    fn identities_are_unique_per_process_start() {
        let (a, b) = (identity(), identity());
        assert_ne!(a, b);
        assert!(a.contains('_'));
    }
}

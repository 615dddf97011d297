//! Prometheus metrics: calls and latency by operation and status, and resources by kind and state (counted at
//! scrape time, so they are never stale).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::db::{Db, now_ms};
use crate::error::Result;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub operation: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    pub operation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    pub kind: &'static str,
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FaultLabels {
    pub fault: String,
}

/// A load balancer listener's connections, by what became of them.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConnectionLabels {
    pub load_balancer: String,
    /// `TCP` or `UDP` (for UDP, a connection is a session: the datagrams of one client address).
    pub protocol: &'static str,
    pub port: u16,
    /// `accepted` (forwarded to a backend), `refused_source` (outside the source ranges), `refused_no_backend`
    /// (no healthy backend), `backend_failed` (no healthy backend could be connected to), `backend_refused` (UDP: a
    /// session ended because its backend refused a datagram; the client's next one opens another),
    /// `reset_by_fault` (reset by a data-plane fault rule before it was forwarded), or refused at a limit
    /// (`dataplane::budget`):
    /// `refused_listener_full`, `refused_lb_full`, `refused_sessions_full` (UDP), `refused_files_full`.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BackendLabels {
    pub load_balancer: String,
    pub backend: String,
}

/// A data-plane fault rule that fired: on which load balancer, which rule, what it did.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LbFaultLabels {
    pub load_balancer: String,
    pub fault: String,
    /// `reset`, `latency` or `black-hole`.
    pub action: &'static str,
}

/// What the load balancer data plane reports; cheap to clone (the families are shared).
#[derive(Clone, Debug, Default)]
pub struct DataPlaneMetrics {
    pub connections: Family<ConnectionLabels, Counter>,
    /// 1 healthy, 0 unhealthy or unknown.
    pub backend_healthy: Family<BackendLabels, Gauge>,
    /// Connections and health checks a data-plane fault rule changed.
    pub faults: Family<LbFaultLabels, Counter>,
    /// Proxied connections closed for passing no byte for the idle timeout (`outcome` is `idle`).
    pub idle_closed: Family<ConnectionLabels, Counter>,
}

pub struct Metrics {
    registry: Registry,
    pub dataplane: DataPlaneMetrics,
    faults: Family<FaultLabels, Counter>,
    requests: Family<CallLabels, Counter>,
    latency: Family<OperationLabels, Histogram>,
    resources: Family<ResourceLabels, Gauge>,
    /// Audit streams refused: the token had as many open as it may.
    pub audit_streams_refused: Counter,
    /// Mirrors of the writer's own counts (see db::group_commit), brought up to date at each scrape.
    write_batches: Counter,
    write_calls: Counter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("fakecloud");
        let requests = Family::<CallLabels, Counter>::default();
        let latency = Family::<OperationLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0001, 2.0, 16))
        });
        let resources = Family::<ResourceLabels, Gauge>::default();
        registry.register("requests", "API calls by operation and HTTP status", requests.clone());
        registry.register("request_duration_seconds", "API call latency by operation", latency.clone());
        registry.register("resources", "Resources by kind and state", resources.clone());
        let faults = Family::<FaultLabels, Counter>::default();
        registry.register(
            "faults_injected",
            "Calls shaped by a fault rule, rate limit or outage, by its name",
            faults.clone(),
        );
        let dataplane = DataPlaneMetrics::default();
        registry.register(
            "lb_connections",
            "Connections to load balancer listeners, by load balancer, port and outcome",
            dataplane.connections.clone(),
        );
        registry.register(
            "lb_backend_healthy",
            "Whether a load balancer backend gets traffic (1) or not (0), by load balancer and instance",
            dataplane.backend_healthy.clone(),
        );
        registry.register(
            "lb_faults_fired",
            "Connections reset or delayed and health checks failed by a data-plane fault rule, by load balancer, rule and action",
            dataplane.faults.clone(),
        );
        registry.register(
            "lb_connections_idle_closed",
            "Proxied load balancer connections closed after passing no byte for --lb-idle-timeout",
            dataplane.idle_closed.clone(),
        );
        let audit_streams_refused = Counter::default();
        registry.register(
            "audit_streams_refused",
            "Audit streams refused because the token had as many open as it may",
            audit_streams_refused.clone(),
        );
        let (write_batches, write_calls) = (Counter::default(), Counter::default());
        registry.register(
            "write_batches",
            "Transactions committed by the writer (group commit)",
            write_batches.clone(),
        );
        registry.register("write_calls", "Writes committed, several to a transaction under load", write_calls.clone());
        Self {
            registry,
            dataplane,
            faults,
            requests,
            latency,
            resources,
            audit_streams_refused,
            write_batches,
            write_calls,
        }
    }
}

impl Metrics {
    pub fn observe(&self, operation: &str, status: u16, seconds: f64) {
        self.requests.get_or_create(&CallLabels { operation: operation.to_string(), status }).inc();
        self.latency.get_or_create(&OperationLabels { operation: operation.to_string() }).observe(seconds);
    }

    pub fn fault_injected(&self, fault: &str) {
        self.faults.get_or_create(&FaultLabels { fault: fault.to_string() }).inc();
    }

    /// Count resources now, then render the text exposition format.
    pub async fn render(&self, db: &Db) -> Result<String> {
        let now = now_ms();
        let counts = crate::store::counts(db, now).await?;
        self.resources.clear();
        for (kind, state, n) in counts {
            let kind = match kind.as_str() {
                "instance" => "instance",
                "load_balancer" => "load_balancer",
                "route" => "route",
                _ => "route_table",
            };
            if state != "deleted" {
                self.resources.get_or_create(&ResourceLabels { kind, state }).set(n);
            }
        }
        let written = db.write_stats();
        self.write_batches.inc_by(written.batches.saturating_sub(self.write_batches.get()));
        self.write_calls.inc_by(written.calls.saturating_sub(self.write_calls.get()));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .map_err(|e| crate::error::ApiError::internal(e.to_string()))?;
        Ok(out)
    }
}

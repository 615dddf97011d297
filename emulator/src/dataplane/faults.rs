//! Where the data plane meets the fault engine: it asks about each new connection and each health check, and
//! marks what fired — the rule's counters (in the engine), the `lb_faults_fired` metric on every firing, and
//! one audit entry the first time a rule fires on a load balancer (an entry per connection would flood the
//! bounded log and push the API calls out of it).

use std::sync::Arc;

use tokio::sync::watch;

use crate::db::audit::rows::Record;
use crate::db::audit::writer::AuditSink;
use crate::db::now_ms;
use crate::faults::{FaultEngine, LbEvent, LbSubject, LbVerdict};
use crate::metrics::{DataPlaneMetrics, LbFaultLabels};

/// Cheap to clone: every listener and health checker holds one.
#[derive(Clone)]
pub struct Faults {
    engine: Arc<FaultEngine>,
    metrics: DataPlaneMetrics,
    audit: AuditSink,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Faults")
    }
}

impl Faults {
    pub fn new(engine: Arc<FaultEngine>, metrics: DataPlaneMetrics, audit: AuditSink) -> Self {
        Self { engine, metrics, audit }
    }

    /// What a fault rule does to `event` on `lb`, if one fires; what fired is counted and, the first time on
    /// this load balancer, audited.
    pub async fn judge(&self, lb: &LbSubject, event: LbEvent<'_>) -> Option<LbVerdict> {
        let fired = self.engine.judge_lb(lb, event).await?;
        let labels = LbFaultLabels { load_balancer: lb.id.clone(), fault: fired.rule.clone(), action: fired.action };
        self.metrics.faults.get_or_create(&labels).inc();
        let what = match event {
            LbEvent::Connection { port, backend } => format!("{}:{port} connection to {backend}", lb.id),
            LbEvent::HealthCheck { backend } => format!("{} health check of {backend}", lb.id),
        };
        tracing::debug!(rule = %fired.rule, action = fired.action, %what, "data-plane fault fired");
        if fired.first_on_lb {
            tracing::warn!(rule = %fired.rule, action = fired.action, %what, "data-plane fault rule fired on a load balancer");
            self.audit.record(Record {
                time_ms: now_ms(),
                request_id: uuid::Uuid::new_v4().simple().to_string(),
                role: "system",
                operation: "LoadBalancerFault".into(),
                method: fired.action.into(),
                path: what,
                resource_id: Some(lb.id.clone()),
                status: 0,
                error_code: None,
                latency_us: 0,
                fault: Some(fired.rule),
            });
        }
        Some(fired.verdict)
    }

    /// Whether a black-hole rule may fire now (a load balancer without a health check must still look).
    pub async fn black_hole_active(&self) -> bool {
        self.engine.black_hole_active().await
    }

    /// Changes whenever the data-plane rules do.
    pub fn changed(&self) -> watch::Receiver<u64> {
        self.engine.lb_rules_changed()
    }
}

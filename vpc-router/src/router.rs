//! The route loop. Every period it reads the cloud's route table, works out which routes this host
//! needs, and brings the host's main table there. While the cloud cannot be read (unreachable,
//! throttled, an outage), the installed routes stay as they are, which is what a VPC's data plane does
//! when its control plane is down. The next read is after the cloud's `Retry-After` when it sent one,
//! else after a backoff.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use fakecloud_api::{Instance, InstanceState, ListInstancesQuery, RouteState};
use tokio::sync::watch;

use crate::Error;
use crate::netlink::{Applied, Netlink};
use crate::node::NodeInfo;
use crate::routes;

/// Failed reads back off up to this, so a long outage costs one call per node every half minute.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

pub struct Settings {
    /// The cloud route table to follow (`main` names the main table).
    pub route_table: String,
    pub period: Duration,
}

/// Everything the loop needs, in one place.
pub struct Router {
    cloud: fakecloud_api::Client,
    netlink: Netlink,
    node: watch::Receiver<Option<NodeInfo>>,
    settings: Settings,
    /// Instances by ID. A route's target is looked up here. The table is refreshed only when a route
    /// names an instance it lacks, or this node's own instance is not in it, so a steady state costs
    /// one cloud call per period (the route listing). An ID's private IP never changes.
    instances: HashMap<String, Instance>,
    /// Targets that were still missing after the last refresh. They do not trigger another refresh
    /// every period.
    missing: HashSet<String>,
    /// The warnings of the last period (skipped routes, conflicts). A warning is logged when it first
    /// appears, not every two seconds.
    notices: BTreeSet<String>,
}

impl Router {
    pub fn new(
        cloud: fakecloud_api::Client,
        netlink: Netlink,
        node: watch::Receiver<Option<NodeInfo>>,
        settings: Settings,
    ) -> Self {
        Self {
            cloud,
            netlink,
            node,
            settings,
            instances: HashMap::new(),
            missing: HashSet::new(),
            notices: BTreeSet::new(),
        }
    }

    /// Run until the node watch ends. Waits for the Node first: without its addresses or providerID
    /// there is no telling which instance is this one.
    pub async fn run(mut self) {
        if self.node.wait_for(Option::is_some).await.is_err() {
            return;
        }
        let mut failures: u32 = 0;
        loop {
            let wait = match self.sync_once().await {
                Ok(applied) => {
                    if failures > 0 {
                        tracing::info!("routes in sync again");
                    }
                    failures = 0;
                    tracing::debug!(changed = applied.changed, "routes in sync");
                    self.settings.period
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    let wait = retry_delay(&e, self.settings.period, failures);
                    tracing::warn!(error = %e, retry_in = ?wait, "route sync failed; the installed routes are kept");
                    wait
                }
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// One period: read the cloud, plan, apply.
    pub async fn sync_once(&mut self) -> Result<Applied, Error> {
        let node = self.node.borrow().clone().unwrap_or_default();
        let routes = self.cloud.list_routes(&self.settings.route_table).await?.items;
        let me = match self_instance(&node, &self.instances) {
            Some(me) if !self.needs_refresh(&routes) => me,
            _ => {
                self.refresh_instances(&routes).await?;
                self_instance(&node, &self.instances).ok_or_else(|| Error::UnknownSelf {
                    node: node.name.clone(),
                    provider_id: node.provider_id.clone(),
                    internal_ips: node.internal_ips.clone(),
                })?
            }
        };
        let desired = routes::desired(&routes, &self.instances, &me, &node.pod_cidrs);
        let current = self.netlink.main_table_routes().await?;
        let plan = routes::plan(&desired.routes, &current);
        let mut notices: BTreeSet<String> = desired.skipped.iter().map(ToString::to_string).collect();
        notices.extend(plan.conflicts.iter().map(|(want, theirs)| {
            format!(
                "cloud route {} ({} via {}, node {}) not installed: the host has a route to {} that is not ours (proto {})",
                want.route_id, want.destination, want.gateway, want.node, theirs.destination, theirs.protocol
            )
        }));
        for n in notices.difference(&self.notices) {
            tracing::warn!("{n}");
        }
        self.notices = notices;
        let applied = self.netlink.apply(&plan).await;
        match applied.failed {
            0 => Ok(applied),
            failed => Err(Error::Apply { failed, total: failed + applied.changed }),
        }
    }

    /// Whether an active route names an instance that is neither known nor known to be missing.
    fn needs_refresh(&self, routes: &[fakecloud_api::Route]) -> bool {
        routes
            .iter()
            .filter(|r| r.state == RouteState::Active)
            .any(|r| !self.instances.contains_key(&r.target_instance) && !self.missing.contains(&r.target_instance))
    }

    async fn refresh_instances(&mut self, routes: &[fakecloud_api::Route]) -> Result<(), Error> {
        let all = self.cloud.list_all_instances(&ListInstancesQuery::default()).await?;
        self.instances = all.into_iter().map(|i| (i.id.clone(), i)).collect();
        self.missing =
            routes.iter().map(|r| r.target_instance.clone()).filter(|t| !self.instances.contains_key(t)).collect();
        Ok(())
    }
}

/// Which instance is this node: the one its providerID names (`fakecloud://<zone>/<id>`, set by the
/// CCM), else the live instance whose private IP is one of the node's InternalIPs. The IP match is
/// how a kind node is known before the CCM has initialized it. If several instances match, the one
/// named like the node wins, as `fakecloud adopt` names them.
pub fn self_instance(node: &NodeInfo, instances: &HashMap<String, Instance>) -> Option<String> {
    if let Some(id) = node.provider_id.as_deref().and_then(fakecloud_api::parse_provider_id) {
        return Some(id.to_string());
    }
    let mut candidates: Vec<&Instance> = instances
        .values()
        .filter(|i| !matches!(i.state, InstanceState::Terminated | InstanceState::ShuttingDown))
        .filter(|i| i.addresses().any(|a| node.internal_ips.contains(&a)))
        .collect();
    candidates.sort_by(|a, b| (a.name != node.name, &a.id).cmp(&(b.name != node.name, &b.id)));
    candidates.first().map(|i| i.id.clone())
}

/// How long to wait after the `failures`-th failure in a row: the cloud's `Retry-After` if it sent
/// one, else the period doubled per failure, up to [`MAX_BACKOFF`].
pub fn retry_delay(e: &Error, period: Duration, failures: u32) -> Duration {
    e.retry_after().unwrap_or_else(|| {
        let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(16));
        period.saturating_mul(factor).min(MAX_BACKOFF.max(period))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fakecloud_api::{ApiError, ClientError, Market};

    fn instance(id: &str, name: &str, ip: &str, state: InstanceState) -> Instance {
        Instance {
            id: id.into(),
            name: name.into(),
            zone: "local-1a".into(),
            region: "local-1".into(),
            instance_type: "t1.small".into(),
            market: Market::OnDemand,
            state,
            private_ip: ip.parse().unwrap(),
            ipv6_address: None,
            provider_id: format!("fakecloud://local-1a/{id}"),
            tags: Default::default(),
            created_at: String::new(),
            state_changed_at: String::new(),
            state_reason: None,
            interruption_at: None,
        }
    }

    fn node(name: &str, ips: &[&str], provider_id: Option<&str>) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            pod_cidrs: vec![],
            internal_ips: ips.iter().map(|i| i.parse().unwrap()).collect(),
            provider_id: provider_id.map(Into::into),
        }
    }

    #[test]
    fn this_node_is_found_by_provider_id_then_by_internal_ip() {
        let instances: HashMap<_, _> = [
            instance("i-old", "kind-worker", "172.18.0.3", InstanceState::Terminated),
            instance("i-b", "other", "172.18.0.3", InstanceState::Running),
            instance("i-a", "kind-worker", "172.18.0.3", InstanceState::Running),
            instance("i-c", "kind-worker2", "172.18.0.4", InstanceState::Running),
        ]
        .into_iter()
        .map(|i| (i.id.clone(), i))
        .collect();
        let pid = Some("fakecloud://local-1a/i-zzz");
        assert_eq!(self_instance(&node("kind-worker", &["172.18.0.3"], pid), &instances).as_deref(), Some("i-zzz"));
        // No providerID yet: the live instance with the node's IP, the one named like the node first.
        assert_eq!(self_instance(&node("kind-worker", &["172.18.0.3"], None), &instances).as_deref(), Some("i-a"));
        assert_eq!(self_instance(&node("x", &["fc00::9", "172.18.0.4"], None), &instances).as_deref(), Some("i-c"));
        assert_eq!(self_instance(&node("x", &["172.18.0.9"], None), &instances), None);
        // kind's own providerID (another cloud's) is ignored, the IP decides.
        let kind = Some("kind://docker/fakecloud/kind-worker2");
        assert_eq!(self_instance(&node("kind-worker2", &["172.18.0.4"], kind), &instances).as_deref(), Some("i-c"));
    }

    #[test]
    fn retry_after_is_honoured_else_the_period_backs_off() {
        let throttled = Error::Cloud(ClientError::Api(ApiError {
            status: 429,
            code: "RequestLimitExceeded".into(),
            message: String::new(),
            request_id: String::new(),
            retry_after: Some(Duration::from_secs(7)),
        }));
        let period = Duration::from_secs(2);
        assert_eq!(retry_delay(&throttled, period, 1), Duration::from_secs(7));
        let other = Error::Apply { failed: 1, total: 1 };
        let delays: Vec<_> = (1..=6).map(|n| retry_delay(&other, period, n).as_secs()).collect();
        assert_eq!(delays, [2, 4, 8, 16, 30, 30]);
        assert_eq!(retry_delay(&other, period, u32::MAX), MAX_BACKOFF);
        // A period longer than the cap is not shortened.
        assert_eq!(retry_delay(&other, Duration::from_secs(60), 3), Duration::from_secs(60));
    }
}

//! [`Cloud`] on the fakecloud emulator, through the one typed client.

use fakecloud_api::{
    Client, ClientError, CreateLoadBalancerRequest, Instance, InstanceState, IpMode, ListInstancesQuery, LoadBalancer,
    LoadBalancerState, UpdateLoadBalancerRequest, codes,
};
use k8s_openapi::api::core::v1::{LoadBalancerIngress, Node, NodeAddress, Service};

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::load_balancer::{self, Desired};
use super::{Cloud, CloudError, CloudRoute, InstanceMetadata, LoadBalancerStatus};
use crate::client_go::metrics::Metrics;

/// Routes live in the emulator's main route table.
const ROUTE_TABLE: &str = "main";
/// How soon to look again at a load balancer being deleted, or still provisioning after [`PROVISIONING_WAIT`]
/// (the service stays `<pending>` until then).
pub const PROVISIONING_RECHECK: Duration = Duration::from_secs(2);
/// How long an ensure waits for its load balancer to leave `provisioning`, looking every [`PROVISIONING_POLL`]:
/// the EXTERNAL-IP is set by the ensure that created it, not by a later one (cloud-provider-openstack#2066, where
/// the create's answer was taken for the result and every load balancer needed two syncs and a warning). A
/// cloud slower than this hands the Service back to the queue, as a retry after [`PROVISIONING_RECHECK`].
pub const PROVISIONING_WAIT: Duration = Duration::from_secs(30);
pub const PROVISIONING_POLL: Duration = Duration::from_secs(1);
/// How soon to look again when a create raced with another (or the cloud does not list it yet).
const CREATE_RECHECK: Duration = Duration::from_secs(1);

/// A route's name: the cluster's name and the node's UID, so a cluster finds its own routes.
fn route_name(cluster: &str, name_hint: &str) -> String {
    format!("{cluster}-{name_hint}")
}

pub const PROVIDER_NAME: &str = "fakecloud";

#[derive(Clone)]
pub struct FakeCloud {
    client: Client,
    metrics: Option<Arc<Metrics>>,
}

impl FakeCloud {
    pub fn new(client: Client) -> Self {
        Self { client, metrics: None }
    }

    /// Count every API call in `cloudprovider_fakecloud_api_request_{duration_seconds,errors}{request}`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// One API call (`request` is the emulator's operation name), measured and classified.
    async fn call<T>(
        &self,
        request: &'static str,
        call: impl Future<Output = Result<T, ClientError>>,
    ) -> Result<T, CloudError> {
        self.metered(request, call).await.map_err(classify)
    }

    /// One API call, measured, its error left as the client's (for callers that treat some codes as success).
    async fn metered<T>(
        &self,
        request: &'static str,
        call: impl Future<Output = Result<T, ClientError>>,
    ) -> Result<T, ClientError> {
        let start = Instant::now();
        let result = call.await;
        if let Some(m) = &self.metrics {
            m.api_request(request, start.elapsed(), result.is_err());
        }
        result
    }

    /// The Service's load balancer, found by its name (one call).
    async fn find_load_balancer(&self, svc: &Service) -> Result<Option<LoadBalancer>, CloudError> {
        self.call("ListLoadBalancers", self.client.find_load_balancer(&load_balancer::name(svc))).await
    }

    /// Create the Service's load balancer. The `Idempotency-Key` is its name and the Service's generation, so
    /// a retry after a lost response gets the same load balancer back, never a second one.
    async fn create_load_balancer(
        &self,
        svc: &Service,
        want: Desired,
        backends: Vec<String>,
    ) -> Result<LoadBalancer, CloudError> {
        let name = load_balancer::name(svc);
        let key = format!("{name}-{}", svc.metadata.generation.unwrap_or_default());
        let req = CreateLoadBalancerRequest {
            name: name.clone(),
            scheme: want.scheme,
            listeners: want.listeners,
            backends,
            health_check: want.health_check,
            source_ranges: want.source_ranges,
            session_affinity: want.session_affinity,
            forwarding: want.forwarding,
            requested_ip: want.requested_ip,
        };
        match self.metered("CreateLoadBalancer", self.client.create_load_balancer(&req, Some(&key))).await {
            Ok(lb) => {
                tracing::info!(load_balancer = %lb.name, id = %lb.id, "created load balancer");
                Ok(lb)
            }
            // Created meanwhile (by an earlier try whose answer was lost, with other backends): look again.
            Err(e) if matches!(e.code(), Some(codes::LOAD_BALANCER_ALREADY_EXISTS | codes::IDEMPOTENCY_KEY_REUSED)) => {
                Err(CloudError::RetryAfter { after: CREATE_RECHECK, message: format!("load balancer {name}: {e}") })
            }
            Err(e) => Err(classify(e)),
        }
    }

    /// `lb` once it has left `provisioning`, looked at every [`PROVISIONING_POLL`] for at most
    /// [`PROVISIONING_WAIT`].
    async fn until_provisioned(&self, mut lb: LoadBalancer) -> Result<LoadBalancer, CloudError> {
        let start = Instant::now();
        while lb.state == LoadBalancerState::Provisioning {
            if start.elapsed() >= PROVISIONING_WAIT {
                return Err(CloudError::RetryAfter {
                    after: PROVISIONING_RECHECK,
                    message: format!("load balancer {} is still provisioning after {PROVISIONING_WAIT:?}", lb.name),
                });
            }
            tokio::time::sleep(PROVISIONING_POLL).await;
            lb = self.call("GetLoadBalancer", self.client.get_load_balancer(&lb.id)).await?;
        }
        Ok(lb)
    }

    /// The backends for `nodes`, sorted. When the set adds an instance `registered` lacks, only running
    /// instances: one ListInstances call, since a stopped or pending instance cannot be registered and one
    /// registered that stopped serves nothing (kubernetes#94966). When it only keeps or removes backends (no
    /// quota or state refuses that), no call: an ensure under throttling costs what it did before, the lookup
    /// and at most one write (a third call back to back would never fit a small burst).
    async fn running_backends(&self, nodes: &[Arc<Node>], registered: &[String]) -> Result<Vec<String>, CloudError> {
        let candidates = backends(nodes);
        if candidates.iter().all(|c| registered.contains(c)) {
            return Ok(candidates);
        }
        let q = ListInstancesQuery {
            state: Some(InstanceState::Running),
            page_size: Some(fakecloud_api::limits::PAGE_SIZE_MAX),
            ..Default::default()
        };
        let running = self.call("ListInstances", self.client.list_all_instances(&q)).await?;
        Ok(keep_running(candidates, running.iter().map(|i| i.id.as_str())))
    }

    /// Update `lb`. Refused for too many backends, the removals alone are applied first, then the refusal is
    /// reported (the service controller retries with its backoff): replacing a node at the quota then converges
    /// instead of deadlocking on a set that holds both the old node and the new (cloud-provider-aws#1328).
    async fn update(&self, lb: &LoadBalancer, req: &UpdateLoadBalancerRequest) -> Result<LoadBalancer, CloudError> {
        match self.metered("UpdateLoadBalancer", self.client.update_load_balancer(&lb.id, req)).await {
            Ok(lb) => Ok(lb),
            Err(e) if e.code() == Some(codes::TOO_MANY_TARGETS) => {
                if let Some(kept) = req.backends.as_deref().and_then(|wanted| removals_only(&lb.backends, wanted)) {
                    let removals = UpdateLoadBalancerRequest { backends: Some(kept), ..Default::default() };
                    self.call("UpdateLoadBalancer", self.client.update_load_balancer(&lb.id, &removals)).await?;
                    tracing::info!(load_balancer = %lb.name, "too many backends: applied the removals first");
                }
                Err(classify(e))
            }
            Err(e) => Err(classify(e)),
        }
    }

    /// The instance behind a node: by the ID in its providerID, or (before one is set) by its name. One call.
    async fn lookup(&self, node: &Node) -> Result<Instance, CloudError> {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        match node.spec.as_ref().and_then(|s| s.provider_id.as_deref()).filter(|p| !p.is_empty()) {
            Some(pid) => {
                let id = parse_provider_id(pid).ok_or_else(|| {
                    CloudError::Invalid(format!("node {name}: providerID {pid:?} is not fakecloud://<zone>/<id>"))
                })?;
                self.call("GetInstance", self.client.get_instance(id)).await
            }
            None => {
                let q = ListInstancesQuery { name: Some(name.to_string()), ..Default::default() };
                let found = self.call("ListInstances", self.client.list_instances(&q)).await?;
                found
                    .items
                    .into_iter()
                    .rev()
                    .find(|i| i.state != InstanceState::Terminated)
                    .ok_or_else(|| CloudError::NotFound(format!("instance not found for node {name}")))
            }
        }
    }
}

/// The instance IDs behind these nodes (nodes without a fakecloud providerID cannot be backends), sorted.
pub(crate) fn backends(nodes: &[Arc<Node>]) -> Vec<String> {
    let mut ids: Vec<String> = nodes
        .iter()
        .filter_map(|n| parse_provider_id(n.spec.as_ref()?.provider_id.as_deref()?))
        .map(str::to_string)
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// Of `candidates`, those `running`, in their order.
fn keep_running<'a>(candidates: Vec<String>, running: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let running: HashSet<&str> = running.into_iter().collect();
    candidates.into_iter().filter(|id| running.contains(id.as_str())).collect()
}

/// `current` without the backends no longer `wanted`, sorted — removals alone, which no quota refuses — or
/// `None` when there are none to make.
fn removals_only(current: &[String], wanted: &[String]) -> Option<Vec<String>> {
    let wanted: HashSet<&String> = wanted.iter().collect();
    let kept: Vec<String> = sorted(current).into_iter().filter(|b| wanted.contains(b)).collect();
    (kept.len() < current.len()).then_some(kept)
}

fn sorted(v: &[String]) -> Vec<String> {
    let mut v = v.to_vec();
    v.sort();
    v
}

/// The ingress exactly as the cloud serves it: the VIP, and `ipMode: Proxy` when the cloud says its load
/// balancer is a proxy (as cloud-provider-kind reports its Envoy); `VIP` is left to the apiserver's default.
fn status(lb: &LoadBalancer) -> LoadBalancerStatus {
    let ip_mode = (lb.ip_mode == IpMode::Proxy).then(|| "Proxy".to_string());
    let ingress =
        lb.address.map(|ip| vec![LoadBalancerIngress { ip: Some(ip.to_string()), ip_mode, ..Default::default() }]);
    LoadBalancerStatus { ingress }
}

/// The changes that bring `lb` to `want` with `backends`; `None` when it already matches. A scheme or an IP
/// cannot change in place: that is an error that says so.
fn changes(
    lb: &LoadBalancer,
    want: &Desired,
    backends: &[String],
) -> Result<Option<UpdateLoadBalancerRequest>, String> {
    if lb.scheme != want.scheme {
        return Err(format!(
            "load balancer {} is {} and its scheme cannot change; delete and recreate the Service",
            lb.name,
            lb.scheme.as_str()
        ));
    }
    if want.requested_ip.is_some() && want.requested_ip != lb.requested_ip {
        return Err(format!(
            "load balancer {} was created with another loadBalancerIP; delete and recreate the Service",
            lb.name
        ));
    }
    let mut req = UpdateLoadBalancerRequest::default();
    if lb.listeners != want.listeners {
        req.listeners = Some(want.listeners.clone());
    }
    if sorted(&lb.backends) != backends {
        req.backends = Some(backends.to_vec());
    }
    if lb.source_ranges != want.source_ranges {
        req.source_ranges = Some(want.source_ranges.clone());
    }
    if want.health_check.is_some() && lb.health_check != want.health_check {
        req.health_check = want.health_check.clone();
    }
    if lb.session_affinity != want.session_affinity {
        req.session_affinity = Some(want.session_affinity);
    }
    // In place, keeping the address: a Service that gains NodePorts goes from passthrough to a proxy.
    if lb.forwarding != want.forwarding {
        req.forwarding = Some(want.forwarding);
    }
    let unchanged = req.listeners.is_none()
        && req.backends.is_none()
        && req.source_ranges.is_none()
        && req.health_check.is_none()
        && req.session_affinity.is_none()
        && req.forwarding.is_none();
    Ok((!unchanged).then_some(req))
}

/// `fakecloud://<zone>/<id>` → `<id>` (the api crate's, which the VPC router shares).
pub use fakecloud_api::parse_provider_id;

/// Quota refusals as clouds word them, with a status that otherwise means a bad request or a conflict: EC2's and
/// ELB's 400s, Azure's 409 and 400, GCP's 403 (the emulator's failure-shape presets answer so).
const QUOTA_CODES: [&str; 11] = [
    "InstanceLimitExceeded",
    "RouteLimitExceeded",
    "AddressLimitExceeded",
    "RulesPerSecurityGroupLimitExceeded",
    "TooManyLoadBalancers",
    "TooManyListeners",
    "TooManyTargets",
    "OperationNotAllowed",
    "PublicIPCountLimitReached",
    "QUOTA_EXCEEDED",
    "quotaExceeded",
];

/// Map an API error to what a controller does about it.
pub fn classify(e: ClientError) -> CloudError {
    match (&e, e.status(), e.retry_after()) {
        (_, Some(404), _) => CloudError::NotFound(e.to_string()),
        // Whatever the status: GCP's 403 rateLimitExceeded says when its window ends, as a 429 or 503 does.
        (_, Some(s), Some(after)) if s == 403 || s == 429 || s == 503 => {
            CloudError::RetryAfter { after, message: e.to_string() }
        }
        (ClientError::Api(api), Some(s), _)
            if s == 422 || (matches!(s, 400 | 403 | 409) && QUOTA_CODES.contains(&api.code.as_str())) =>
        {
            CloudError::QuotaExceeded { code: api.code.clone(), message: api.message.clone() }
        }
        // A throttle, not a bad request: retried with backoff.
        (_, Some(400 | 403), _) if e.code().is_some_and(|c| codes::THROTTLES.contains(&c)) => {
            CloudError::Transient(e.to_string())
        }
        (_, Some(s), _) if (400..500).contains(&s) && s != 429 => CloudError::Invalid(e.to_string()),
        _ => CloudError::Transient(e.to_string()),
    }
}

impl Cloud for FakeCloud {
    async fn instance_exists(&self, node: &Node) -> Result<bool, CloudError> {
        match self.lookup(node).await {
            Ok(i) => Ok(i.state != InstanceState::Terminated),
            Err(CloudError::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn instance_shutdown(&self, node: &Node) -> Result<bool, CloudError> {
        let i = self.lookup(node).await?;
        Ok(matches!(i.state, InstanceState::Stopped | InstanceState::Stopping))
    }

    fn instance_id<'p>(&self, provider_id: &'p str) -> Option<&'p str> {
        parse_provider_id(provider_id)
    }

    async fn list_routes(&self, cluster: &str) -> Result<Vec<CloudRoute>, CloudError> {
        let routes = self.call("ListRoutes", self.client.list_routes(ROUTE_TABLE)).await?.items;
        let prefix = format!("{cluster}-");
        Ok(routes
            .into_iter()
            .filter(|r| r.name.starts_with(&prefix))
            .map(|r| CloudRoute {
                target_instance: r.target_instance,
                id: r.id,
                name: r.name,
                destination: r.destination,
            })
            .collect())
    }

    async fn create_route(
        &self,
        cluster: &str,
        name_hint: &str,
        node: &Node,
        destination: &str,
    ) -> Result<(), CloudError> {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let pid = node.spec.as_ref().and_then(|s| s.provider_id.as_deref()).unwrap_or_default();
        let target = parse_provider_id(pid)
            .ok_or_else(|| CloudError::Invalid(format!("node {name} has no fakecloud providerID yet")))?;
        let req = fakecloud_api::CreateRouteRequest {
            name: route_name(cluster, name_hint),
            destination: destination.to_string(),
            target_instance: target.to_string(),
        };
        match self.metered("CreateRoute", self.client.create_route(ROUTE_TABLE, &req, None)).await {
            Ok(_) => Ok(()),
            // Already there (a retry after a lost response): the next listing shows it.
            Err(e) if e.code() == Some(fakecloud_api::codes::ROUTE_ALREADY_EXISTS) => Ok(()),
            Err(e) => Err(classify(e)),
        }
    }

    async fn delete_route(&self, route: &CloudRoute) -> Result<(), CloudError> {
        match self.metered("DeleteRoute", self.client.delete_route(ROUTE_TABLE, &route.id)).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(classify(e)),
        }
    }

    async fn get_load_balancer(&self, _cluster: &str, svc: &Service) -> Result<Option<LoadBalancerStatus>, CloudError> {
        let lb = self.find_load_balancer(svc).await?;
        Ok(lb.filter(|lb| lb.state != LoadBalancerState::Deleting).map(|lb| status(&lb)))
    }

    async fn ensure_load_balancer(
        &self,
        _cluster: &str,
        svc: &Service,
        nodes: &[Arc<Node>],
    ) -> Result<LoadBalancerStatus, CloudError> {
        let want = load_balancer::desired(svc).map_err(CloudError::Invalid)?;
        let found = self.find_load_balancer(svc).await?;
        let registered = found.as_ref().map(|lb| lb.backends.as_slice()).unwrap_or_default();
        let backends = self.running_backends(nodes, registered).await?;
        let lb = match found {
            None => self.create_load_balancer(svc, want, backends).await?,
            Some(lb) if lb.state == LoadBalancerState::Deleting => {
                return Err(CloudError::RetryAfter {
                    after: PROVISIONING_RECHECK,
                    message: format!("load balancer {} is still being deleted", lb.name),
                });
            }
            Some(lb) => match changes(&lb, &want, &backends).map_err(CloudError::Invalid)? {
                None => lb,
                Some(req) => self.update(&lb, &req).await?,
            },
        };
        Ok(status(&self.until_provisioned(lb).await?))
    }

    async fn update_load_balancer(&self, _cluster: &str, svc: &Service, nodes: &[Arc<Node>]) -> Result<(), CloudError> {
        let name = load_balancer::name(svc);
        let lb = self
            .find_load_balancer(svc)
            .await?
            .ok_or_else(|| CloudError::NotFound(format!("load balancer {name} not found")))?;
        let backends = self.running_backends(nodes, &lb.backends).await?;
        if sorted(&lb.backends) != backends {
            let req = UpdateLoadBalancerRequest { backends: Some(backends), ..Default::default() };
            self.update(&lb, &req).await?;
        }
        Ok(())
    }

    async fn ensure_load_balancer_deleted(&self, _cluster: &str, svc: &Service) -> Result<(), CloudError> {
        match self.find_load_balancer(svc).await? {
            None => Ok(()),
            // Accepted already; the cloud finishes it.
            Some(lb) if lb.state == LoadBalancerState::Deleting => Ok(()),
            Some(lb) => match self.metered("DeleteLoadBalancer", self.client.delete_load_balancer(&lb.id)).await {
                Ok(_) => {
                    tracing::info!(load_balancer = %lb.name, id = %lb.id, "deleted load balancer");
                    Ok(())
                }
                Err(e) if e.is_not_found() => Ok(()),
                Err(e) => Err(classify(e)),
            },
        }
    }

    async fn instance_metadata(&self, node: &Node) -> Result<InstanceMetadata, CloudError> {
        let i = self.lookup(node).await?;
        // A dual-stack machine has an InternalIP of each family, as a dual-stack cloud reports it.
        let mut addresses: Vec<NodeAddress> =
            i.addresses().map(|a| NodeAddress { type_: "InternalIP".into(), address: a.to_string() }).collect();
        addresses.push(NodeAddress { type_: "Hostname".into(), address: i.name });
        Ok(InstanceMetadata {
            provider_id: i.provider_id,
            instance_type: i.instance_type,
            zone: i.zone,
            region: i.region,
            addresses,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(status: u16, code: &str, retry_after: Option<u64>) -> ClientError {
        ClientError::Api(fakecloud_api::ApiError {
            status,
            code: code.into(),
            message: "m".into(),
            request_id: "r".into(),
            retry_after: retry_after.map(Duration::from_secs),
        })
    }

    /// Each cloud's throttle (the emulator's presets) is retried, after its Retry-After when it gives one; a
    /// bad request or a quota is not taken for one.
    #[test]
    fn every_presets_throttle_is_retried_and_its_retry_after_kept() {
        let after = |e: CloudError| match e {
            CloudError::RetryAfter { after, .. } => Some(after),
            _ => None,
        };
        let throttles = [
            (api_error(503, "RequestLimitExceeded", None), None),
            (api_error(400, "Throttling", None), None),
            (api_error(429, "SubscriptionRequestsThrottled", Some(4)), Some(4)),
            (api_error(429, "OperationNotAllowed", None), None),
            (api_error(403, "rateLimitExceeded", Some(17)), Some(17)),
            (api_error(403, "rateLimitExceeded", None), None),
        ];
        for (e, retry_after) in throttles {
            let shown = e.to_string();
            let c = classify(e);
            assert!(matches!(c, CloudError::RetryAfter { .. } | CloudError::Transient(_)), "{shown}: {c:?}");
            assert_eq!(after(c), retry_after.map(Duration::from_secs), "{shown}");
        }
        assert!(matches!(classify(api_error(400, "InvalidParameter", None)), CloudError::Invalid(_)));
        assert!(matches!(classify(api_error(403, "Forbidden", None)), CloudError::Invalid(_)));
        assert!(matches!(classify(api_error(422, "RouteLimitExceeded", None)), CloudError::QuotaExceeded { .. }));
        for (status, code) in [(400, "TooManyTargets"), (409, "OperationNotAllowed"), (403, "QUOTA_EXCEEDED")] {
            assert!(
                matches!(classify(api_error(status, code, None)), CloudError::QuotaExceeded { .. }),
                "{status} {code}"
            );
        }
        // Azure's costly-read window refuses 429 OperationNotAllowed: a throttle, not a quota.
        assert!(matches!(classify(api_error(429, "OperationNotAllowed", None)), CloudError::Transient(_)));
    }

    #[test]
    fn provider_ids_are_parsed_strictly() {
        assert_eq!(parse_provider_id("fakecloud://local-1a/i-0123"), Some("i-0123"));
        assert_eq!(parse_provider_id("aws:///us-east-1a/i-0123"), None);
        assert_eq!(parse_provider_id("fakecloud://local-1a/"), None);
        assert_eq!(parse_provider_id("fakecloud://local-1a/a/b"), None);
    }

    fn node(name: &str, provider_id: Option<&str>) -> Arc<Node> {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
            provider_id: provider_id.map(str::to_string),
            ..Default::default()
        });
        Arc::new(n)
    }

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// kubernetes#94966: only nodes whose instance runs are sent as backends, however the nodes are listed.
    #[test]
    fn only_running_instances_become_backends() {
        let nodes = [
            node("c", Some("fakecloud://z/i-c")),
            node("a", Some("fakecloud://z/i-a")),
            node("stopped", Some("fakecloud://z/i-s")),
            node("uninitialised", None),
            node("a-again", Some("fakecloud://z/i-a")),
        ];
        let candidates = backends(&nodes);
        assert_eq!(candidates, ids(&["i-a", "i-c", "i-s"]));
        assert_eq!(keep_running(candidates.clone(), ["i-c", "i-a", "i-other"]), ids(&["i-a", "i-c"]));
        assert_eq!(keep_running(candidates, []), Vec::<String>::new());
    }

    /// cloud-provider-aws#1328: refused for too many backends, the removals alone are due: the current set
    /// without what is no longer wanted, never adding.
    #[test]
    fn removals_come_first_when_the_quota_refuses() {
        let current = ids(&["i-old", "i-b", "i-a"]);
        assert_eq!(removals_only(&current, &ids(&["i-a", "i-b", "i-new"])), Some(ids(&["i-a", "i-b"])));
        assert_eq!(removals_only(&current, &ids(&["i-new"])), Some(vec![]));
        // Nothing to remove: only additions, which the quota refuses; nothing more to send.
        assert_eq!(removals_only(&current, &ids(&["i-a", "i-b", "i-old", "i-new"])), None);
    }

    /// The updates and statuses of the cases both CCMs' tests read (ccm/testdata/load-balancers.json; the Go
    /// provider's in ccm-upstream/provider/loadbalancer_test.go).
    #[test]
    fn the_shared_updates_and_statuses_hold() {
        use serde_json::{Value, json};
        let file: Value = serde_json::from_str(include_str!("../../testdata/load-balancers.json")).unwrap();
        // What a case's `load_balancer` is written over.
        let lb = |c: &Value| -> LoadBalancer {
            let mut lb = json!({"id": "lb-1", "name": "a", "scheme": "internet-facing", "state": "active",
                "listeners": [], "backends": [], "source_ranges": [], "created_at": "", "updated_at": ""});
            for (k, v) in c["load_balancer"].as_object().unwrap() {
                lb[k] = v.clone();
            }
            serde_json::from_value(lb).unwrap()
        };
        let updates = file["updates"].as_array().unwrap();
        assert!(updates.len() >= 10);
        for c in updates {
            let case = c["case"].as_str().unwrap();
            let want = load_balancer::desired(&serde_json::from_value(c["service"].clone()).unwrap()).unwrap();
            let backends: Vec<String> = serde_json::from_value(c["backends"].clone()).unwrap();
            match changes(&lb(c), &want, &backends) {
                Ok(req) => {
                    assert!(c.get("error").is_none(), "{case}: not refused");
                    assert_eq!(serde_json::to_value(req).unwrap(), c["update"], "{case}");
                }
                Err(e) => {
                    let fragments = c["error"].as_array().unwrap_or_else(|| panic!("{case}: refused: {e}"));
                    for f in fragments {
                        assert!(e.contains(f.as_str().unwrap()), "{case}: {e:?} does not say {f}");
                    }
                }
            }
        }
        let statuses = file["statuses"].as_array().unwrap();
        assert!(statuses.len() >= 4);
        for c in statuses {
            assert_eq!(serde_json::to_value(status(&lb(c))).unwrap(), c["status"], "{}", c["case"]);
        }
    }

    /// A cloud on 127.0.0.1 with `running` running instances and at most one load balancer, that records each
    /// request as "METHOD path" and, when `flaky`, answers every other request 503 (the first try of each call).
    struct FakeApi {
        running: usize,
        flaky: bool,
        lb: Option<serde_json::Value>,
        requests: Vec<String>,
    }

    async fn serve(api: FakeApi) -> (Client, Arc<std::sync::Mutex<FakeApi>>) {
        use axum::http::{Method, StatusCode, Uri};
        use serde_json::{Value, json};
        let state = Arc::new(std::sync::Mutex::new(api));
        let shared = state.clone();
        let handle = move |method: Method, uri: Uri, body: axum::body::Bytes| {
            let state = shared.clone();
            async move {
                let mut s = state.lock().unwrap();
                s.requests.push(format!("{method} {}", uri.path()));
                if s.flaky && s.requests.len() % 2 == 1 {
                    let e = json!({"error": {"code": "ServiceUnavailable", "message": "blip", "request_id": "r"}});
                    return (StatusCode::SERVICE_UNAVAILABLE, axum::Json(e));
                }
                let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let answer = match (method.as_str(), uri.path()) {
                    ("GET", "/v1/load-balancers") => json!({"items": s.lb.iter().collect::<Vec<_>>()}),
                    ("GET", "/v1/instances") => {
                        let items: Vec<Value> = (0..s.running)
                            .map(|i| {
                                json!({"id": format!("i-{i}"), "name": format!("n{i}"), "zone": "z",
                                "region": "r", "instance_type": "fc.small", "market": "on-demand",
                                "state": "running", "private_ip": "10.0.0.1",
                                "provider_id": format!("fakecloud://z/i-{i}"), "tags": {}, "created_at": "",
                                "state_changed_at": ""})
                            })
                            .collect();
                        json!({"items": items})
                    }
                    ("POST", "/v1/load-balancers") => {
                        let mut lb = body;
                        lb["id"] = json!("lb-1");
                        lb["state"] = json!("active");
                        lb["address"] = json!("203.0.113.9");
                        lb["created_at"] = json!("");
                        lb["updated_at"] = json!("");
                        s.lb = Some(lb.clone());
                        lb
                    }
                    ("PATCH", "/v1/load-balancers/lb-1") => {
                        let lb = s.lb.as_mut().unwrap();
                        for (k, v) in body.as_object().unwrap() {
                            lb[k] = v.clone();
                        }
                        lb.clone()
                    }
                    (m, p) => panic!("unexpected {m} {p}"),
                };
                (StatusCode::OK, axum::Json(answer))
            }
        };
        let app = axum::Router::new().fallback(handle);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let policy = fakecloud_api::RetryPolicy { base_backoff: Duration::from_millis(5), ..Default::default() };
        (Client::new(&endpoint, "t").unwrap().with_retry_policy(policy), state)
    }

    /// An ensure's cloud calls do not grow with the nodes: the load balancer's lookup, one listing of the running
    /// instances when the backends gain one (filtered on running, one page up to 1,000 instances), and the
    /// write; never a call per node. Under a flaky cloud each call is retried in place, so the ensure succeeds.
    #[tokio::test]
    async fn an_ensure_costs_the_same_calls_whatever_the_node_count() {
        let svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u-1"},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "nodePort": 30080}]}}))
        .unwrap();
        let nodes = |n: usize| -> Vec<Arc<Node>> {
            (0..n).map(|i| node(&format!("n{i}"), Some(&format!("fakecloud://z/i-{i}")))).collect()
        };
        const CREATE: [&str; 3] = ["GET /v1/load-balancers", "GET /v1/instances", "POST /v1/load-balancers"];
        const ADD: [&str; 3] = ["GET /v1/load-balancers", "GET /v1/instances", "PATCH /v1/load-balancers/lb-1"];
        /// (case, nodes at the first ensure, nodes at the second (none: no second), flaky, the last's requests)
        type Case = (&'static str, usize, Option<usize>, bool, Vec<&'static str>);
        let cases: [Case; 7] = [
            ("a new load balancer, 1 node", 1, None, false, CREATE.to_vec()),
            ("a new load balancer, 50 nodes", 50, None, false, CREATE.to_vec()),
            ("a new load balancer, 500 nodes", 500, None, false, CREATE.to_vec()),
            ("up to date, 500 nodes: the lookup alone", 500, Some(500), false, vec!["GET /v1/load-balancers"]),
            (
                "a node removed from 500: no listing",
                500,
                Some(499),
                false,
                vec!["GET /v1/load-balancers", "PATCH /v1/load-balancers/lb-1"],
            ),
            ("a node added to 499", 499, Some(500), false, ADD.to_vec()),
            (
                "a new load balancer, 500 nodes, every first try failed: each call tried twice",
                500,
                None,
                true,
                CREATE.iter().flat_map(|r| [*r, *r]).collect(),
            ),
        ];
        for (name, first, second, flaky, want) in cases {
            let (client, state) = serve(FakeApi { running: 500, flaky, lb: None, requests: Vec::new() }).await;
            let cloud = FakeCloud::new(client);
            let status = cloud.ensure_load_balancer("c", &svc, &nodes(first)).await.unwrap();
            assert!(status.ingress.is_some(), "{name}");
            if let Some(n) = second {
                state.lock().unwrap().requests.clear();
                cloud.ensure_load_balancer("c", &svc, &nodes(n)).await.unwrap();
            }
            assert_eq!(state.lock().unwrap().requests, want, "{name}");
        }
    }
}

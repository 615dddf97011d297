//! The one typed client for the emulator API.
//!
//! Errors keep what a caller needs to react: the HTTP status, the API error code, and the `Retry-After` delay a
//! throttled or unavailable API asked for. With [`Client::with_retry_policy`] the client itself retries a
//! failed call in place, as cloud SDKs do (see [`RetryPolicy`]); without one every call is tried once.

use std::time::Duration;

use reqwest::{Method, header};
use serde::{Serialize, de::DeserializeOwned};

use crate::faults::*;
use crate::types::*;
use crate::{IDEMPOTENCY_KEY_HEADER, codes};

#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
    retry: Option<RetryPolicy>,
}

/// How the client retries a call in place, as the AWS SDK's standard retryer does (3 attempts, jittered
/// exponential backoff, on throttling and 5xx; Google's and Azure's clients likewise):
/// - a throttle (429, a [`codes::THROTTLES`] code, a 503 with `Retry-After`) was refused before it ran, so any
///   call is tried again;
/// - a 5xx or a connection that could not be made, only an idempotent call: GET, PUT, PATCH and DELETE, which
///   set state, and a create sent with an `Idempotency-Key`, which the cloud answers once per key. A POST
///   without a key (start, stop, a create without a key) may have run; its caller decides.
///
/// The wait is the `Retry-After` the cloud gave, or else a random one up to `base_backoff·2ⁿ` (full jitter,
/// capped at `max_backoff`), so that callers failed by one blip do not come back together. A `Retry-After`
/// longer than `max_wait` is returned to the caller at once: a controller's queue waits that long better
/// than a worker held in a call.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// A `Retry-After` longer than this is returned to the caller instead of waited out.
    pub max_wait: Duration,
    /// The first retry's wait at most, without `Retry-After`; doubled for each one after.
    pub base_backoff: Duration,
    /// A retry's wait at most, without `Retry-After`.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            max_wait: Duration::from_secs(1),
            base_backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    /// How long to wait before trying again a call that failed with `err` on its `attempt`-th try, or `None`
    /// when it is not to be tried again. `idempotent`: the call may run twice with one effect.
    fn wait(&self, attempt: u32, idempotent: bool, err: &ClientError) -> Option<Duration> {
        if attempt >= self.max_attempts {
            return None;
        }
        let retryable = match err {
            ClientError::Api(e) => {
                let throttled = e.status == 429
                    || codes::THROTTLES.contains(&e.code.as_str())
                    || (e.status == 503 && e.retry_after.is_some());
                throttled || (idempotent && e.status >= 500)
            }
            ClientError::Transport { source, .. } => idempotent && source.is_connect(),
            ClientError::Decode { .. } | ClientError::InvalidEndpoint(_) => false,
        };
        if !retryable {
            return None;
        }
        match err.retry_after() {
            Some(after) => (after <= self.max_wait).then_some(after),
            None => {
                let ceiling = self.base_backoff.saturating_mul(1 << (attempt - 1).min(16)).min(self.max_backoff);
                Some(ceiling.mul_f64(unit_random()))
            }
        }
    }
}

/// A number in [0, 1), from the standard library's per-process random hash keys (no generator needed for a
/// jitter).
fn unit_random() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let bits = std::collections::hash_map::RandomState::new().build_hasher().finish() >> 11;
    bits as f64 / (1u64 << 53) as f64
}

/// An error the API returned in its envelope.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{status} {code}: {message} (request {request_id})")]
pub struct ApiError {
    pub status: u16,
    pub code: String,
    pub message: String,
    pub request_id: String,
    /// The `Retry-After` header, when the API sent one.
    pub retry_after: Option<Duration>,
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("cannot reach the emulator at {endpoint}: {source}")]
    Transport {
        endpoint: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("unexpected response from {endpoint} (HTTP {status}): {detail}")]
    Decode { endpoint: String, status: u16, detail: String },
    #[error("invalid endpoint {0:?}: expected a URL such as http://127.0.0.1:8787")]
    InvalidEndpoint(String),
}

impl ClientError {
    /// The API error code, if the API answered with one.
    pub fn code(&self) -> Option<&str> {
        match self {
            Self::Api(e) => Some(&e.code),
            _ => None,
        }
    }

    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Api(e) => Some(e.status),
            _ => None,
        }
    }

    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404)
    }

    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Api(e) => e.retry_after,
            _ => None,
        }
    }
}

pub type Result<T, E = ClientError> = std::result::Result<T, E>;

impl Client {
    /// `endpoint` is the emulator's base URL (`http://127.0.0.1:8787`); `token` a user or admin bearer token.
    pub fn new(endpoint: &str, token: impl Into<String>) -> Result<Self> {
        let base = endpoint.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) || reqwest::Url::parse(&base).is_err() {
            return Err(ClientError::InvalidEndpoint(endpoint.to_string()));
        }
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(64)
            .build()
            .map_err(|source| ClientError::Transport { endpoint: base.clone(), source })?;
        Ok(Self { http, base, token: token.into(), retry: None })
    }

    /// Retry failed calls in place, as the policy allows.
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }

    /// Bound every call to `timeout` (default 30 s).
    pub fn with_timeout(mut self, timeout: Duration) -> Result<Self> {
        self.http = reqwest::Client::builder()
            .timeout(timeout)
            .pool_max_idle_per_host(64)
            .build()
            .map_err(|source| ClientError::Transport { endpoint: self.base.clone(), source })?;
        Ok(self)
    }

    pub fn endpoint(&self) -> &str {
        &self.base
    }

    // ------------------------------------------------------------------------------------------ plumbing

    async fn call<B, Q, T>(
        &self,
        method: Method,
        path: &str,
        query: Option<&Q>,
        body: Option<&B>,
        key: Option<&str>,
    ) -> Result<T>
    where
        B: Serialize + ?Sized,
        Q: Serialize + ?Sized,
        T: DeserializeOwned,
    {
        let url = format!("{}{}", self.base, path);
        let idempotent = key.is_some() || matches!(method, Method::GET | Method::PUT | Method::PATCH | Method::DELETE);
        let mut attempt = 1;
        loop {
            let err = match self.once(&method, &url, query, body, key).await {
                Ok(answer) => return Ok(answer),
                Err(err) => err,
            };
            let Some(wait) = self.retry.and_then(|policy| policy.wait(attempt, idempotent, &err)) else {
                return Err(err);
            };
            tracing::debug!(%url, ?wait, attempt, error = %err, "retrying in place");
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
    }

    /// One try of a call.
    async fn once<B, Q, T>(
        &self,
        method: &Method,
        url: &str,
        query: Option<&Q>,
        body: Option<&B>,
        key: Option<&str>,
    ) -> Result<T>
    where
        B: Serialize + ?Sized,
        Q: Serialize + ?Sized,
        T: DeserializeOwned,
    {
        let mut req = self.http.request(method.clone(), url).bearer_auth(&self.token);
        if let Some(q) = query {
            req = req.query(q);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        if let Some(k) = key {
            req = req.header(IDEMPOTENCY_KEY_HEADER, k);
        }
        let resp = req.send().await.map_err(|source| ClientError::Transport { endpoint: self.base.clone(), source })?;
        let status = resp.status();
        if !status.is_success() {
            return Err(self.api_error(resp).await?.into());
        }
        let bytes =
            resp.bytes().await.map_err(|source| ClientError::Transport { endpoint: self.base.clone(), source })?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Decode {
            endpoint: self.base.clone(),
            status: status.as_u16(),
            detail: e.to_string(),
        })
    }

    async fn api_error(&self, resp: reqwest::Response) -> Result<ApiError> {
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(Duration::from_secs_f64);
        let bytes =
            resp.bytes().await.map_err(|source| ClientError::Transport { endpoint: self.base.clone(), source })?;
        Ok(match serde_json::from_slice::<ErrorBody>(&bytes) {
            Ok(body) => ApiError {
                status,
                code: body.error.code,
                message: body.error.message,
                request_id: body.error.request_id,
                retry_after,
            },
            // Not our envelope (a proxy, a closed connection's remains): keep what there is.
            Err(_) => ApiError {
                status,
                code: if status >= 500 { codes::INTERNAL_ERROR } else { codes::INVALID_PARAMETER }.to_string(),
                message: String::from_utf8_lossy(&bytes).chars().take(500).collect(),
                request_id: String::new(),
                retry_after,
            },
        })
    }

    async fn get<T: DeserializeOwned, Q: Serialize + ?Sized>(&self, path: &str, query: Option<&Q>) -> Result<T> {
        self.call::<(), Q, T>(Method::GET, path, query, None, None).await
    }

    async fn send<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
        key: Option<&str>,
    ) -> Result<T> {
        self.call::<B, (), T>(method, path, None, body, key).await
    }

    // ------------------------------------------------------------------------------------------ region

    pub async fn region(&self) -> Result<Region> {
        self.get::<_, ()>("/v1/region", None).await
    }

    // ------------------------------------------------------------------------------------------ instances

    /// Create an instance. With `idempotency_key`, a retry returns the original instance instead of a second one.
    pub async fn create_instance(
        &self,
        req: &CreateInstanceRequest,
        idempotency_key: Option<&str>,
    ) -> Result<Instance> {
        self.send(Method::POST, "/v1/instances", Some(req), idempotency_key).await
    }

    /// Create a fleet: `in_flight` creates at a time (one call per instance, so quotas, faults and the audit log
    /// see each), each with the idempotency key `<key_prefix><name>` so that running it again returns the same
    /// instances. `created` counts those done, for progress. The first error ends it.
    pub async fn create_instances(
        &self,
        requests: Vec<CreateInstanceRequest>,
        in_flight: usize,
        key_prefix: &str,
        created: &std::sync::atomic::AtomicUsize,
    ) -> Result<Vec<Instance>> {
        use futures::{StreamExt, TryStreamExt};
        futures::stream::iter(requests)
            .map(|req| async move {
                let instance = self.create_instance(&req, Some(&format!("{key_prefix}{}", req.name))).await?;
                created.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Ok(instance)
            })
            .buffered(in_flight.max(1))
            .try_collect()
            .await
    }

    pub async fn get_instance(&self, id: &str) -> Result<Instance> {
        self.get::<_, ()>(&format!("/v1/instances/{id}"), None).await
    }

    /// One page of instances.
    pub async fn list_instances(&self, query: &ListInstancesQuery) -> Result<InstanceList> {
        self.get("/v1/instances", Some(query)).await
    }

    /// Every instance matching the filters, following page tokens.
    pub async fn list_all_instances(&self, filter: &ListInstancesQuery) -> Result<Vec<Instance>> {
        let mut query = filter.clone();
        let mut all = Vec::new();
        loop {
            let page = self.list_instances(&query).await?;
            all.extend(page.items);
            match page.next_page_token {
                Some(token) => query.page_token = Some(token),
                None => return Ok(all),
            }
        }
    }

    pub async fn stop_instance(&self, id: &str) -> Result<Instance> {
        self.send::<(), _>(Method::POST, &format!("/v1/instances/{id}/stop"), None, None).await
    }

    pub async fn start_instance(&self, id: &str) -> Result<Instance> {
        self.send::<(), _>(Method::POST, &format!("/v1/instances/{id}/start"), None, None).await
    }

    pub async fn terminate_instance(&self, id: &str) -> Result<Instance> {
        self.send::<(), _>(Method::POST, &format!("/v1/instances/{id}/terminate"), None, None).await
    }

    // ------------------------------------------------------------------------------------------ routes

    pub async fn list_route_tables(&self) -> Result<RouteTableList> {
        self.get::<_, ()>("/v1/route-tables", None).await
    }

    pub async fn create_route_table(&self, req: &CreateRouteTableRequest) -> Result<RouteTable> {
        self.send(Method::POST, "/v1/route-tables", Some(req), None).await
    }

    pub async fn delete_route_table(&self, id: &str) -> Result<RouteTable> {
        self.send::<(), _>(Method::DELETE, &format!("/v1/route-tables/{id}"), None, None).await
    }

    /// Routes of a table; `main` names the main table.
    pub async fn list_routes(&self, table: &str) -> Result<RouteList> {
        self.get::<_, ()>(&format!("/v1/route-tables/{table}/routes"), None).await
    }

    pub async fn create_route(
        &self,
        table: &str,
        req: &CreateRouteRequest,
        idempotency_key: Option<&str>,
    ) -> Result<Route> {
        self.send(Method::POST, &format!("/v1/route-tables/{table}/routes"), Some(req), idempotency_key).await
    }

    pub async fn delete_route(&self, table: &str, route_id: &str) -> Result<Route> {
        self.send::<(), _>(Method::DELETE, &format!("/v1/route-tables/{table}/routes/{route_id}"), None, None).await
    }

    // ------------------------------------------------------------------------------------------ load balancers

    pub async fn create_load_balancer(
        &self,
        req: &CreateLoadBalancerRequest,
        idempotency_key: Option<&str>,
    ) -> Result<LoadBalancer> {
        self.send(Method::POST, "/v1/load-balancers", Some(req), idempotency_key).await
    }

    pub async fn get_load_balancer(&self, id: &str) -> Result<LoadBalancer> {
        self.get::<_, ()>(&format!("/v1/load-balancers/{id}"), None).await
    }

    /// The load balancer with this name, if there is one.
    pub async fn find_load_balancer(&self, name: &str) -> Result<Option<LoadBalancer>> {
        let query = ListLoadBalancersQuery { name: Some(name.to_string()), ..Default::default() };
        Ok(self.list_load_balancers(&query).await?.items.into_iter().next())
    }

    pub async fn list_load_balancers(&self, query: &ListLoadBalancersQuery) -> Result<LoadBalancerList> {
        self.get("/v1/load-balancers", Some(query)).await
    }

    pub async fn list_all_load_balancers(&self) -> Result<Vec<LoadBalancer>> {
        let mut query = ListLoadBalancersQuery { page_size: Some(1000), ..Default::default() };
        let mut all = Vec::new();
        loop {
            let page = self.list_load_balancers(&query).await?;
            all.extend(page.items);
            match page.next_page_token {
                Some(token) => query.page_token = Some(token),
                None => return Ok(all),
            }
        }
    }

    pub async fn update_load_balancer(&self, id: &str, req: &UpdateLoadBalancerRequest) -> Result<LoadBalancer> {
        self.send(Method::PATCH, &format!("/v1/load-balancers/{id}"), Some(req), None).await
    }

    pub async fn delete_load_balancer(&self, id: &str) -> Result<LoadBalancer> {
        self.send::<(), _>(Method::DELETE, &format!("/v1/load-balancers/{id}"), None, None).await
    }

    // ------------------------------------------------------------------------------------------ quotas

    pub async fn list_quotas(&self) -> Result<QuotaList> {
        self.get::<_, ()>("/v1/quotas", None).await
    }

    pub async fn get_quota(&self, name: QuotaName) -> Result<Quota> {
        self.get::<_, ()>(&format!("/v1/quotas/{name}"), None).await
    }

    /// Admin only.
    pub async fn set_quota(&self, name: QuotaName, limit: u32) -> Result<Quota> {
        self.send(Method::PUT, &format!("/v1/quotas/{name}"), Some(&SetQuotaRequest { limit }), None).await
    }

    // ------------------------------------------------------------------------------------------ audit, admin

    /// Admin only. Entries are returned oldest first.
    pub async fn audit(&self, query: &AuditQuery) -> Result<AuditList> {
        self.get("/v1/audit", Some(query)).await
    }

    /// Admin only: delete every resource and the audit log; quotas go back to their defaults.
    pub async fn reset(&self) -> Result<serde_json::Value> {
        self.send::<(), _>(Method::POST, "/v1/admin/reset", None, None).await
    }

    /// Admin only: write a consistent copy of the database to the file `name` in the emulator's snapshot
    /// directory.
    pub async fn snapshot(&self, name: &str) -> Result<SnapshotResponse> {
        self.send(Method::POST, "/v1/admin/snapshot", Some(&SnapshotRequest { name: name.to_string() }), None).await
    }

    // ------------------------------------------------------------------------------------------ accounts (operator)

    /// The emulator's own admin token only: a new account and its tokens (shown this once).
    pub async fn create_account(&self, id: &str) -> Result<CreatedAccount> {
        self.send(Method::POST, "/v1/accounts", Some(&CreateAccountRequest { id: id.to_string() }), None).await
    }

    pub async fn list_accounts(&self) -> Result<AccountList> {
        self.get::<_, ()>("/v1/accounts", None).await
    }

    pub async fn get_account(&self, id: &str) -> Result<Account> {
        self.get::<_, ()>(&format!("/v1/accounts/{id}"), None).await
    }

    /// Delete the account and everything in it; its tokens stop working.
    pub async fn delete_account(&self, id: &str) -> Result<Account> {
        self.send::<(), _>(Method::DELETE, &format!("/v1/accounts/{id}"), None, None).await
    }

    /// The emulator's own admin token only: take the account `req.account` names, or any free one, for
    /// `req.ttl_seconds`; the answer has its tokens.
    pub async fn take_lease(&self, req: &LeaseRequest) -> Result<LeasedAccount> {
        self.send(Method::POST, "/v1/leases", Some(req), None).await
    }

    /// Renew a lease, by its holder, for `req.ttl_seconds` from now.
    pub async fn renew_lease(&self, account: &str, req: &RenewLeaseRequest) -> Result<Account> {
        self.send(Method::PUT, &format!("/v1/leases/{account}"), Some(req), None).await
    }

    /// Release a lease: the account is wiped (emptied, new tokens) and free again.
    pub async fn release_lease(&self, account: &str) -> Result<Account> {
        self.send::<(), _>(Method::DELETE, &format!("/v1/leases/{account}"), None, None).await
    }

    // ------------------------------------------------------------------------------------------ faults (admin)

    pub async fn add_fault(&self, req: &CreateFaultRuleRequest) -> Result<FaultRule> {
        self.send(Method::POST, "/v1/faults", Some(req), None).await
    }

    pub async fn list_faults(&self) -> Result<FaultRuleList> {
        self.get::<_, ()>("/v1/faults", None).await
    }

    pub async fn delete_fault(&self, id: &str) -> Result<FaultRule> {
        self.send::<(), _>(Method::DELETE, &format!("/v1/faults/{id}"), None, None).await
    }

    pub async fn add_lb_fault(&self, req: &CreateLbFaultRuleRequest) -> Result<LbFaultRule> {
        self.send(Method::POST, "/v1/lb-faults", Some(req), None).await
    }

    pub async fn list_lb_faults(&self) -> Result<LbFaultRuleList> {
        self.get::<_, ()>("/v1/lb-faults", None).await
    }

    pub async fn delete_lb_fault(&self, id: &str) -> Result<LbFaultRule> {
        self.send::<(), _>(Method::DELETE, &format!("/v1/lb-faults/{id}"), None, None).await
    }

    /// Remove every fault rule, data-plane rule, rate limit and outage.
    pub async fn clear_faults(&self) -> Result<serde_json::Value> {
        self.send::<(), _>(Method::DELETE, "/v1/faults", None, None).await
    }

    pub async fn set_rate_limit(&self, id: &str, req: &SetRateLimitRequest) -> Result<RateLimit> {
        self.send(Method::PUT, &format!("/v1/rate-limits/{id}"), Some(req), None).await
    }

    pub async fn list_rate_limits(&self) -> Result<RateLimitList> {
        self.get::<_, ()>("/v1/rate-limits", None).await
    }

    pub async fn delete_rate_limit(&self, id: &str) -> Result<RateLimit> {
        self.send::<(), _>(Method::DELETE, &format!("/v1/rate-limits/{id}"), None, None).await
    }

    /// Every preset: the limits it installs, how its cloud refuses a request over a quota, whether it is in force.
    pub async fn list_rate_limit_presets(&self) -> Result<RateLimitPresetList> {
        self.send::<(), _>(Method::GET, "/v1/rate-limit-presets", None, None).await
    }

    /// Install a cloud's throttling as rate limits `<preset>-...`, replacing any other preset's; the limits
    /// installed.
    pub async fn install_rate_limit_preset(&self, preset: RateLimitPreset) -> Result<RateLimitList> {
        self.send::<(), _>(Method::PUT, &format!("/v1/rate-limit-presets/{preset}"), None, None).await
    }

    /// Remove every preset's rate limits; those removed.
    pub async fn clear_rate_limit_presets(&self) -> Result<RateLimitList> {
        self.send::<(), _>(Method::DELETE, "/v1/rate-limit-presets", None, None).await
    }

    /// Admin only. How long new load balancers stay `provisioning`.
    pub async fn lb_provisioning(&self) -> Result<LbProvisioning> {
        self.get::<_, ()>("/v1/load-balancer-provisioning", None).await
    }

    /// Admin only. Set how long new load balancers (or those of one name) stay `provisioning`.
    pub async fn set_lb_provisioning(&self, req: &SetLbProvisioningRequest) -> Result<LbProvisioning> {
        self.send(Method::PUT, "/v1/load-balancer-provisioning", Some(req), None).await
    }

    /// Admin only. Back to the start flag: one name's setting, or (`None`) every setting.
    pub async fn reset_lb_provisioning(&self, load_balancer: Option<&str>) -> Result<LbProvisioning> {
        let q = ResetLbProvisioningQuery { load_balancer: load_balancer.map(str::to_string) };
        self.call::<(), _, _>(Method::DELETE, "/v1/load-balancer-provisioning", Some(&q), None, None).await
    }

    pub async fn start_outage(&self, req: &StartOutageRequest) -> Result<Outage> {
        self.send(Method::POST, "/v1/outages", Some(req), None).await
    }

    pub async fn list_outages(&self) -> Result<OutageList> {
        self.get::<_, ()>("/v1/outages", None).await
    }

    pub async fn stop_outage(&self, id: &str) -> Result<Outage> {
        self.send::<(), _>(Method::DELETE, &format!("/v1/outages/{id}"), None, None).await
    }

    /// Hang machines: their instances keep running, their kubelets fall silent.
    pub async fn start_hang(&self, req: &StartHangRequest) -> Result<HangList> {
        self.send(Method::POST, "/v1/hangs", Some(req), None).await
    }

    /// The hung machines (running instances only: a restart ends a hang).
    pub async fn list_hangs(&self) -> Result<HangList> {
        self.get::<_, ()>("/v1/hangs", None).await
    }

    /// Resume a hung machine: its kubelet reports again.
    pub async fn stop_hang(&self, instance_id: &str) -> Result<Hang> {
        self.send::<(), _>(Method::DELETE, &format!("/v1/hangs/{instance_id}"), None, None).await
    }

    pub async fn reclaim_spot(&self, req: &ReclaimRequest) -> Result<ReclaimResponse> {
        self.send(Method::POST, "/v1/spot/reclaim", Some(req), None).await
    }

    /// Start (or replace) random spot reclamation.
    pub async fn start_spot_random(&self, req: &SpotRandomRequest) -> Result<SpotRandom> {
        self.send(Method::PUT, "/v1/spot/random", Some(req), None).await
    }

    pub async fn stop_spot_random(&self) -> Result<serde_json::Value> {
        self.send::<(), _>(Method::DELETE, "/v1/spot/random", None, None).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// An answer the test server gives: status, extra headers, body.
    type Answer = (u16, &'static str, &'static str);

    const OK: Answer = (200, "", r#"{"name":"local-1"}"#);
    const UNAVAILABLE: Answer = (503, "", r#"{"error":{"code":"ServiceUnavailable","message":"m","request_id":"r"}}"#);
    const THROTTLED: Answer = (429, "", r#"{"error":{"code":"TooManyRequests","message":"m","request_id":"r"}}"#);
    const THROTTLED_SOON: Answer =
        (429, "Retry-After: 0.2\r\n", r#"{"error":{"code":"TooManyRequests","message":"m","request_id":"r"}}"#);
    const THROTTLED_LONG: Answer =
        (429, "Retry-After: 30\r\n", r#"{"error":{"code":"TooManyRequests","message":"m","request_id":"r"}}"#);
    const ELB_THROTTLE: Answer = (400, "", r#"{"error":{"code":"Throttling","message":"m","request_id":"r"}}"#);
    const BAD: Answer = (400, "", r#"{"error":{"code":"InvalidParameter","message":"m","request_id":"r"}}"#);

    /// A server on 127.0.0.1 that gives `answers` in order (the last one again when they run out), one per
    /// connection, and counts the requests. A thread of its own: the test needs no async I/O.
    fn server(answers: Vec<Answer>) -> (String, Arc<Mutex<usize>>) {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let served = Arc::new(Mutex::new(0));
        let count = served.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let n = {
                    let mut c = count.lock().unwrap();
                    *c += 1;
                    *c
                };
                let (status, headers, body) = answers[(n - 1).min(answers.len() - 1)];
                let reply = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{headers}connection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(reply.as_bytes());
            }
        });
        (format!("http://{addr}"), served)
    }

    /// Table: what the server answers, which call, with or without a policy → the tries made and the outcome.
    #[tokio::test]
    async fn calls_are_retried_in_place_within_the_policy() {
        let quick = RetryPolicy { base_backoff: Duration::from_millis(20), ..RetryPolicy::default() };
        struct Case {
            name: &'static str,
            answers: Vec<Answer>,
            call: Call,
            policy: Option<RetryPolicy>,
            tries: usize,
            /// The final status: 200 on success.
            status: u16,
            /// The least time the retries took (a Retry-After waited out).
            at_least: Duration,
        }
        #[derive(Clone, Copy)]
        enum Call {
            Get,
            Post,
            PostWithKey,
        }
        let cases = [
            Case {
                name: "without a policy, every call is tried once (the CLI, the e2e suite)",
                answers: vec![UNAVAILABLE, OK],
                call: Call::Get,
                policy: None,
                tries: 1,
                status: 503,
                at_least: Duration::ZERO,
            },
            Case {
                name: "a 5xx on an idempotent call: tried again",
                answers: vec![UNAVAILABLE, OK],
                call: Call::Get,
                policy: Some(quick),
                tries: 2,
                status: 200,
                at_least: Duration::ZERO,
            },
            Case {
                name: "three tries in all, then the error",
                answers: vec![UNAVAILABLE],
                call: Call::Get,
                policy: Some(quick),
                tries: 3,
                status: 503,
                at_least: Duration::ZERO,
            },
            Case {
                name: "a 5xx on a POST without a key may have run: not tried again",
                answers: vec![UNAVAILABLE, OK],
                call: Call::Post,
                policy: Some(quick),
                tries: 1,
                status: 503,
                at_least: Duration::ZERO,
            },
            Case {
                name: "a create sent with an Idempotency-Key runs once per key: tried again on a 5xx",
                answers: vec![UNAVAILABLE, OK],
                call: Call::PostWithKey,
                policy: Some(quick),
                tries: 2,
                status: 200,
                at_least: Duration::ZERO,
            },
            Case {
                name: "a 429 without Retry-After was refused before it ran: any call is tried again",
                answers: vec![THROTTLED, THROTTLED, OK],
                call: Call::Post,
                policy: Some(quick),
                tries: 3,
                status: 200,
                at_least: Duration::ZERO,
            },
            Case {
                name: "ELB's 400 Throttling is a throttle",
                answers: vec![ELB_THROTTLE, OK],
                call: Call::Get,
                policy: Some(quick),
                tries: 2,
                status: 200,
                at_least: Duration::ZERO,
            },
            Case {
                name: "a short Retry-After is waited out",
                answers: vec![THROTTLED_SOON, OK],
                call: Call::Get,
                policy: Some(quick),
                tries: 2,
                status: 200,
                at_least: Duration::ZERO,
            },
            Case {
                name: "a Retry-After past max_wait goes back to the caller at once",
                answers: vec![THROTTLED_LONG, OK],
                call: Call::Get,
                policy: Some(quick),
                tries: 1,
                status: 429,
                at_least: Duration::ZERO,
            },
            Case {
                name: "a bad request is not retried",
                answers: vec![BAD, OK],
                call: Call::Get,
                policy: Some(quick),
                tries: 1,
                status: 400,
                at_least: Duration::ZERO,
            },
        ];
        for c in cases {
            let (endpoint, served) = server(c.answers);
            let mut client = Client::new(&endpoint, "t").unwrap();
            if let Some(p) = c.policy {
                client = client.with_retry_policy(p);
            }
            let started = std::time::Instant::now();
            let result: Result<Region> = match c.call {
                Call::Get => client.region().await,
                Call::Post => client.send::<(), _>(Method::POST, "/v1/region", None, None).await,
                Call::PostWithKey => client.send::<(), _>(Method::POST, "/v1/region", None, Some("k")).await,
            };
            let name = c.name;
            assert_eq!(result.as_ref().err().and_then(ClientError::status).unwrap_or(200), c.status, "{name}");
            assert_eq!(*served.lock().unwrap(), c.tries, "{name}: tries");
            assert!(started.elapsed() >= c.at_least, "{name}: took {:?}", started.elapsed());
        }
    }
}

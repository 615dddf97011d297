//! The one typed client for the emulator API.
//!
//! Errors keep what a caller needs to react: the HTTP status, the API error code, and the `Retry-After` delay a
//! throttled or unavailable API asked for. With [`Client::with_retry_policy`] the client itself waits out
//! `Retry-After` on 429/503 and retries, up to a bound.

use std::time::Duration;

use reqwest::{Method, StatusCode, header};
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

/// How the client treats 429 and 503 responses that carry `Retry-After`.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// A `Retry-After` longer than this is returned to the caller instead of waited out.
    pub max_wait: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { max_attempts: 5, max_wait: Duration::from_secs(60) }
    }
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

    /// Wait out `Retry-After` on 429/503 and try again, as the policy allows.
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
        let mut attempt = 1;
        loop {
            let mut req = self.http.request(method.clone(), &url).bearer_auth(&self.token);
            if let Some(q) = query {
                req = req.query(q);
            }
            if let Some(b) = body {
                req = req.json(b);
            }
            if let Some(k) = key {
                req = req.header(IDEMPOTENCY_KEY_HEADER, k);
            }
            let resp =
                req.send().await.map_err(|source| ClientError::Transport { endpoint: self.base.clone(), source })?;
            let status = resp.status();
            if status.is_success() {
                let bytes = resp
                    .bytes()
                    .await
                    .map_err(|source| ClientError::Transport { endpoint: self.base.clone(), source })?;
                return serde_json::from_slice(&bytes).map_err(|e| ClientError::Decode {
                    endpoint: self.base.clone(),
                    status: status.as_u16(),
                    detail: e.to_string(),
                });
            }
            let err = self.api_error(resp).await?;
            if let (Some(policy), Some(wait)) = (self.retry, err.retry_after)
                && matches!(status, StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE)
                && attempt < policy.max_attempts
                && wait <= policy.max_wait
            {
                tracing::debug!(%url, ?wait, attempt, "throttled; waiting out Retry-After");
                tokio::time::sleep(wait).await;
                attempt += 1;
                continue;
            }
            return Err(err.into());
        }
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

//! Fault injection: rules, rate limits, outages, hung machines and spot reclamation (admin API under
//! `/v1/faults`, `/v1/rate-limits`, `/v1/outages`, `/v1/hangs`, `/v1/spot/reclaim`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::{Instance, QuotaName};

/// What a rule applies to. Every list given must contain a match; an empty list matches anything.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FaultMatch {
    /// Operation names or globs, e.g. `CreateLoadBalancer`, `*LoadBalancer*`, `Create*`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub operations: Vec<String>,
    /// HTTP methods, e.g. `POST`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    /// Resource IDs named in the request path, e.g. an instance ID.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_ids: Vec<String>,
    /// Caller roles: `user` or `admin`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    /// Zones of the resource the call is about (an instance by ID, or the zone a create asks for).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,
    /// Names or globs of the resource the call is about (by ID, or the name a create asks for).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// Tags of the resource: `key=value`, or `key` for "has the tag".
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum NoResponseMode {
    /// Drop the connection without an answer.
    #[default]
    Close,
    /// Say nothing until `hang_seconds` have passed (or the client gives up), then drop the connection.
    Hang,
}

/// What a matching call gets.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
pub enum FaultAction {
    /// Answer with this error instead of doing the call.
    Error {
        /// 400–599.
        status: u16,
        code: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        /// Extra response headers, e.g. `{"Retry-After": "5"}`.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        headers: BTreeMap<String, String>,
    },
    /// Delay the call by `ms` plus a uniform random 0..`jitter_ms`, then do it.
    Latency {
        ms: u64,
        #[serde(default)]
        jitter_ms: u64,
    },
    /// No answer at all.
    NoResponse {
        #[serde(default)]
        mode: NoResponseMode,
        /// For `hang`: at most this long (default 300, at most 3600).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hang_seconds: Option<f64>,
    },
    /// Do the call; what it creates stays invisible to reads (404 on get, left out of lists) for `seconds`.
    /// Only callers with the user token see the lag: the admin token is the cloud's own view (its machines'
    /// kubelets see their own instance at once).
    EventualConsistency { seconds: f64 },
    /// Do the call (the write happens), then answer with this error: the lost-response case.
    ApplyThenFail {
        status: u16,
        code: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
}

/// When a matching call is actually faulted.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FaultTrigger {
    /// 0–1; drawn from the emulator's seeded generator (`fakecloud serve --seed`), so a run repeats exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probability: Option<f64>,
    /// Let the first N matching calls through.
    #[serde(default)]
    pub skip: u64,
    /// Then fault at most this many (default: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<u64>,
    /// Active from this time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Active until this time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// Active for this long from when the rule is added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_seconds: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateFaultRuleRequest {
    /// A name for the rule (letters, digits, `-`); default `fault-<n>`. It also seeds the rule's random draws.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "match", default)]
    pub matcher: FaultMatch,
    pub action: FaultAction,
    #[serde(default)]
    pub trigger: FaultTrigger,
    /// Where in the ordered list (0 = first; rules are tried in order, first match wins). Default: last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<usize>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct FaultRule {
    pub id: String,
    #[serde(rename = "match")]
    pub matcher: FaultMatch,
    pub action: FaultAction,
    pub trigger: FaultTrigger,
    /// When the rule stops applying, if it has a window (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_until: Option<String>,
    /// Calls that matched since the emulator started.
    pub matched: u64,
    /// Calls that were faulted since the emulator started.
    pub injected: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FaultRuleList {
    pub items: Vec<FaultRule>,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum RateLimitScope {
    /// Every call.
    #[default]
    All,
    /// GET calls.
    Reads,
    /// Every call that is not a GET.
    Writes,
    /// The calls of `operation`.
    Operation,
    /// The calls of any of `operations`: a class of operations sharing one budget (EC2's describe calls, a
    /// cloud's costly reads).
    Operations,
}

/// How a limit counts calls.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum RateLimitKind {
    /// `capacity` calls at once, refilled continuously at `refill_per_second` (AWS, Azure's subscription
    /// limits).
    #[default]
    TokenBucket,
    /// `capacity` calls per window of `window_seconds`, the windows aligned to the clock: each starts at a
    /// multiple of `window_seconds` since the Unix epoch, so a 60 s budget spent at 10:00:15 comes back at
    /// 10:01:00 (GCP's per-minute quotas).
    FixedWindow,
}

/// A rate limit: a token bucket (`capacity` calls at once, refilled at `refill_per_second`) or a clock-aligned
/// fixed window (`capacity` calls per `window_seconds`), and what a refused call gets.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SetRateLimitRequest {
    #[serde(default)]
    pub scope: RateLimitScope,
    /// With scope `operation`: the operation name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    /// With scope `operations`: the operation names (at least one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub operations: Vec<String>,
    /// One bucket (or window count) per caller token instead of one for all.
    #[serde(default)]
    pub per_token: bool,
    #[serde(default)]
    pub kind: RateLimitKind,
    /// 1–1,000,000: the bucket's size, or the calls a window allows.
    pub capacity: u32,
    /// Token bucket: tokens added per second (0.001–1,000,000). A fixed window leaves it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refill_per_second: Option<f64>,
    /// Fixed window: its length in seconds (1–86,400).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_seconds: Option<u32>,
    /// Status of a refusal: 429 (default), 503 (EC2), 400 (ELB) or 403 (GCP).
    #[serde(default = "default_limit_status")]
    pub status: u16,
    /// The refusal's error code (default `RequestLimitExceeded`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The refusal's message (default: which limit, and when to retry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Whether a refusal says when to retry (`Retry-After` and `RateLimit-Reset`); default true. EC2 and
    /// Azure's compute windows say nothing, so a client must back off on its own.
    #[serde(default = "yes")]
    pub retry_after: bool,
    /// A header every answer to a call the limit applies to carries (refusals too), with what is left after
    /// the call, e.g. `x-ms-ratelimit-remaining-subscription-reads`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining_header: Option<String>,
    /// With `remaining_header`: its value, `{remaining}` standing for the count, e.g.
    /// `Microsoft.Compute/HighCostGet3Min;{remaining}` (default: the count alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining_format: Option<String>,
}

impl Default for SetRateLimitRequest {
    /// A bucket of one call, refilled once a second, refused as today's limits are (429 with Retry-After).
    fn default() -> Self {
        Self {
            scope: RateLimitScope::All,
            operation: None,
            operations: Vec::new(),
            per_token: false,
            kind: RateLimitKind::TokenBucket,
            capacity: 1,
            refill_per_second: Some(1.0),
            window_seconds: None,
            status: default_limit_status(),
            code: None,
            message: None,
            retry_after: true,
            remaining_header: None,
            remaining_format: None,
        }
    }
}

fn default_limit_status() -> u16 {
    429
}

fn yes() -> bool {
    true
}

/// Real clouds' throttling, each a named set of rate limits (ids `<preset>-...`); installing one replaces any
/// other preset's limits. What each holds, and where its numbers come from, is in the emulator
/// (`faults::presets`) and the book's "Failure-shape presets" (docs/book/src/faults.md).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum RateLimitPreset {
    /// EC2: 503 `RequestLimitExceeded` without Retry-After; token buckets for reads (100, 20/s) and writes
    /// (50, 5/s), and resource buckets for CreateInstance (1,000, 2/s) and TerminateInstance (1,000, 20/s).
    AwsEc2,
    /// ELB: 400 `Throttling` "Rate exceeded" without Retry-After; load balancer reads 40, 10/s, writes 20, 2/s.
    AwsElb,
    /// Azure Resource Manager: 429 with Retry-After; subscription reads (250, 25/s) and writes (200, 10/s) with
    /// `x-ms-ratelimit-remaining-subscription-*` on every answer; instance reads also in Compute's
    /// `HighCostGet3Min` window (160 per 3 min), refused without Retry-After.
    AzureArm,
    /// GCP Compute Engine: 403 `rateLimitExceeded`; reads and writes each 1,500 a minute in windows aligned to
    /// the clock's minutes.
    GcpCompute,
}

impl RateLimitPreset {
    pub const ALL: [Self; 4] = [Self::AwsEc2, Self::AwsElb, Self::AzureArm, Self::GcpCompute];

    /// The name in URLs and files, e.g. `aws-ec2`; the prefix of its limits' ids.
    pub fn name(self) -> &'static str {
        match self {
            Self::AwsEc2 => "aws-ec2",
            Self::AwsElb => "aws-elb",
            Self::AzureArm => "azure-arm",
            Self::GcpCompute => "gcp-compute",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }
}

impl std::fmt::Display for RateLimitPreset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct RateLimit {
    /// The limit's name, from the URL.
    pub id: String,
    pub limit: SetRateLimitRequest,
    /// Calls refused since the emulator started.
    pub refused: u64,
    /// The buckets in use and the tokens each holds now: one (`all`) or, `per_token`, one per caller role that
    /// has called (`user`, `admin`). A bucket not yet used is full.
    #[serde(default)]
    pub buckets: Vec<RateLimitBucket>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct RateLimitBucket {
    /// `all`, or the caller role of a per-token bucket.
    pub key: String,
    /// Tokens now, between 0 and the capacity (fractions refill continuously).
    pub tokens: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RateLimitList {
    pub items: Vec<RateLimit>,
}

/// A preset as `GET /v1/rate-limit-presets` shows it: the limits it installs, how its cloud answers a request
/// over a quota, and whether it is in force (its limits are among the rate limits).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct RateLimitPresetInfo {
    pub name: RateLimitPreset,
    pub installed: bool,
    /// What installing it sets, by id (`<preset>-...`).
    pub limits: Vec<PresetLimit>,
    /// While it is installed, a request over a quota is refused with its cloud's status and code instead of
    /// `422` and the emulator's code; the message still names the quota and how to raise it.
    pub quota_refusals: Vec<QuotaRefusal>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct PresetLimit {
    pub id: String,
    pub limit: SetRateLimitRequest,
}

/// How a cloud refuses a request over one quota.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct QuotaRefusal {
    pub quota: QuotaName,
    pub status: u16,
    pub code: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RateLimitPresetList {
    pub items: Vec<RateLimitPresetInfo>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum Service {
    /// Instances and the region.
    Compute,
    /// Route tables and routes.
    Network,
    /// Load balancers.
    LoadBalancing,
}

/// What is down: all of it, one service, or one zone.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum OutageScope {
    Api,
    Service,
    /// Calls on the zone's instances fail, and its instances are reported `stopped` (unreachable) while it lasts.
    Zone,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StartOutageRequest {
    pub scope: OutageScope,
    /// With scope `service`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<Service>,
    /// With scope `zone`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// How long it lasts (default: until stopped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_seconds: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct Outage {
    pub id: String,
    pub scope: OutageScope,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<Service>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    pub started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct OutageList {
    pub items: Vec<Outage>,
}

/// Hang machines: each named instance keeps running (the cloud says `running`) but its guest stops answering,
/// so its kubelet falls silent and the controller manager marks the Node NotReady after its grace period — the
/// hung machine users report. A restart of the instance (stop, start) ends the hang, as a reboot would.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StartHangRequest {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instance_ids: Vec<String>,
    /// Names of live instances (the Nodes' names).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// `key=value`: every running instance with the tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// A hung machine.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct Hang {
    pub instance_id: String,
    pub name: String,
    /// RFC 3339.
    pub since: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct HangList {
    pub items: Vec<Hang>,
}

/// Reclaim spot instances: an interruption notice now, then `stopping` and `terminated` with the reason
/// `Server.SpotInstanceTermination`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReclaimRequest {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instance_ids: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// `key=value`: every spot instance with the tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// Seconds between the notice and the interruption (default 120, as on AWS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice_seconds: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ReclaimResponse {
    pub items: Vec<Instance>,
}

/// The reason a reclaimed instance carries.
pub const SPOT_TERMINATION_REASON: &str = "Server.SpotInstanceTermination";

/// The reason instances of a zone in an outage carry while it lasts.
pub const ZONE_OUTAGE_REASON: &str = "Server.ZoneOutage";

/// Random spot reclamation: spot instances are reclaimed at random, about `rate_per_minute` a minute across
/// the fleet, each with a notice. The draws come from the emulator's seed.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SpotRandomRequest {
    /// Expected reclamations per minute across all spot instances (0–600).
    pub rate_per_minute: f64,
    /// Notice before each interruption (default 120 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice_seconds: Option<f64>,
    /// Stop after this long (default: until stopped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_seconds: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct SpotRandom {
    pub rate_per_minute: f64,
    pub notice_seconds: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// Instances reclaimed by this mode so far.
    pub reclaimed: u64,
}

/// Which load balancer traffic a data-plane fault rule applies to. Every list given must contain a match; an
/// empty list matches anything.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LbFaultMatch {
    /// Load balancer IDs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub load_balancers: Vec<String>,
    /// Load balancer names or globs, e.g. `web-*`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// Listener ports (`reset` and `latency` only: health checks are not per listener).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<u16>,
    /// Backend instance IDs: for `reset` and `latency`, the backend a connection is sent to; for `black-hole`,
    /// the backends whose health checks fail.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backends: Vec<String>,
}

/// What matching load balancer traffic gets.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
pub enum LbFaultAction {
    /// Accept a new connection, then reset it (TCP RST). Without `after_ms`, at once, before anything is
    /// forwarded; with it, after forwarding for that long (a connection dropped mid-stream).
    Reset {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after_ms: Option<u64>,
    },
    /// Hold a new connection `ms` plus a uniform random 0..`jitter_ms` before connecting it to its backend.
    Latency {
        ms: u64,
        #[serde(default)]
        jitter_ms: u64,
    },
    /// The backend's health checks fail (each matching check is one firing), so it turns unhealthy as the
    /// thresholds say and gets no new connections; established ones are left alone. (A struct variant, so that
    /// unknown fields are refused as in the others.)
    BlackHole {},
}

impl LbFaultAction {
    /// The action's `type`, as metrics and the audit log name it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Reset { .. } => "reset",
            Self::Latency { .. } => "latency",
            Self::BlackHole {} => "black-hole",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateLbFaultRuleRequest {
    /// A name for the rule (letters, digits, `-`); default `lb-fault-<n>`. It also seeds the rule's random draws.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "match", default)]
    pub matcher: LbFaultMatch,
    pub action: LbFaultAction,
    /// As for API rules; what is counted is a new connection (`reset`, `latency`) or a health check
    /// (`black-hole`).
    #[serde(default)]
    pub trigger: FaultTrigger,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct LbFaultRule {
    pub id: String,
    #[serde(rename = "match")]
    pub matcher: LbFaultMatch,
    pub action: LbFaultAction,
    pub trigger: FaultTrigger,
    /// When the rule stops applying, if it has a window (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_until: Option<String>,
    /// Connections or health checks that matched since the emulator started.
    pub matched: u64,
    /// Connections or health checks that were faulted since the emulator started.
    pub injected: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LbFaultRuleList {
    pub items: Vec<LbFaultRule>,
}

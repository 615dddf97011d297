//! `fakecloud fault|lb-fault|ratelimit|outage|spot`: the fault-injection commands.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use fakecloud_api::{
    Client, CreateFaultRuleRequest, CreateLbFaultRuleRequest, FaultAction, FaultMatch, FaultTrigger, LbFaultAction,
    LbFaultMatch, ListInstancesQuery, NoResponseMode, OutageScope, RateLimitKind, RateLimitPreset, RateLimitScope,
    ReclaimRequest, Service, SetRateLimitRequest, SpotRandomRequest, StartHangRequest, StartOutageRequest,
};

use crate::output::Output;
use crate::parse;

#[derive(Debug, Subcommand)]
pub enum FaultCmd {
    /// Add a rule: calls that match get the action, when the trigger fires. First matching rule wins.
    Add(Box<FaultAddArgs>),
    /// List the rules in order, with how often each matched and fired.
    List,
    /// Delete a rule by id.
    Delete { id: String },
    /// Remove every rule (data-plane rules too), rate limit and outage.
    Clear,
}

#[derive(Debug, Args)]
pub struct FaultAddArgs {
    /// Rule name (default fault-<n>); it also seeds the rule's random draws.
    #[arg(long)]
    id: Option<String>,
    /// Operation name or glob, e.g. CreateLoadBalancer or '*LoadBalancer*'; repeatable (default: all).
    #[arg(long = "operation")]
    operations: Vec<String>,
    /// HTTP method; repeatable.
    #[arg(long = "method")]
    methods: Vec<String>,
    /// Resource ID in the request path; repeatable.
    #[arg(long = "resource")]
    resource_ids: Vec<String>,
    /// Caller role (user or admin); repeatable.
    #[arg(long = "role")]
    roles: Vec<String>,
    /// Zone of the resource (an instance, or the zone a create asks for); repeatable.
    #[arg(long = "zone")]
    zones: Vec<String>,
    /// Name or glob of the resource; repeatable.
    #[arg(long = "name")]
    names: Vec<String>,
    /// Tag of the resource, KEY=VALUE or KEY; repeatable.
    #[arg(long = "tag")]
    tags: Vec<String>,
    /// Action: answer STATUS:CODE instead of doing the call, e.g. 503:ServiceUnavailable.
    #[arg(long, value_name = "STATUS:CODE", group = "action")]
    error: Option<String>,
    /// Action: do the call, then answer STATUS:CODE (the lost-response case).
    #[arg(long, value_name = "STATUS:CODE", group = "action")]
    apply_then_fail: Option<String>,
    /// Action: delay the call by this long, e.g. 500ms.
    #[arg(long, value_parser = humantime::parse_duration, group = "action")]
    latency: Option<Duration>,
    /// Action: do the call; what it creates stays invisible to reads this long (eventual consistency).
    #[arg(long, value_parser = humantime::parse_duration, group = "action")]
    invisible_for: Option<Duration>,
    /// Action: give no answer (close the connection, or hang).
    #[arg(long, value_enum, group = "action")]
    no_response: Option<NoResponseArg>,
    /// With --latency: up to this much more, at random.
    #[arg(long, value_parser = humantime::parse_duration)]
    jitter: Option<Duration>,
    /// With --error / --apply-then-fail: the message.
    #[arg(long)]
    message: Option<String>,
    /// With --error: an extra response header, KEY=VALUE (e.g. Retry-After=5); repeatable.
    #[arg(long = "header", value_parser = parse::tag)]
    headers: Vec<(String, String)>,
    /// With --no-response hang: how long to hang.
    #[arg(long, value_parser = humantime::parse_duration)]
    hang: Option<Duration>,
    #[command(flatten)]
    trigger: TriggerArgs,
    /// Position in the list (0 = first). Default: last.
    #[arg(long)]
    position: Option<usize>,
}

/// When a matching call, connection or health check is faulted.
#[derive(Debug, Args)]
pub struct TriggerArgs {
    /// Fire with this probability (0-1), drawn from the emulator's seed.
    #[arg(long)]
    probability: Option<f64>,
    /// Let the first N matching calls (connections, health checks) through.
    #[arg(long, default_value_t = 0)]
    skip: u64,
    /// Then fire at most N times.
    #[arg(long)]
    times: Option<u64>,
    /// Active for this long from now, e.g. 30s.
    #[arg(long = "for", value_parser = humantime::parse_duration)]
    duration: Option<Duration>,
    /// Active from this time (RFC 3339).
    #[arg(long)]
    from: Option<String>,
    /// Active until this time (RFC 3339).
    #[arg(long)]
    until: Option<String>,
}

impl From<TriggerArgs> for FaultTrigger {
    fn from(t: TriggerArgs) -> Self {
        FaultTrigger {
            probability: t.probability,
            skip: t.skip,
            times: t.times,
            from: t.from,
            until: t.until,
            duration_seconds: t.duration.map(|d| d.as_secs_f64()),
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum LbFaultCmd {
    /// Add a data-plane rule: matching connections are reset or delayed, or matching backends' health checks
    /// fail (black-hole) so they turn unhealthy and get no traffic. First matching rule wins. Example, a Service
    /// that flaps: `fakecloud lb-fault add --name 'web-*' --reset --probability 0.3 --for 2m`.
    Add(Box<LbFaultAddArgs>),
    /// List the rules, with how many connections or health checks each matched and faulted.
    List,
    /// Delete a rule by id; what it did stops at once (a black-holed backend turns healthy after its checks pass).
    Delete { id: String },
}

#[derive(Debug, Args)]
pub struct LbFaultAddArgs {
    /// Rule name (default lb-fault-<n>); it also seeds the rule's random draws.
    #[arg(long)]
    id: Option<String>,
    /// Load balancer ID; repeatable (default: all).
    #[arg(long = "lb")]
    load_balancers: Vec<String>,
    /// Load balancer name or glob; repeatable.
    #[arg(long = "name")]
    names: Vec<String>,
    /// Listener port (--reset, --latency); repeatable.
    #[arg(long = "port")]
    ports: Vec<u16>,
    /// Backend instance ID: the backend a connection goes to, or the one to black-hole; repeatable.
    #[arg(long = "backend")]
    backends: Vec<String>,
    /// Action: reset new connections (TCP RST) as soon as they are accepted.
    #[arg(long, group = "action")]
    reset: bool,
    /// Action: forward new connections, then reset them after this long, e.g. 2s.
    #[arg(long, value_parser = humantime::parse_duration, group = "action")]
    reset_after: Option<Duration>,
    /// Action: hold new connections this long before connecting them to their backend, e.g. 300ms.
    #[arg(long, value_parser = humantime::parse_duration, group = "action")]
    latency: Option<Duration>,
    /// With --latency: up to this much more, at random.
    #[arg(long, value_parser = humantime::parse_duration)]
    jitter: Option<Duration>,
    /// Action: fail the matching backends' health checks, so they turn unhealthy and get no new connections.
    #[arg(long, group = "action")]
    black_hole: bool,
    #[command(flatten)]
    trigger: TriggerArgs,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl LbFaultAddArgs {
    fn into_request(self) -> Result<CreateLbFaultRuleRequest> {
        let action = if self.reset {
            LbFaultAction::Reset { after_ms: None }
        } else if let Some(after) = self.reset_after {
            LbFaultAction::Reset { after_ms: Some(millis(after)) }
        } else if let Some(l) = self.latency {
            LbFaultAction::Latency { ms: millis(l), jitter_ms: self.jitter.map_or(0, millis) }
        } else if self.black_hole {
            LbFaultAction::BlackHole {}
        } else {
            bail!("give an action: --reset, --reset-after, --latency or --black-hole");
        };
        Ok(CreateLbFaultRuleRequest {
            id: self.id,
            matcher: LbFaultMatch {
                load_balancers: self.load_balancers,
                names: self.names,
                ports: self.ports,
                backends: self.backends,
            },
            action,
            trigger: self.trigger.into(),
        })
    }
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum NoResponseArg {
    Close,
    Hang,
}

fn status_code(s: &str) -> Result<(u16, String)> {
    let (status, code) =
        s.split_once(':').ok_or_else(|| anyhow::anyhow!("{s:?} is not STATUS:CODE, e.g. 503:ServiceUnavailable"))?;
    Ok((status.parse().map_err(|_| anyhow::anyhow!("{status:?} is not an HTTP status"))?, code.to_string()))
}

impl FaultAddArgs {
    fn into_request(self) -> Result<CreateFaultRuleRequest> {
        let action = if let Some(e) = &self.error {
            let (status, code) = status_code(e)?;
            FaultAction::Error {
                status,
                code,
                message: self.message.clone(),
                headers: self.headers.iter().cloned().collect::<BTreeMap<_, _>>(),
            }
        } else if let Some(e) = &self.apply_then_fail {
            let (status, code) = status_code(e)?;
            FaultAction::ApplyThenFail { status, code, message: self.message.clone() }
        } else if let Some(l) = self.latency {
            FaultAction::Latency { ms: millis(l), jitter_ms: self.jitter.map_or(0, millis) }
        } else if let Some(d) = self.invisible_for {
            FaultAction::EventualConsistency { seconds: d.as_secs_f64() }
        } else if let Some(mode) = self.no_response {
            FaultAction::NoResponse {
                mode: match mode {
                    NoResponseArg::Close => NoResponseMode::Close,
                    NoResponseArg::Hang => NoResponseMode::Hang,
                },
                hang_seconds: self.hang.map(|h| h.as_secs_f64()),
            }
        } else {
            bail!("give an action: --error, --apply-then-fail, --latency, --invisible-for or --no-response");
        };
        Ok(CreateFaultRuleRequest {
            id: self.id,
            matcher: FaultMatch {
                operations: self.operations,
                methods: self.methods,
                resource_ids: self.resource_ids,
                roles: self.roles,
                zones: self.zones,
                names: self.names,
                tags: self.tags,
            },
            action,
            trigger: self.trigger.into(),
            position: self.position,
        })
    }
}

#[derive(Debug, Subcommand)]
pub enum RateLimitCmd {
    /// Create or replace a rate limit named ID: a token bucket (--capacity, --refill) or, with --window, a
    /// fixed window aligned to the clock (--capacity calls per window).
    Set(Box<RateLimitSetArgs>),
    /// List limits with how many calls each refused.
    List,
    /// Delete one limit, or all with no ID.
    Clear { id: Option<String> },
    /// Install a real cloud's throttling as limits named <preset>-..., replacing any other preset's (limits set
    /// by name stay); while installed, a request over a quota is refused as that cloud refuses it. `clear`
    /// removes every preset's limits; `list` shows each preset, whether it is installed, and its quota refusals.
    Preset {
        #[arg(value_enum)]
        name: PresetArg,
    },
}

#[derive(Debug, Args)]
pub struct RateLimitSetArgs {
    id: String,
    /// Which calls count.
    #[arg(long, value_enum, default_value = "all")]
    scope: ScopeArg,
    /// With --scope operation: the operation; with --scope operations: one of them (repeatable).
    #[arg(long = "operation")]
    operations: Vec<String>,
    /// Calls allowed at once (the bucket's size), or per window.
    #[arg(long)]
    capacity: u32,
    /// Token bucket: tokens added per second.
    #[arg(long, required_unless_present = "window", conflicts_with = "window")]
    refill: Option<f64>,
    /// Fixed window: its length, e.g. 60s; windows start at multiples of it since the Unix epoch.
    #[arg(long, value_parser = humantime::parse_duration)]
    window: Option<Duration>,
    /// One bucket per caller token.
    #[arg(long)]
    per_token: bool,
    /// Status of a refusal: 400, 403, 429 or 503.
    #[arg(long, default_value_t = 429)]
    status: u16,
    /// Error code of a refusal (default RequestLimitExceeded).
    #[arg(long)]
    code: Option<String>,
    /// Message of a refusal.
    #[arg(long)]
    message: Option<String>,
    /// Refusals say nothing of when to retry (no Retry-After, no RateLimit-Reset), as EC2's.
    #[arg(long)]
    no_retry_after: bool,
    /// A header on every answer the limit applies to, with the calls left.
    #[arg(long)]
    remaining_header: Option<String>,
    /// With --remaining-header: its value, {remaining} standing for the count.
    #[arg(long, requires = "remaining_header")]
    remaining_format: Option<String>,
}

impl RateLimitSetArgs {
    fn into_request(self) -> Result<(String, SetRateLimitRequest)> {
        let scope = match self.scope {
            ScopeArg::All => RateLimitScope::All,
            ScopeArg::Reads => RateLimitScope::Reads,
            ScopeArg::Writes => RateLimitScope::Writes,
            ScopeArg::Operation => RateLimitScope::Operation,
            ScopeArg::Operations => RateLimitScope::Operations,
        };
        let (operation, operations) = match (scope, &self.operations[..]) {
            (RateLimitScope::Operation, [one]) => (Some(one.clone()), Vec::new()),
            (RateLimitScope::Operation, _) => bail!("--scope operation takes one --operation"),
            (RateLimitScope::Operations, _) => (None, self.operations),
            (_, []) => (None, Vec::new()),
            _ => bail!("--operation only with --scope operation or operations"),
        };
        let (kind, window_seconds) = match self.window {
            Some(w) => {
                let seconds = u32::try_from(w.as_secs()).unwrap_or(u32::MAX);
                if w.subsec_nanos() > 0 {
                    bail!("--window: whole seconds, e.g. 60s");
                }
                (RateLimitKind::FixedWindow, Some(seconds))
            }
            None => (RateLimitKind::TokenBucket, None),
        };
        let req = SetRateLimitRequest {
            scope,
            operation,
            operations,
            per_token: self.per_token,
            kind,
            capacity: self.capacity,
            refill_per_second: self.refill,
            window_seconds,
            status: self.status,
            code: self.code,
            message: self.message,
            retry_after: !self.no_retry_after,
            remaining_header: self.remaining_header,
            remaining_format: self.remaining_format,
        };
        Ok((self.id, req))
    }
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ScopeArg {
    All,
    Reads,
    Writes,
    Operation,
    Operations,
}

/// The presets, as the book's "Failure-shape presets" table details them (docs/book/src/faults.md).
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum PresetArg {
    /// EC2: 503 RequestLimitExceeded, no Retry-After; buckets reads 100 (20/s), writes 50 (5/s), CreateInstance
    /// 1,000 (2/s), TerminateInstance 1,000 (20/s).
    AwsEc2,
    /// ELB: 400 Throttling "Rate exceeded", no Retry-After; load balancer reads 40 (10/s), writes 20 (2/s).
    AwsElb,
    /// Azure ARM: 429 with Retry-After; reads 250 (25/s), writes 200 (10/s), x-ms-ratelimit-remaining-* on every
    /// answer; instance reads 160 per 3 min (HighCostGet3Min), refused without Retry-After.
    AzureArm,
    /// GCP Compute: 403 rateLimitExceeded; reads and writes 1,500 a minute each, windows aligned to the minute.
    GcpCompute,
    /// Remove every preset's limits.
    Clear,
    /// Every preset: installed or not, its limits, how it refuses a request over each quota.
    List,
}

#[derive(Debug, Subcommand)]
pub enum OutageCmd {
    /// Start an outage: the whole API, one service, or one zone.
    Start {
        #[arg(long, group = "what")]
        api: bool,
        #[arg(long, value_enum, group = "what")]
        service: Option<ServiceArg>,
        #[arg(long, group = "what")]
        zone: Option<String>,
        /// How long (default: until stopped).
        #[arg(long = "for", value_parser = humantime::parse_duration)]
        duration: Option<Duration>,
    },
    /// List outages in force.
    List,
    /// Stop an outage by id, or all with no ID.
    Stop { id: Option<String> },
}

#[derive(Debug, Subcommand)]
pub enum HangCmd {
    /// Hang running machines: each instance stays running, its kubelet falls silent, and its Node goes NotReady
    /// after the controller manager's grace period. Acted on by fakecloud's simulated kubelets.
    Start {
        #[command(flatten)]
        which: Machines,
    },
    /// List the hung machines.
    List,
    /// Resume hung machines: their kubelets report again. With nothing named, every hung machine.
    Stop {
        #[command(flatten)]
        which: Machines,
    },
}

/// The machines a command names (a reclaim takes the spot ones, a hang the running ones).
#[derive(Debug, clap::Args)]
pub struct Machines {
    /// Instance ID; repeatable.
    #[arg(long = "id")]
    ids: Vec<String>,
    /// Instance (and Node) name; repeatable.
    #[arg(long = "name")]
    names: Vec<String>,
    /// Every instance with this tag, KEY=VALUE.
    #[arg(long)]
    tag: Option<String>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ServiceArg {
    Compute,
    Network,
    LoadBalancing,
}

#[derive(Debug, Subcommand)]
pub enum SpotCmd {
    /// Reclaim spot instances: an interruption notice, then stopping and terminated.
    Reclaim {
        #[command(flatten)]
        which: Machines,
        /// Time between the notice and the interruption.
        #[arg(long, value_parser = humantime::parse_duration, default_value = "2m")]
        notice: Duration,
    },
    /// Reclaim random spot instances at a rate, drawn from the emulator's --seed; --stop ends it.
    Random {
        /// Expected reclamations per minute across all spot instances.
        #[arg(long, required_unless_present = "stop")]
        rate: Option<f64>,
        /// Notice before each interruption.
        #[arg(long, value_parser = humantime::parse_duration, default_value = "2m")]
        notice: Duration,
        /// Stop after this long (default: until --stop).
        #[arg(long = "for", value_parser = humantime::parse_duration)]
        duration: Option<Duration>,
        /// Stop random reclamation.
        #[arg(long, conflicts_with = "rate")]
        stop: bool,
    },
}

pub async fn fault(client: &Client, out: &Output, cmd: FaultCmd) -> Result<()> {
    match cmd {
        FaultCmd::Add(args) => out.faults(&[client.add_fault(&args.into_request()?).await?]),
        FaultCmd::List => out.faults(&client.list_faults().await?.items),
        FaultCmd::Delete { id } => out.faults(&[client.delete_fault(&id).await?]),
        FaultCmd::Clear => out.value(&client.clear_faults().await?),
    }
}

pub async fn lb_fault(client: &Client, out: &Output, cmd: LbFaultCmd) -> Result<()> {
    match cmd {
        LbFaultCmd::Add(args) => out.lb_faults(&[client.add_lb_fault(&args.into_request()?).await?]),
        LbFaultCmd::List => out.lb_faults(&client.list_lb_faults().await?.items),
        LbFaultCmd::Delete { id } => out.lb_faults(&[client.delete_lb_fault(&id).await?]),
    }
}

pub async fn rate_limit(client: &Client, out: &Output, cmd: RateLimitCmd) -> Result<()> {
    match cmd {
        RateLimitCmd::Set(args) => {
            let (id, req) = args.into_request()?;
            out.rate_limits(&[client.set_rate_limit(&id, &req).await?])
        }
        RateLimitCmd::List => out.rate_limits(&client.list_rate_limits().await?.items),
        RateLimitCmd::Clear { id: Some(id) } => out.rate_limits(&[client.delete_rate_limit(&id).await?]),
        RateLimitCmd::Clear { id: None } => {
            let mut removed = Vec::new();
            for l in client.list_rate_limits().await?.items {
                removed.push(client.delete_rate_limit(&l.id).await?);
            }
            out.rate_limits(&removed)
        }
        RateLimitCmd::Preset { name } => {
            let preset = match name {
                PresetArg::AwsEc2 => RateLimitPreset::AwsEc2,
                PresetArg::AwsElb => RateLimitPreset::AwsElb,
                PresetArg::AzureArm => RateLimitPreset::AzureArm,
                PresetArg::GcpCompute => RateLimitPreset::GcpCompute,
                PresetArg::Clear => return out.rate_limits(&client.clear_rate_limit_presets().await?.items),
                PresetArg::List => return out.rate_limit_presets(&client.list_rate_limit_presets().await?.items),
            };
            out.rate_limits(&client.install_rate_limit_preset(preset).await?.items)
        }
    }
}

pub async fn outage(client: &Client, out: &Output, cmd: OutageCmd) -> Result<()> {
    match cmd {
        OutageCmd::Start { api, service, zone, duration } => {
            let duration_seconds = duration.map(|d| d.as_secs_f64());
            let req = match (api, service, zone) {
                (true, None, None) => {
                    StartOutageRequest { scope: OutageScope::Api, service: None, zone: None, duration_seconds }
                }
                (false, Some(s), None) => {
                    let service = match s {
                        ServiceArg::Compute => Service::Compute,
                        ServiceArg::Network => Service::Network,
                        ServiceArg::LoadBalancing => Service::LoadBalancing,
                    };
                    StartOutageRequest {
                        scope: OutageScope::Service,
                        service: Some(service),
                        zone: None,
                        duration_seconds,
                    }
                }
                (false, None, Some(z)) => {
                    StartOutageRequest { scope: OutageScope::Zone, service: None, zone: Some(z), duration_seconds }
                }
                _ => bail!("say what is down: --api, --service NAME or --zone NAME"),
            };
            out.outages(&[client.start_outage(&req).await?])
        }
        OutageCmd::List => out.outages(&client.list_outages().await?.items),
        OutageCmd::Stop { id: Some(id) } => out.outages(&[client.stop_outage(&id).await?]),
        OutageCmd::Stop { id: None } => {
            let mut stopped = Vec::new();
            for o in client.list_outages().await?.items {
                stopped.push(client.stop_outage(&o.id).await?);
            }
            out.outages(&stopped)
        }
    }
}

pub async fn spot(client: &Client, out: &Output, cmd: SpotCmd) -> Result<()> {
    match cmd {
        SpotCmd::Reclaim { which: Machines { ids, names, tag }, notice } => {
            let req = ReclaimRequest { instance_ids: ids, names, tag, notice_seconds: Some(notice.as_secs_f64()) };
            out.instances(&client.reclaim_spot(&req).await?.items)
        }
        SpotCmd::Random { stop: true, .. } => out.value(&client.stop_spot_random().await?),
        SpotCmd::Random { rate, notice, duration, .. } => {
            let req = SpotRandomRequest {
                rate_per_minute: rate.unwrap_or_default(),
                notice_seconds: Some(notice.as_secs_f64()),
                duration_seconds: duration.map(|d| d.as_secs_f64()),
            };
            out.value(&serde_json::to_value(client.start_spot_random(&req).await?)?)
        }
    }
}

pub async fn hang(client: &Client, out: &Output, cmd: HangCmd) -> Result<()> {
    match cmd {
        HangCmd::Start { which: Machines { ids, names, tag } } => {
            let req = StartHangRequest { instance_ids: ids, names, tag };
            out.hangs(&client.start_hang(&req).await?.items)
        }
        HangCmd::List => out.hangs(&client.list_hangs().await?.items),
        HangCmd::Stop { which: Machines { ids, names, tag } } => {
            let tagged = match &tag {
                Some(t) => {
                    let q = ListInstancesQuery { tag: Some(t.clone()), page_size: Some(1000), ..Default::default() };
                    Some(client.list_all_instances(&q).await?.into_iter().map(|i| i.id).collect::<Vec<_>>())
                }
                None => None,
            };
            let everything = ids.is_empty() && names.is_empty() && tagged.is_none();
            let mut resumed = Vec::new();
            for h in client.list_hangs().await?.items {
                let named = ids.contains(&h.instance_id)
                    || names.contains(&h.name)
                    || tagged.as_ref().is_some_and(|t| t.contains(&h.instance_id));
                if everything || named {
                    resumed.push(client.stop_hang(&h.instance_id).await?);
                }
            }
            out.hangs(&resumed)
        }
    }
}

//! `fakecloud scenario run FILE`: timed fault-injection steps from a YAML file.
//!
//! ```yaml
//! name: lb-api-outage            # optional
//! steps:
//!   - at: 0s                      # offset from the start; steps run in order
//!     set_quota: {name: load-balancers, limit: 2}
//!   - at: 5s
//!     start_outage: {scope: service, service: load-balancing, duration_seconds: 20}
//!   - at: 10s
//!     add_fault: {id: slow-routes, match: {operations: [CreateRoute]}, action: {type: latency, ms: 800}}
//!   - at: 12s
//!     set_rate_limit: {id: writes, scope: writes, capacity: 5, refill_per_second: 1}
//!   - at: 14s
//!     rate_limit_preset: aws-ec2     # EC2's throttling: 503 RequestLimitExceeded, no Retry-After
//!   - at: 15s
//!     reclaim: {tag: pool=spot, notice_seconds: 10}
//!   - at: 16s
//!     lb_provisioning: {seconds: 30, load_balancer: web}   # `web` stays provisioning 30 s once created
//!   - at: 20s
//!     add_lb_fault: {id: flap, match: {names: [web]}, action: {type: reset}, trigger: {probability: 0.5}}
//!   - at: 30s
//!     remove_fault: slow-routes
//!   - at: 25s
//!     hang: {names: [node-b]}      # node-b's kubelet falls silent; the instance keeps running
//!   - at: 35s
//!     remove_lb_fault: flap
//!   - at: 38s
//!     stop_hangs: true
//!   - at: 40s
//!     wait: true                  # just let time pass until here
//! ```
//!
//! Each step has `at` and exactly one action: `add_fault` (the body of POST /v1/faults), `remove_fault` (an
//! id), `add_lb_fault` (the body of POST /v1/lb-faults: a data-plane rule), `remove_lb_fault` (an id), `set_rate_limit` (`id` plus the body of PUT /v1/rate-limits/{id}), `remove_rate_limit` (an id),
//! `rate_limit_preset` (a cloud's throttling: `aws-ec2`, `aws-elb`, `azure-arm` or `gcp-compute`),
//! `clear_rate_limit_presets` (true), `lb_provisioning` (the body of PUT /v1/load-balancer-provisioning: how long
//! load balancers created next stay `provisioning`, every one or one name's),
//! `start_outage` (the body of POST /v1/outages), `stop_outages` (true), `set_quota` (`name`, `limit`),
//! `reclaim` (the body of POST /v1/spot/reclaim), `hang` (the body of POST /v1/hangs), `stop_hangs` (true),
//! `clear_faults` (true) or `wait` (true). The whole file is checked before the first step runs. At the end —
//! and on Ctrl-C — what the scenario changed is put back (faults, data-plane faults, rate limits and outages it
//! added are removed, machines it hung resume, quotas and load balancers' provisioning get their old settings),
//! unless `--keep`.
//!
//! `vars: {limit: 2}` declares variables with their defaults; a step uses one as `"${limit}"` (the value
//! itself) or inside a string (`at: "${duration}s"`), and `--set limit=3` overrides it (see [`parse`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use fakecloud_api::{
    Client, CreateFaultRuleRequest, CreateLbFaultRuleRequest, LbProvisioning, QuotaName, RateLimitPreset,
    ReclaimRequest, SetLbProvisioningRequest, SetRateLimitRequest, StartHangRequest, StartOutageRequest,
};
use serde::Deserialize;
use serde_json::Value;

use fakecloud_emulator::error::ApiError;
use fakecloud_emulator::faults::check;
use fakecloud_emulator::store;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    /// Names the steps use as `${name}`, with their defaults; `--set name=value` overrides one.
    #[serde(default)]
    pub vars: BTreeMap<String, Value>,
    pub steps: Vec<Step>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// Offset from the start, e.g. `5s`, `1m30s`.
    pub at: String,
    #[serde(default)]
    add_fault: Option<CreateFaultRuleRequest>,
    #[serde(default)]
    remove_fault: Option<String>,
    #[serde(default)]
    add_lb_fault: Option<CreateLbFaultRuleRequest>,
    #[serde(default)]
    remove_lb_fault: Option<String>,
    #[serde(default)]
    set_rate_limit: Option<NamedLimit>,
    #[serde(default)]
    remove_rate_limit: Option<String>,
    #[serde(default)]
    rate_limit_preset: Option<RateLimitPreset>,
    #[serde(default)]
    clear_rate_limit_presets: Option<bool>,
    #[serde(default)]
    lb_provisioning: Option<SetLbProvisioningRequest>,
    #[serde(default)]
    start_outage: Option<StartOutageRequest>,
    #[serde(default)]
    stop_outages: Option<bool>,
    #[serde(default)]
    set_quota: Option<QuotaStep>,
    #[serde(default)]
    reclaim: Option<ReclaimRequest>,
    #[serde(default)]
    hang: Option<StartHangRequest>,
    #[serde(default)]
    stop_hangs: Option<bool>,
    #[serde(default)]
    clear_faults: Option<bool>,
    #[serde(default)]
    wait: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NamedLimit {
    id: String,
    #[serde(flatten)]
    limit: SetRateLimitRequest,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QuotaStep {
    name: QuotaName,
    limit: u32,
}

/// One checked step.
enum Action {
    AddFault(Box<CreateFaultRuleRequest>),
    RemoveFault(String),
    AddLbFault(Box<CreateLbFaultRuleRequest>),
    RemoveLbFault(String),
    SetRateLimit(String, SetRateLimitRequest),
    RemoveRateLimit(String),
    RateLimitPreset(RateLimitPreset),
    ClearRateLimitPresets,
    LbProvisioning(SetLbProvisioningRequest),
    StartOutage(StartOutageRequest),
    StopOutages,
    SetQuota(QuotaName, u32),
    Reclaim(ReclaimRequest),
    Hang(StartHangRequest),
    StopHangs,
    ClearFaults,
    Wait,
}

impl Step {
    fn check(self, n: usize) -> Result<(Duration, Action)> {
        let at = humantime::parse_duration(&self.at)
            .with_context(|| format!("steps[{n}].at: {:?} is not a duration such as 5s", self.at))?;
        let mut actions = Vec::new();
        if let Some(f) = self.add_fault {
            actions.push(Action::AddFault(Box::new(f)));
        }
        if let Some(id) = self.remove_fault {
            actions.push(Action::RemoveFault(id));
        }
        if let Some(f) = self.add_lb_fault {
            actions.push(Action::AddLbFault(Box::new(f)));
        }
        if let Some(id) = self.remove_lb_fault {
            actions.push(Action::RemoveLbFault(id));
        }
        if let Some(l) = self.set_rate_limit {
            actions.push(Action::SetRateLimit(l.id, l.limit));
        }
        if let Some(id) = self.remove_rate_limit {
            actions.push(Action::RemoveRateLimit(id));
        }
        if let Some(p) = self.rate_limit_preset {
            actions.push(Action::RateLimitPreset(p));
        }
        if self.clear_rate_limit_presets == Some(true) {
            actions.push(Action::ClearRateLimitPresets);
        }
        if let Some(p) = self.lb_provisioning {
            actions.push(Action::LbProvisioning(p));
        }
        if let Some(o) = self.start_outage {
            actions.push(Action::StartOutage(o));
        }
        if self.stop_outages == Some(true) {
            actions.push(Action::StopOutages);
        }
        if let Some(q) = self.set_quota {
            actions.push(Action::SetQuota(q.name, q.limit));
        }
        if let Some(r) = self.reclaim {
            actions.push(Action::Reclaim(r));
        }
        if let Some(h) = self.hang {
            actions.push(Action::Hang(h));
        }
        if self.stop_hangs == Some(true) {
            actions.push(Action::StopHangs);
        }
        if self.clear_faults == Some(true) {
            actions.push(Action::ClearFaults);
        }
        if self.wait == Some(true) {
            actions.push(Action::Wait);
        }
        match actions.len() {
            1 => Ok((at, actions.remove(0))),
            0 => bail!("steps[{n}] (at {}) has no action", self.at),
            k => bail!("steps[{n}] (at {}) has {k} actions; give one per step", self.at),
        }
    }
}

impl Action {
    /// The checks the emulator makes of the step's request, made before the first step runs: a bad step 5 is
    /// found before step 1 has changed anything. `zones`: the region's, once known.
    fn check(&self, operations: &[String], zones: Option<&[&str]>) -> std::result::Result<(), ApiError> {
        match self {
            Action::AddFault(req) => check::rule(req, operations),
            Action::AddLbFault(req) => check::lb_rule(req),
            Action::SetRateLimit(id, limit) => check::limit(id, limit, operations),
            Action::StartOutage(req) => check::outage(req, zones),
            Action::Reclaim(req) => store::instances::check_reclaim(req).map(drop),
            Action::Hang(req) => store::hangs::check(req).map(drop),
            Action::LbProvisioning(req) => store::lb_provisioning::check(req),
            Action::RemoveFault(id) | Action::RemoveLbFault(id) | Action::RemoveRateLimit(id) => {
                fakecloud_emulator::validate::NAME.check("id", id)
            }
            // A preset's limits are checked where they are defined (faults::presets' tests).
            Action::SetQuota(..)
            | Action::RateLimitPreset(_)
            | Action::ClearRateLimitPresets
            | Action::StopOutages
            | Action::StopHangs
            | Action::ClearFaults
            | Action::Wait => Ok(()),
        }
    }
}

/// The longest a scenario may stretch or shrink its times: `--time-scale` between its inverse and it.
const TIME_SCALE_MAX: f64 = 1000.0;

/// A checked scenario: its name and its steps in time order.
pub struct Plan {
    pub name: String,
    steps: Vec<(Duration, Action)>,
}

/// Parse and check a scenario file without running it; `sets` are `--set NAME=VALUE`s.
pub fn load(path: &Path, sets: &[String]) -> Result<Plan> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let scenario = parse(&text, sets).map_err(|e| anyhow::anyhow!("{}: {e:#}", path.display()))?;
    if scenario.steps.is_empty() {
        bail!("{}: no steps", path.display());
    }
    let operations = fakecloud_emulator::cloud::operation_names();
    let mut steps = Vec::new();
    for (n, step) in scenario.steps.into_iter().enumerate() {
        let (at, action) = step.check(n)?;
        if let Some((prev, _)) = steps.last()
            && at < *prev
        {
            bail!("steps[{n}].at: {at:?} is before the step above it; list steps in time order");
        }
        action
            .check(&operations, None)
            .map_err(|e| anyhow::anyhow!("{}: steps[{n}] (at {at:?}): {}", path.display(), e.message))?;
        steps.push((at, action));
    }
    let name =
        scenario.name.unwrap_or_else(|| path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default());
    Ok(Plan { name, steps })
}

/// The scenario in `text`, each `${name}` in its steps replaced by the value `--set` gives it or its default
/// under `vars`. A string that is just `${name}` takes the value itself (a number stays a number); inside a
/// longer string (`"${duration}s"`) the value is written in. Replaced in the parsed document, never in the
/// text, so a value cannot add YAML of its own.
fn parse(text: &str, sets: &[String]) -> Result<Scenario> {
    if sets.is_empty() && !text.contains("${") {
        // Without variables, straight from the text: serde's errors keep their line and column.
        return Ok(serde_saphyr::from_str(text)?);
    }
    let mut doc: Value = serde_saphyr::from_str(text)?;
    let declared: BTreeMap<String, Value> = match doc.get("vars") {
        Some(v) => serde_json::from_value(v.clone()).context("vars: give a map of names to default values")?,
        None => BTreeMap::new(),
    };
    let mut values = declared.clone();
    for set in sets {
        let (name, value) = set.split_once('=').with_context(|| format!("--set {set:?}: give NAME=VALUE"))?;
        if !declared.contains_key(name) {
            let names: Vec<&str> = declared.keys().map(String::as_str).collect();
            let known = if names.is_empty() { "none".to_string() } else { names.join(", ") };
            bail!("--set {name}: the scenario has no such variable (its vars: {known})");
        }
        // A number or a boolean as YAML reads it (`5`, `0.5`, `true`); anything else is the string as given,
        // never a list or a map of YAML's making.
        let typed = match serde_saphyr::from_str::<Value>(value) {
            Ok(v @ (Value::Number(_) | Value::Bool(_))) => v,
            _ => Value::String(value.to_string()),
        };
        values.insert(name.to_string(), typed);
    }
    if let Some(steps) = doc.get_mut("steps") {
        substitute(steps, &values, "steps")?;
    }
    // With the path of what does not fit: `steps[0].at: invalid type ...`.
    serde_path_to_error::deserialize(doc).map_err(|e| anyhow::anyhow!("{}: {}", e.path(), e.inner()))
}

/// Replace every `${name}` under `v` (at `path`, for errors) with its value.
fn substitute(v: &mut Value, values: &BTreeMap<String, Value>, path: &str) -> Result<()> {
    match v {
        Value::String(s) => {
            let value_of = |name: &str| {
                values.get(name).with_context(|| format!("{path}: ${{{name}}} is not declared under vars"))
            };
            if let Some(name) = s.strip_prefix("${").and_then(|r| r.strip_suffix('}'))
                && !name.contains(['$', '{', '}'])
            {
                *v = value_of(name)?.clone();
                return Ok(());
            }
            let mut out = String::new();
            let mut rest = s.as_str();
            while let Some(start) = rest.find("${") {
                let end = rest[start..].find('}').with_context(|| format!("{path}: an unclosed ${{ in {s:?}"))?;
                out.push_str(&rest[..start]);
                match value_of(&rest[start + 2..start + end])? {
                    Value::String(text) => out.push_str(text),
                    other => out.push_str(&other.to_string()),
                }
                rest = &rest[start + end + 1..];
            }
            out.push_str(rest);
            *s = out;
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                substitute(item, values, &format!("{path}[{i}]"))?;
            }
        }
        Value::Object(fields) => {
            for (k, field) in fields.iter_mut() {
                substitute(field, values, &format!("{path}.{k}"))?;
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
    Ok(())
}

/// What the scenario changed, to put back.
#[derive(Default)]
struct Undo {
    faults: Vec<String>,
    lb_faults: Vec<String>,
    limits: Vec<String>,
    outages: Vec<String>,
    hangs: Vec<String>,
    quotas: Vec<(QuotaName, u32)>,
    /// The provisioning settings from before the scenario's first change to them.
    lb_provisioning: Option<LbProvisioning>,
}

impl Undo {
    async fn restore(&self, client: &Client) {
        for id in &self.faults {
            let _ = client.delete_fault(id).await;
        }
        for id in &self.lb_faults {
            let _ = client.delete_lb_fault(id).await;
        }
        for id in &self.limits {
            let _ = client.delete_rate_limit(id).await;
        }
        for id in &self.outages {
            let _ = client.stop_outage(id).await;
        }
        for id in &self.hangs {
            let _ = client.stop_hang(id).await;
        }
        for (q, limit) in self.quotas.iter().rev() {
            let _ = client.set_quota(*q, *limit).await;
        }
        if let Some(old) = &self.lb_provisioning {
            let _ = client.reset_lb_provisioning(None).await;
            let every = old.seconds.map(|seconds| SetLbProvisioningRequest { seconds, load_balancer: None });
            let named = old.load_balancers.iter().map(|(name, seconds)| SetLbProvisioningRequest {
                seconds: *seconds,
                load_balancer: Some(name.clone()),
            });
            for req in every.into_iter().chain(named) {
                let _ = client.set_lb_provisioning(&req).await;
            }
        }
    }
}

async fn step(client: &Client, action: &Action, undo: &mut Undo) -> Result<String> {
    Ok(match action {
        Action::AddFault(req) => {
            let r = client.add_fault(req).await?;
            undo.faults.push(r.id.clone());
            format!("added fault rule {}", r.id)
        }
        Action::RemoveFault(id) => {
            client.delete_fault(id).await?;
            undo.faults.retain(|f| f != id);
            format!("removed fault rule {id}")
        }
        Action::AddLbFault(req) => {
            let r = client.add_lb_fault(req).await?;
            undo.lb_faults.push(r.id.clone());
            format!("added data-plane fault rule {} ({})", r.id, r.action.name())
        }
        Action::RemoveLbFault(id) => {
            client.delete_lb_fault(id).await?;
            undo.lb_faults.retain(|f| f != id);
            format!("removed data-plane fault rule {id}")
        }
        Action::SetRateLimit(id, limit) => {
            client.set_rate_limit(id, limit).await?;
            undo.limits.push(id.clone());
            let refill = match (limit.window_seconds, limit.refill_per_second) {
                (Some(w), _) => format!("per {w} s window"),
                (None, r) => format!("{}/s", r.unwrap_or_default()),
            };
            format!("rate limit {id}: {} calls, {refill} on {:?}", limit.capacity, limit.scope)
        }
        Action::RemoveRateLimit(id) => {
            client.delete_rate_limit(id).await?;
            undo.limits.retain(|l| l != id);
            format!("removed rate limit {id}")
        }
        Action::RateLimitPreset(preset) => {
            let installed = client.install_rate_limit_preset(*preset).await?.items;
            let ids: Vec<String> = installed.into_iter().map(|l| l.id).collect();
            let said = format!("rate limit preset {preset}: {}", ids.join(", "));
            undo.limits.extend(ids);
            said
        }
        Action::ClearRateLimitPresets => {
            let removed = client.clear_rate_limit_presets().await?.items;
            format!("cleared rate limit presets ({} limits)", removed.len())
        }
        Action::LbProvisioning(req) => {
            if undo.lb_provisioning.is_none() {
                undo.lb_provisioning = Some(client.lb_provisioning().await?);
            }
            client.set_lb_provisioning(req).await?;
            let whom =
                req.load_balancer.as_deref().map_or("every load balancer".into(), |n| format!("load balancer {n}"));
            format!("provisioning of {whom}: {} s", req.seconds)
        }
        Action::StartOutage(req) => {
            let o = client.start_outage(req).await?;
            undo.outages.push(o.id.clone());
            format!("started {} ({:?})", o.id, o.scope)
        }
        Action::StopOutages => {
            let mut n = 0;
            for o in client.list_outages().await?.items {
                client.stop_outage(&o.id).await?;
                n += 1;
            }
            format!("stopped {n} outages")
        }
        Action::SetQuota(q, limit) => {
            let old = client.get_quota(*q).await?.limit;
            client.set_quota(*q, *limit).await?;
            undo.quotas.push((*q, old));
            format!("quota {q}: {old} -> {limit}")
        }
        Action::Reclaim(req) => {
            let r = client.reclaim_spot(req).await?;
            let names: Vec<&str> = r.items.iter().map(|i| i.name.as_str()).collect();
            format!("reclaiming {} spot instances: {}", names.len(), names.join(", "))
        }
        Action::Hang(req) => {
            let hung = client.start_hang(req).await?.items;
            undo.hangs.extend(hung.iter().map(|h| h.instance_id.clone()));
            let names: Vec<&str> = hung.iter().map(|h| h.name.as_str()).collect();
            format!("hung {} machines: {}", names.len(), names.join(", "))
        }
        Action::StopHangs => {
            let mut n = 0;
            for h in client.list_hangs().await?.items {
                client.stop_hang(&h.instance_id).await?;
                n += 1;
            }
            undo.hangs.clear();
            format!("resumed {n} hung machines")
        }
        Action::ClearFaults => {
            client.clear_faults().await?;
            "cleared all faults, rate limits and outages".to_string()
        }
        Action::Wait => "waited".to_string(),
    })
}

/// Set in the process `--background` starts: it says [`READY`] on its standard output once the steps at 0s are
/// applied.
const READY_VAR: &str = "FAKECLOUD_SCENARIO_READY";
const READY: &str = "ready";

/// `scenario run --background`: this command again without the flag, in a process of its own, returning once it
/// says its steps at 0s are applied. Its progress and its end go to our standard error, as a foreground run's.
pub fn in_background(plan: &Plan) -> Result<()> {
    use std::io::BufRead as _;
    let args = std::env::args_os().skip(1).filter(|a| a != "--background");
    let mut child = std::process::Command::new(std::env::current_exe().context("finding the fakecloud binary")?)
        .args(args)
        .env(READY_VAR, "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("starting the scenario's process")?;
    let mut line = String::new();
    // Bounded by the run itself: it says ready after its first steps' calls, or it ends (their timeouts).
    if let Some(out) = child.stdout.take() {
        std::io::BufReader::new(out).read_line(&mut line).context("reading the scenario's process")?;
    }
    if line.trim() != READY {
        let status = child.wait().context("waiting for the scenario's process")?;
        bail!("scenario {}: stopped before its steps at 0s were applied ({status})", plan.name);
    }
    eprintln!(
        "scenario {}: runs on in the background (pid {}); it restores at its end, or on `kill -INT {}`",
        plan.name,
        child.id(),
        child.id()
    );
    Ok(())
}

/// Run the plan, printing each step as it happens; restore on the way out unless `keep`. `time_scale` stretches
/// or compresses the step times (0.1 runs ten times faster); durations inside the steps are not changed.
pub async fn run(client: &Client, plan: &Plan, keep: bool, time_scale: f64) -> Result<()> {
    if !(1.0 / TIME_SCALE_MAX..=TIME_SCALE_MAX).contains(&time_scale) {
        bail!("--time-scale must be between {} and {TIME_SCALE_MAX} (got {time_scale})", 1.0 / TIME_SCALE_MAX);
    }
    let mut times = Vec::with_capacity(plan.steps.len());
    for (at, _) in &plan.steps {
        times.push(
            Duration::try_from_secs_f64(at.as_secs_f64() * time_scale)
                .with_context(|| format!("--time-scale {time_scale} makes the step at {at:?} too far away"))?,
        );
    }
    // The zones are the emulator's: an outage's zone is checked against them before anything runs.
    let region = client.region().await.context("reading the region (its zones) before the first step")?;
    let zones: Vec<&str> = region.zones.iter().map(|z| z.name.as_str()).collect();
    for (n, (at, action)) in plan.steps.iter().enumerate() {
        // Only the zone is new here: everything else was checked when the file was loaded.
        if let Action::StartOutage(req) = action
            && let Err(e) = check::outage(req, Some(&zones))
        {
            bail!("{}: steps[{n}] (at {at:?}): {}", plan.name, e.message);
        }
    }
    let span = times.last().copied().unwrap_or_default();
    eprintln!("scenario {}: {} steps over {span:?}", plan.name, plan.steps.len());
    let start = Instant::now();
    let mut undo = Undo::default();
    // A `--background` run's caller waits for this, once the steps at 0s are applied.
    let mut tell_ready = std::env::var_os(READY_VAR).is_some();
    let ready = || {
        use std::io::Write as _;
        let mut out = std::io::stdout();
        // The caller may be gone (killed): the run goes on regardless.
        let _ = writeln!(out, "{READY}").and_then(|()| out.flush());
    };
    // One Ctrl-C listener for the whole run, polled first at every step (`biased`): registered before the first
    // step, it keeps a Ctrl-C that comes while a step's call is in flight, which a listener made anew at each step
    // missed (the run then held on to its changes until its end).
    let mut interrupt = std::pin::pin!(tokio::signal::ctrl_c());
    let result = async {
        for (n, ((at, action), scaled)) in plan.steps.iter().zip(&times).enumerate() {
            if tell_ready && !scaled.is_zero() {
                ready();
                tell_ready = false;
            }
            tokio::select! {
                biased;
                _ = &mut interrupt => bail!("interrupted before step {}", n + 1),
                _ = tokio::time::sleep(scaled.saturating_sub(start.elapsed())) => {}
            }
            let said = step(client, action, &mut undo).await.with_context(|| format!("step {} (at {at:?})", n + 1))?;
            eprintln!("[{:>7.1}s] {}/{} {said}", start.elapsed().as_secs_f64(), n + 1, plan.steps.len());
        }
        if tell_ready {
            ready();
        }
        Ok(())
    }
    .await;
    if !keep {
        undo.restore(client).await;
        eprintln!("scenario {}: restored what it changed (use --keep to leave it)", plan.name);
    }
    result
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const FILE: &str = "vars: {limit: 2, duration: 60, zone: local-1a}\nsteps:\n  - at: 0s\n    \
                        set_quota: {name: routes-per-route-table, limit: \"${limit}\"}\n  - at: 1s\n    \
                        start_outage: {scope: zone, zone: \"${zone}\"}\n  - at: \"${duration}s\"\n    wait: true\n";

    fn sets(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn variables_take_their_defaults_or_the_set_values_typed_as_yaml_types_them() {
        let s = parse(FILE, &[]).unwrap();
        assert_eq!(s.steps[0].set_quota.as_ref().unwrap().limit, 2);
        assert_eq!(s.steps[2].at, "60s");
        let s = parse(FILE, &sets(&["limit=7", "duration=1m30", "zone=local-1b"])).unwrap();
        assert_eq!(s.steps[0].set_quota.as_ref().unwrap().limit, 7, "a number stays a number");
        assert_eq!(s.steps[1].start_outage.as_ref().unwrap().zone.as_deref(), Some("local-1b"));
        assert_eq!(s.steps[2].at, "1m30s", "written into a longer string");
    }

    #[test]
    fn unknown_variables_and_misfits_are_named() {
        let e = parse(FILE, &sets(&["limt=3"])).unwrap_err().to_string();
        assert!(e.contains("limt") && e.contains("duration, limit, zone"), "{e}");
        let e = parse(FILE, &sets(&["limit"])).unwrap_err().to_string();
        assert!(e.contains("NAME=VALUE"), "{e}");
        let e = parse("steps:\n  - at: \"${t}s\"\n    wait: true\n", &[]).unwrap_err().to_string();
        assert!(e.contains("steps[0].at") && e.contains("${t}"), "{e}");
        let e = parse("vars: {t: 5}\nsteps:\n  - at: \"${t}\"\n    wait: true\n", &[]).unwrap_err().to_string();
        assert!(e.starts_with("steps[0].at: invalid type"), "{e}");
        // A value is a value, never more YAML: this name stays one string.
        let s = parse(FILE, &sets(&["zone=a, b: {c: d}"])).unwrap();
        assert_eq!(s.steps[1].start_outage.as_ref().unwrap().zone.as_deref(), Some("a, b: {c: d}"));
    }
}

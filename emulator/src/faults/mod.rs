//! Fault injection: what the emulator does to a call before (or after) it runs. Checked for every user call,
//! in this order: outages, rate limits, then the ordered fault rules (the first rule whose match and trigger
//! both fire wins). Admin calls are never faulted, so faults can always be managed.
//!
//! Data-plane rules ([`lb_rules`]) are the load balancers' counterpart: the data plane asks about each new
//! connection and each health check, and the first rule that fires wins.
//!
//! Everything is persisted (table `faults`), so it survives a restart; counters (`matched`, `injected`, skip
//! and times) start again from zero after one, unless emulators share the database (see [`shared`]).

mod call;
pub mod effects;
mod lb_rules;
mod outages;
mod presets;
mod rate_limits;
mod rules;
mod shared;
mod spot_random;
mod trigger;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use fakecloud_api::{
    CreateFaultRuleRequest, CreateLbFaultRuleRequest, FaultRule, LbFaultRule, Outage, PresetLimit, QuotaName,
    QuotaRefusal, RateLimit, RateLimitPreset, RateLimitPresetInfo, SetRateLimitRequest, SpotRandom, SpotRandomRequest,
    StartOutageRequest,
};
use tokio::sync::{Mutex, RwLock, watch};

pub use self::call::{Call, Subject, Verdict, service_of};
use self::lb_rules::ActiveLbRule;
pub use self::lb_rules::{LbEvent, LbFired, LbSubject, LbVerdict};
use self::outages::ActiveOutage;
use self::rate_limits::ActiveLimit;
use self::rules::ActiveRule;
use self::spot_random::ActiveSpotRandom;
use crate::db::backend::Backend;
use crate::db::{Db, now_ms};
use crate::error::{ApiError, Result};

pub struct FaultEngine {
    db: Db,
    seed: u64,
    operations: Vec<String>,
    /// Whether other emulators may share the database (PostgreSQL), and the faults' generation in force here.
    shared: bool,
    generation: AtomicI64,
    rules: RwLock<Vec<Arc<ActiveRule>>>,
    lb_rules: RwLock<Vec<Arc<ActiveLbRule>>>,
    /// Bumped when the data-plane rules change, so health checkers waiting for their interval look again.
    lb_rules_changed: watch::Sender<u64>,
    limits: RwLock<Vec<Arc<ActiveLimit>>>,
    outages: RwLock<Vec<ActiveOutage>>,
    /// Serialises changes, so the database and memory change together.
    edit: Mutex<()>,
    spot_random: RwLock<Option<Arc<ActiveSpotRandom>>>,
    /// Eventual consistency, by ID: until when reads lag, and the version they see (`None`: not there yet).
    hidden: std::sync::Mutex<HashMap<String, (i64, Option<serde_json::Value>)>>,
    /// Shared: the latest end of a lag in the database (read with the generation), so that a read looks there
    /// only while something may lag.
    lag_until: AtomicI64,
}

/// The right to change the faults: this emulator's lock and, shared, the database's (see
/// [`FaultEngine::editing`]).
struct Editing<'a> {
    _here: tokio::sync::MutexGuard<'a, ()>,
    _everywhere: Option<sqlx::Transaction<'static, sqlx::Any>>,
}

impl std::fmt::Debug for FaultEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultEngine").field("seed", &self.seed).finish_non_exhaustive()
    }
}

impl FaultEngine {
    /// Load the persisted faults. `operations` are the API's operation names (for validating rule matches).
    pub async fn load(db: Db, seed: u64, operations: Vec<String>) -> Result<Self> {
        let rows = stored(&db).await?;
        let shared = db.backend() == Backend::Postgres;
        let engine = Self {
            db,
            seed,
            operations,
            shared,
            generation: AtomicI64::new(UNKNOWN),
            rules: RwLock::default(),
            lb_rules: RwLock::default(),
            lb_rules_changed: watch::Sender::new(0),
            limits: RwLock::default(),
            outages: RwLock::default(),
            edit: Mutex::default(),
            hidden: std::sync::Mutex::default(),
            lag_until: AtomicI64::new(0),
            spot_random: RwLock::default(),
        };
        engine.put_in_force(&rows).await;
        Ok(engine)
    }

    /// Put the stored faults in force. One whose spec is unchanged is kept as it is, with its state (a rule's
    /// counts, a rate limit's bucket, random spot reclamation's generator).
    async fn put_in_force(&self, rows: &[(String, String, String)]) {
        let seed = self.seed;
        let (old_rules, old_lb_rules, old_limits) =
            (self.rules.read().await.clone(), self.lb_rules.read().await.clone(), self.limits.read().await.clone());
        let old_spot: Vec<_> = self.spot_random.read().await.iter().cloned().collect();
        let (mut rules, mut lb_rules, mut limits, mut outages) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut spot = None;
        for (kind, id, spec) in rows {
            let restored = match kind.as_str() {
                "rule" => {
                    kept(&old_rules, |r| r.id == *id && r.stored() == *spec, || ActiveRule::restore(id, spec, seed))
                        .map(|r| rules.push(r))
                }
                "lb_rule" => kept(
                    &old_lb_rules,
                    |r| r.id == *id && r.stored() == *spec,
                    || ActiveLbRule::restore(id, spec, seed),
                )
                .map(|r| lb_rules.push(r)),
                "rate_limit" => {
                    kept(&old_limits, |l| l.id == *id && l.stored() == *spec, || ActiveLimit::restore(id, spec))
                        .map(|l| limits.push(l))
                }
                "outage" => ActiveOutage::restore(id, spec).map(|o| outages.push(o)),
                "spot_random" => kept(&old_spot, |s| s.stored() == spec, || ActiveSpotRandom::restore(spec, seed))
                    .map(|s| spot = Some(s)),
                _ => Ok(()),
            };
            if let Err(e) = restored {
                tracing::warn!(%kind, %id, error = %e, "skipping a stored fault that no longer parses");
            }
        }
        let lb_changed = lb_rules.len() != old_lb_rules.len()
            || lb_rules.iter().zip(&old_lb_rules).any(|(new, old)| !Arc::ptr_eq(new, old));
        *self.rules.write().await = rules;
        *self.lb_rules.write().await = lb_rules;
        *self.limits.write().await = limits;
        *self.outages.write().await = outages;
        *self.spot_random.write().await = spot;
        if lb_changed {
            self.lb_rules_changed.send_modify(|n| *n += 1);
        }
    }

    /// Several emulators on one PostgreSQL database are one cloud, so a fault set through one holds on all:
    /// each change bumps a generation in the database (in [`Self::persist`] and [`Self::forget`]), and an
    /// emulator that reads a newer one puts the stored faults in force again. One read per user call (the
    /// gatekeeper's, which what the call's handler asks of the engine relies on), per admin listing and per
    /// data-plane judgement; none on SQLite, whose file has one emulator. The same read brings the end of the
    /// latest eventual-consistency lag (see [`Self::lagging_now`]).
    pub async fn sync(&self) {
        self.sync_on(self.db.reader()).await
    }

    /// [`Self::sync`], its generation read on `pool`'s connections.
    async fn sync_on(&self, pool: &sqlx::AnyPool) {
        if self.shared && self.read_generation(pool).await.is_some_and(|g| g != self.generation.load(Ordering::Acquire))
        {
            let _edit = self.edit.lock().await;
            self.sync_locked().await;
        }
    }

    /// [`Self::sync`] with the edit lock held.
    async fn sync_locked(&self) {
        if !self.shared {
            return;
        }
        let Some(generation) = self.read_generation(self.db.reader()).await else { return };
        if generation == self.generation.load(Ordering::Acquire) {
            return;
        }
        // Read after the generation, so what it counts is in the rows (a change is written before its bump).
        match stored(&self.db).await {
            Ok(rows) => {
                self.put_in_force(&rows).await;
                self.generation.store(generation, Ordering::Release);
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the faults another emulator changed; trying again"),
        }
    }

    /// The faults' generation, read on `pool`; it notes the latest lag's end on the way.
    async fn read_generation(&self, pool: &sqlx::AnyPool) -> Option<i64> {
        let read: std::result::Result<Vec<(String, i64)>, _> =
            sqlx::query_as("SELECT key, n FROM counters WHERE key IN ($1, $2)")
                .bind(GENERATION)
                .bind(shared::LAG_UNTIL)
                .fetch_all(pool)
                .await;
        match read {
            Ok(rows) => {
                let counter = |key: &str| rows.iter().find(|(k, _)| k == key).map_or(0, |(_, n)| *n);
                self.lag_until.fetch_max(counter(shared::LAG_UNTIL), Ordering::AcqRel);
                Some(counter(GENERATION))
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the faults' generation; judging by the faults known");
                None
            }
        }
    }

    /// The edit lock, taken with the faults up to date: an edit starts from what every emulator set. Shared,
    /// it is the database's too (issue #47): two edits through two replicas at once are one after the other, so
    /// a rule's name is taken once and one preset's limits replace the other's.
    async fn editing(&self) -> Result<Editing<'_>> {
        let here = self.edit.lock().await;
        let everywhere = match self.shared {
            true => Some(crate::db::postgres::hold_faults_lock(self.db.reader()).await?),
            false => None,
        };
        self.sync_locked().await;
        Ok(Editing { _here: here, _everywhere: everywhere })
    }

    /// Judge a call. Cheap when nothing is configured.
    /// Whether judging needs the call's [`Subject`]: a rule matches on zone, name or tag, or a zone is down.
    /// Describing a call costs a look-up, so it is done only then.
    pub async fn wants_subject(&self) -> bool {
        let now = now_ms();
        self.rules.read().await.iter().any(|r| r.wants_subject())
            || self.outages.read().await.iter().any(|o| o.active(now) && o.zone().is_some())
    }

    /// The verdict on a call, and the headers every answer to it carries whatever the verdict (the remaining
    /// counts of the rate limits it went through).
    pub async fn judge(&self, call: &Call<'_>) -> (Verdict, Vec<(String, String)>) {
        let mut headers = Vec::new();
        if call.admin_only {
            return (Verdict::Pass, headers);
        }
        let now = now_ms();
        {
            let outages = self.outages.read().await;
            if !outages.is_empty()
                && let Some(v) = outages::judge(&outages, call, now)
            {
                return (v, headers);
            }
        }
        {
            let limits = self.limits.read().await;
            let shared = self.shared.then_some(&self.db);
            for l in limits.iter() {
                if let Some(v) = l.judge(call, &mut headers, shared).await {
                    return (v, headers);
                }
            }
        }
        let rules = self.rules.read().await;
        let shared = self.shared.then_some(&self.db);
        for r in rules.iter() {
            if let Some(v) = r.judge(call, now, shared).await {
                return (v, headers);
            }
        }
        (Verdict::Pass, headers)
    }

    /// Eventual consistency: until `for_` has passed, reads of `id` see `previous` — its version from before the
    /// write — or, for a resource the write created (`None`), nothing at all.
    /// Shared, the lag is a row every emulator reads (see [`shared`]).
    pub async fn lag(&self, id: &str, previous: Option<serde_json::Value>, for_: Duration) {
        let now = now_ms();
        let until = now.saturating_add(crate::db::ms(for_));
        if self.shared {
            match shared::lag(&self.db, id, previous.as_ref(), until, now).await {
                Ok(()) => {
                    self.lag_until.fetch_max(until, Ordering::AcqRel);
                }
                Err(e) => tracing::warn!(%id, error = %e, "cannot record the lag in the database; lagging here only"),
            }
        }
        self.hidden.lock().unwrap_or_else(|p| p.into_inner()).insert(id.to_string(), (until, previous));
    }

    /// What reads must see instead of the truth right now, by ID (expired entries are dropped). Shared, what
    /// the database says while a lag it knows of lasts; this emulator's own when it cannot be read.
    pub async fn lagging_now(&self) -> HashMap<String, Option<serde_json::Value>> {
        let now = now_ms();
        if self.shared && now < self.lag_until.load(Ordering::Acquire) {
            match shared::lagging(&self.db, now).await {
                Ok(lagging) => return lagging,
                Err(e) => tracing::warn!(error = %e, "cannot read the lags in the database; showing this emulator's"),
            }
        }
        let mut hidden = self.hidden.lock().unwrap_or_else(|p| p.into_inner());
        hidden.retain(|_, (until, _)| *until > now);
        hidden.iter().map(|(id, (_, prev))| (id.clone(), prev.clone())).collect()
    }

    /// Zones in an outage now: their instances are reported unreachable.
    pub async fn dark_zones(&self) -> Vec<String> {
        let now = now_ms();
        self.outages
            .read()
            .await
            .iter()
            .filter(|o| o.active(now))
            .filter_map(|o| o.zone().map(str::to_string))
            .collect()
    }

    async fn persist(&self, kind: &str, id: &str, position: i64, spec: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO faults (kind, id, position, spec, created_at) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT(kind, id) DO UPDATE SET position = $3, spec = $4",
        )
        .bind(kind)
        .bind(id)
        .bind(position)
        .bind(spec)
        .bind(now_ms())
        .execute(self.db.writer())
        .await?;
        self.bump().await
    }

    /// Tell the other emulators on this database that the faults changed (see [`Self::sync`]).
    async fn bump(&self) -> Result<()> {
        sqlx::query("INSERT INTO counters (key, n) VALUES ($1, 1) ON CONFLICT(key) DO UPDATE SET n = counters.n + 1")
            .bind(GENERATION)
            .execute(self.db.writer())
            .await?;
        Ok(())
    }

    /// A new `<prefix>-<n>` ID for a fault of `kind`. The numbers come from a counter kept in the database, so
    /// an ID is never handed out twice — not after its fault is deleted, not after a restart — and a client
    /// holding an old ID cannot stop something else with it. (A database from before the counter starts it
    /// after the faults it has; names in use, such as a rule named by its creator, are skipped.)
    async fn new_id(&self, kind: &str, prefix: &str, in_use: impl Fn(&str) -> bool) -> Result<String> {
        loop {
            let n: i64 = sqlx::query_scalar(
                "INSERT INTO counters (key, n) VALUES ($1, (SELECT COUNT(*) FROM faults WHERE kind = $2) + 1) \
                 ON CONFLICT(key) DO UPDATE SET n = counters.n + 1 RETURNING n",
            )
            .bind(format!("{kind}_ids"))
            .bind(kind)
            .fetch_one(self.db.writer())
            .await?;
            let id = format!("{prefix}-{n}");
            if !in_use(&id) {
                return Ok(id);
            }
        }
    }

    /// The ID of a new rule of `kind`: the one `asked` for, unless `taken`, or a new `<prefix>-<n>`.
    async fn rule_id(
        &self,
        kind: &str,
        prefix: &str,
        asked: Option<&str>,
        taken: impl Fn(&str) -> bool,
    ) -> Result<String> {
        let id = match asked {
            Some(id) => id.to_string(),
            None => self.new_id(kind, prefix, &taken).await?,
        };
        if taken(&id) {
            return Err(ApiError::conflict(
                fakecloud_api::codes::FAULT_EXISTS,
                format!("a fault rule named {id:?} exists"),
            ));
        }
        Ok(id)
    }

    async fn forget(&self, kind: &str, id: &str) -> Result<()> {
        sqlx::query("DELETE FROM faults WHERE kind = $1 AND id = $2")
            .bind(kind)
            .bind(id)
            .execute(self.db.writer())
            .await?;
        if kind == "rate_limit" {
            self.empty_buckets(Some(id)).await?;
        }
        if self.shared && kind == shared::RULE {
            shared::forget_counts(&self.db, kind, Some(id)).await?;
        }
        self.bump().await
    }

    /// A limit set anew, or gone, starts again with full buckets and no refusals: the shared ones are its
    /// rows (see `rate_limits` and [`shared`]), `None` for every limit's.
    async fn empty_buckets(&self, limit: Option<&str>) -> Result<()> {
        if self.shared {
            sqlx::query("DELETE FROM rate_buckets WHERE $1 IS NULL OR limit_id = $1")
                .bind(limit)
                .execute(self.db.writer())
                .await?;
            shared::forget_counts(&self.db, shared::RATE_LIMIT, limit).await?;
        }
        Ok(())
    }

    /// The shared counts of the faults of `kind`, when they are kept in the database.
    async fn shared_counts(&self, kind: &str) -> Option<HashMap<String, (u64, u64)>> {
        if self.shared { Some(shared::counts(&self.db, kind).await) } else { None }
    }

    // ---------------------------------------------------------------------------------------------- rules

    pub async fn add_rule(&self, req: CreateFaultRuleRequest) -> Result<FaultRule> {
        check_position(req.position)?;
        let _edit = self.editing().await?;
        let mut rules = self.rules.write().await;
        let id = self.rule_id("rule", "fault", req.id.as_deref(), |id| rules.iter().any(|r| r.id == id)).await?;
        let rule = ActiveRule::new(id, req.matcher, req.action, req.trigger, &self.operations, self.seed, now_ms())?;
        let at = req.position.unwrap_or(rules.len()).min(rules.len());
        rules.insert(at, Arc::new(rule));
        for (i, r) in rules.iter().enumerate() {
            self.persist("rule", &r.id, i as i64, &r.stored()).await?;
        }
        tracing::info!(rule = %rules[at].id, position = at, "fault rule added");
        Ok(rules[at].to_api(None))
    }

    pub async fn list_rules(&self) -> Vec<FaultRule> {
        self.sync().await;
        let counts = self.shared_counts(shared::RULE).await;
        let counted = |id: &str| counts.as_ref().map(|c| c.get(id).copied().unwrap_or_default());
        self.rules.read().await.iter().map(|r| r.to_api(counted(&r.id))).collect()
    }

    pub async fn delete_rule(&self, id: &str) -> Result<FaultRule> {
        let _edit = self.editing().await?;
        let mut rules = self.rules.write().await;
        let at = rules.iter().position(|r| r.id == id).ok_or_else(|| {
            ApiError::not_found(fakecloud_api::codes::FAULT_NOT_FOUND, format!("no fault rule named {id:?}"))
        })?;
        let counts = self.shared_counts(shared::RULE).await.map(|c| c.get(id).copied().unwrap_or_default());
        self.forget(shared::RULE, id).await?;
        Ok(rules.remove(at).to_api(counts))
    }

    // ---------------------------------------------------------------------------------------------- data-plane rules

    pub async fn add_lb_rule(&self, req: CreateLbFaultRuleRequest) -> Result<LbFaultRule> {
        let _edit = self.editing().await?;
        let mut rules = self.lb_rules.write().await;
        let id = self.rule_id("lb_rule", "lb-fault", req.id.as_deref(), |id| rules.iter().any(|r| r.id == id)).await?;
        let rule = ActiveLbRule::new(id, req.matcher, req.action, req.trigger, self.seed, now_ms())?;
        self.persist("lb_rule", &rule.id, rules.len() as i64, &rule.stored()).await?;
        tracing::info!(rule = %rule.id, "data-plane fault rule added");
        let api = rule.to_api();
        rules.push(Arc::new(rule));
        self.lb_rules_changed.send_modify(|n| *n += 1);
        Ok(api)
    }

    pub async fn list_lb_rules(&self) -> Vec<LbFaultRule> {
        self.sync().await;
        self.lb_rules.read().await.iter().map(|r| r.to_api()).collect()
    }

    pub async fn delete_lb_rule(&self, id: &str) -> Result<LbFaultRule> {
        let _edit = self.editing().await?;
        let mut rules = self.lb_rules.write().await;
        let at = rules.iter().position(|r| r.id == id).ok_or_else(|| {
            ApiError::not_found(fakecloud_api::codes::FAULT_NOT_FOUND, format!("no data-plane fault rule named {id:?}"))
        })?;
        self.forget("lb_rule", id).await?;
        let removed = rules.remove(at).to_api();
        self.lb_rules_changed.send_modify(|n| *n += 1);
        tracing::info!(rule = %id, "data-plane fault rule deleted");
        Ok(removed)
    }

    /// The first data-plane rule that fires for `event` on `lb`. Cheap when there are none.
    pub async fn judge_lb(&self, lb: &LbSubject, event: LbEvent<'_>) -> Option<LbFired> {
        self.sync().await;
        let rules = self.lb_rules.read().await;
        if rules.is_empty() {
            return None;
        }
        let now = now_ms();
        rules.iter().find_map(|r| r.judge(lb, event, now))
    }

    /// Whether a black-hole rule may fire now: a load balancer without a health check must still look.
    pub async fn black_hole_active(&self) -> bool {
        self.sync().await;
        let now = now_ms();
        self.lb_rules.read().await.iter().any(|r| r.black_hole_active(now))
    }

    /// Changes whenever the data-plane rules do.
    pub fn lb_rules_changed(&self) -> watch::Receiver<u64> {
        self.lb_rules_changed.subscribe()
    }

    /// Remove every rule, rate limit and outage.
    pub async fn clear(&self) -> Result<()> {
        let _edit = self.editing().await?;
        sqlx::query("DELETE FROM faults").execute(self.db.writer()).await?;
        self.empty_buckets(None).await?;
        if self.shared {
            shared::forget_counts(&self.db, shared::RULE, None).await?;
        }
        self.bump().await?;
        self.rules.write().await.clear();
        self.lb_rules.write().await.clear();
        self.lb_rules_changed.send_modify(|n| *n += 1);
        self.limits.write().await.clear();
        self.outages.write().await.clear();
        *self.spot_random.write().await = None;
        tracing::info!("all faults cleared");
        Ok(())
    }

    // ---------------------------------------------------------------------------------------------- rate limits

    pub async fn set_limit(&self, id: &str, spec: SetRateLimitRequest) -> Result<RateLimit> {
        let _edit = self.editing().await?;
        crate::validate::NAME.check("id", id)?;
        let limit = ActiveLimit::new(id, spec, &self.operations)?;
        let mut limits = self.limits.write().await;
        let api = self.put_limit(&mut limits, limit).await?;
        tracing::info!(limit = %id, "rate limit set");
        Ok(api)
    }

    /// Store `limit` and put it in force, replacing the one of its name. Under the edit lock.
    async fn put_limit(&self, limits: &mut Vec<Arc<ActiveLimit>>, limit: ActiveLimit) -> Result<RateLimit> {
        self.persist("rate_limit", &limit.id, 0, &limit.stored()).await?;
        self.empty_buckets(Some(&limit.id)).await?;
        limits.retain(|l| l.id != limit.id);
        let api = limit.to_api(None);
        limits.push(Arc::new(limit));
        Ok(api)
    }

    /// Install a cloud's throttling: its limits replace every preset's (limits set by name stay).
    pub async fn install_preset(&self, preset: RateLimitPreset) -> Result<Vec<RateLimit>> {
        let _edit = self.editing().await?;
        let built = presets::limits(preset)
            .into_iter()
            .map(|(id, spec)| ActiveLimit::new(&id, spec, &self.operations))
            .collect::<Result<Vec<_>>>()?;
        let mut limits = self.limits.write().await;
        self.forget_presets(&mut limits).await?;
        let mut installed = Vec::new();
        for limit in built {
            installed.push(self.put_limit(&mut limits, limit).await?);
        }
        tracing::info!(%preset, "rate limit preset installed");
        Ok(installed)
    }

    /// Remove every preset's limits; what was removed.
    pub async fn clear_presets(&self) -> Result<Vec<RateLimit>> {
        let _edit = self.editing().await?;
        let mut limits = self.limits.write().await;
        self.forget_presets(&mut limits).await
    }

    /// One at a time, so that memory never holds a limit the database has lost, nor the other way round.
    async fn forget_presets(&self, limits: &mut Vec<Arc<ActiveLimit>>) -> Result<Vec<RateLimit>> {
        let mut removed = Vec::new();
        while let Some(at) = limits.iter().position(|l| presets::is_preset_limit(&l.id)) {
            self.forget("rate_limit", &limits[at].id).await?;
            removed.push(limits.remove(at).to_api(None));
        }
        Ok(removed)
    }

    /// Every preset, as `GET /v1/rate-limit-presets` shows it.
    pub async fn presets(&self) -> Vec<RateLimitPresetInfo> {
        self.sync().await;
        let installed = self.installed_preset().await;
        RateLimitPreset::ALL
            .into_iter()
            .map(|preset| RateLimitPresetInfo {
                name: preset,
                installed: installed == Some(preset),
                limits: presets::limits(preset).into_iter().map(|(id, limit)| PresetLimit { id, limit }).collect(),
                quota_refusals: QuotaName::ALL
                    .into_iter()
                    .map(|quota| {
                        let (status, code) = presets::quota_refusal(preset, quota);
                        QuotaRefusal { quota, status, code: code.into() }
                    })
                    .collect(),
            })
            .collect()
    }

    /// The preset whose limits are in force, if any.
    pub async fn installed_preset(&self) -> Option<RateLimitPreset> {
        presets::installed(self.limits.read().await.iter().map(|l| l.id.as_str()))
    }

    pub async fn list_limits(&self) -> Vec<RateLimit> {
        self.sync().await;
        let limits = self.limits.read().await;
        if !self.shared {
            return limits.iter().map(|l| l.to_api(None)).collect();
        }
        let refused = self.shared_counts(shared::RATE_LIMIT).await.unwrap_or_default();
        let rows: Vec<(String, String, i64, i64)> =
            match sqlx::query_as("SELECT limit_id, key, mark, calls FROM rate_buckets")
                .fetch_all(self.db.reader())
                .await
            {
                Ok(rows) => rows,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the shared rate-limit buckets; showing them full");
                    Vec::new()
                }
            };
        limits
            .iter()
            .map(|l| {
                let own: Vec<(String, i64, i64)> = rows
                    .iter()
                    .filter(|r| r.0 == l.id)
                    .map(|(_, key, mark, calls)| (key.clone(), *mark, *calls))
                    .collect();
                l.to_api(Some((&own, refused.get(&l.id).map_or(0, |(_, injected)| *injected))))
            })
            .collect()
    }

    pub async fn delete_limit(&self, id: &str) -> Result<RateLimit> {
        let _edit = self.editing().await?;
        let mut limits = self.limits.write().await;
        let at = limits.iter().position(|l| l.id == id).ok_or_else(|| {
            ApiError::not_found(fakecloud_api::codes::FAULT_NOT_FOUND, format!("no rate limit named {id:?}"))
        })?;
        self.forget("rate_limit", id).await?;
        Ok(limits.remove(at).to_api(None))
    }

    // ---------------------------------------------------------------------------------------------- random spot

    pub async fn start_spot_random(&self, req: SpotRandomRequest) -> Result<SpotRandom> {
        let _edit = self.editing().await?;
        let now = now_ms();
        let active = ActiveSpotRandom::new(&req, self.seed, now)?;
        self.persist("spot_random", "spot-random", 0, active.stored()).await?;
        let api = active.to_api();
        *self.spot_random.write().await = Some(Arc::new(active));
        tracing::warn!(rate_per_minute = req.rate_per_minute, "random spot reclamation started");
        Ok(api)
    }

    pub async fn stop_spot_random(&self) -> Result<()> {
        let _edit = self.editing().await?;
        self.forget("spot_random", "spot-random").await?;
        *self.spot_random.write().await = None;
        Ok(())
    }

    /// Run the random spot draws once a second until the process ends. Emulators sharing the database follow
    /// the faults every second and draw in turn: a second is drawn by the one that claims it.
    pub fn spawn_spot_ticker(self: &Arc<Self>, cfg: crate::config::Config) -> tokio::task::JoinHandle<()> {
        let engine = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                // On the writer's connection, which the lifecycle ticker keeps open anyway: a reader used every
                // second would never be closed as idle, and an account nobody calls would hold readers on every
                // replica (the book, docs/book/src/farm.md, "Connections on PostgreSQL").
                engine.sync_on(engine.db.writer()).await;
                let now = now_ms();
                let Some(active) = engine.spot_random.read().await.clone().filter(|a| a.active(now)) else { continue };
                if engine.shared && !engine.claimed(now.div_euclid(1000)).await {
                    continue;
                }
                match active.tick(&engine.db, &cfg).await {
                    Ok(Some(name)) => tracing::warn!(instance = %name, "random spot reclamation"),
                    Ok(None) => {}
                    Err(e) => tracing::warn!(error = %e, "random spot reclamation failed; trying again next second"),
                }
            }
        })
    }

    /// Whether this emulator claimed second `second` of random spot reclamation (a database that cannot be
    /// reached: no, so two emulators never draw the same second).
    async fn claimed(&self, second: i64) -> bool {
        shared::claim_second(&self.db, second).await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot claim a second of random spot reclamation; trying again next second");
            false
        })
    }

    // ---------------------------------------------------------------------------------------------- outages

    pub async fn start_outage(&self, req: StartOutageRequest, zones: &[&str]) -> Result<Outage> {
        let _edit = self.editing().await?;
        let mut outages = self.outages.write().await;
        let id = self.new_id("outage", "outage", |id| outages.iter().any(|o| o.id == id)).await?;
        let outage = ActiveOutage::new(id, req, zones, now_ms())?;
        self.persist("outage", &outage.id, 0, &outage.stored()).await?;
        tracing::warn!(outage = %outage.id, "outage started");
        let api = outage.to_api();
        outages.push(outage);
        Ok(api)
    }

    pub async fn list_outages(&self) -> Vec<Outage> {
        self.sync().await;
        let now = now_ms();
        self.outages.read().await.iter().filter(|o| o.active(now)).map(ActiveOutage::to_api).collect()
    }

    pub async fn stop_outage(&self, id: &str) -> Result<Outage> {
        let _edit = self.editing().await?;
        let mut outages = self.outages.write().await;
        let at = outages.iter().position(|o| o.id == id).ok_or_else(|| {
            ApiError::not_found(fakecloud_api::codes::FAULT_NOT_FOUND, format!("no outage named {id:?}"))
        })?;
        self.forget("outage", id).await?;
        tracing::info!(outage = %id, "outage stopped");
        Ok(outages.remove(at).to_api())
    }
}

/// The counter (in `counters`) every change of the faults bumps.
const GENERATION: &str = "faults_generation";
/// No generation read yet: the first [`FaultEngine::sync`] reads the faults again.
const UNKNOWN: i64 = -1;

/// The stored faults as (kind, ID, spec), in their order.
async fn stored(db: &Db) -> Result<Vec<(String, String, String)>> {
    Ok(sqlx::query_as("SELECT kind, id, spec FROM faults ORDER BY position, created_at").fetch_all(db.reader()).await?)
}

/// The fault of `old` that is `same`, or a new one `restore`d.
fn kept<T>(old: &[Arc<T>], same: impl Fn(&T) -> bool, restore: impl FnOnce() -> Result<T>) -> Result<Arc<T>> {
    match old.iter().find(|o| same(o)) {
        Some(o) => Ok(o.clone()),
        None => restore().map(Arc::new),
    }
}

fn check_position(position: Option<usize>) -> Result<()> {
    if let Some(p) = position {
        let p = u64::try_from(p).unwrap_or(u64::MAX);
        crate::validate::in_range("position", p, 0, fakecloud_api::limits::FAULT_COUNT_MAX)?;
    }
    Ok(())
}

/// The checks each fault request gets when it is made, without making it — for a scenario file, checked whole
/// before its first step (`fakecloud scenario run`). What depends on the engine's state (an ID in use) is
/// left to the call itself.
pub mod check {
    use fakecloud_api::{CreateFaultRuleRequest, CreateLbFaultRuleRequest, SetRateLimitRequest, StartOutageRequest};

    use super::{ActiveLbRule, ActiveLimit, ActiveOutage, ActiveRule, check_position};
    use crate::db::now_ms;
    use crate::error::Result;

    /// An ID for a rule the request leaves unnamed (the engine would pick one).
    const UNNAMED: &str = "unnamed";

    pub fn rule(req: &CreateFaultRuleRequest, operations: &[String]) -> Result<()> {
        check_position(req.position)?;
        let id = req.id.clone().unwrap_or_else(|| UNNAMED.into());
        let (m, a, t) = (req.matcher.clone(), req.action.clone(), req.trigger.clone());
        ActiveRule::new(id, m, a, t, operations, 0, now_ms()).map(drop)
    }

    pub fn lb_rule(req: &CreateLbFaultRuleRequest) -> Result<()> {
        let id = req.id.clone().unwrap_or_else(|| UNNAMED.into());
        ActiveLbRule::new(id, req.matcher.clone(), req.action.clone(), req.trigger.clone(), 0, now_ms()).map(drop)
    }

    pub fn limit(id: &str, spec: &SetRateLimitRequest, operations: &[String]) -> Result<()> {
        crate::validate::NAME.check("id", id)?;
        ActiveLimit::new(id, spec.clone(), operations).map(drop)
    }

    /// `zones`: the region's, when known; without them a zone outage's zone is not checked.
    pub fn outage(req: &StartOutageRequest, zones: Option<&[&str]>) -> Result<()> {
        let own: Vec<&str> = req.zone.iter().map(String::as_str).collect();
        ActiveOutage::new(UNNAMED.into(), req.clone(), zones.unwrap_or(&own), now_ms()).map(drop)
    }
}

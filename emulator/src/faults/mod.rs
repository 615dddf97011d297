//! Fault injection: what the emulator does to a call before (or after) it runs. Checked for every user call,
//! in this order: outages, rate limits, then the ordered fault rules (the first rule whose match and trigger
//! both fire wins). Admin calls are never faulted, so faults can always be managed.
//!
//! Data-plane rules ([`lb_rules`]) are the load balancers' counterpart: the data plane asks about each new
//! connection and each health check, and the first rule that fires wins.
//!
//! Everything is persisted (table `faults`, through `crate::store::faults`), so it survives a restart; counters
//! (`matched`, `injected`, skip and times) start again from zero after one, unless emulators share the
//! database (see `engine::replicas`).
//!
//! Here are the engine's state, its loading, the judging of a call and what its methods share (storing and
//! forgetting a fault); the methods themselves are in `engine`, one module a concern.

mod call;
pub mod check;
pub mod effects;
mod engine;
mod lb_rules;
mod outages;
mod presets;
mod rate_limits;
mod rules;
mod spot_random;
mod trigger;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use tokio::sync::{Mutex, RwLock, watch};

pub use self::call::{Call, Subject, Verdict, service_of};
use self::lb_rules::ActiveLbRule;
pub use self::lb_rules::{LbEvent, LbFired, LbSubject, LbVerdict};
use self::outages::ActiveOutage;
pub use self::presets::quota_refusal;
use self::rate_limits::ActiveLimit;
use self::rules::ActiveRule;
use self::spot_random::ActiveSpotRandom;
use crate::db::backend::Backend;
use crate::db::{Db, now_ms};
use crate::error::Result;
use crate::store;
use crate::store::faults::{RATE_LIMIT, RULE};

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

impl std::fmt::Debug for FaultEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultEngine").field("seed", &self.seed).finish_non_exhaustive()
    }
}

impl FaultEngine {
    /// Load the persisted faults. `operations` are the API's operation names (for validating rule matches).
    pub async fn load(db: Db, seed: u64, operations: Vec<String>) -> Result<Self> {
        let rows = store::faults::all(&db).await?;
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

    /// Whether judging needs the call's [`Subject`]: a rule matches on zone, name or tag, or a zone is down.
    /// Describing a call costs a look-up, so it is done only then.
    pub async fn wants_subject(&self) -> bool {
        let now = now_ms();
        self.rules.read().await.iter().any(|r| r.wants_subject())
            || self.outages.read().await.iter().any(|o| o.active(now) && o.zone().is_some())
    }

    /// Whether judging needs the resource a call names (a rule matches on it, or lags a change to it), or its
    /// [`Subject`]: what a face whose calls name resources in their bodies looks up only then.
    pub async fn wants_resource(&self) -> bool {
        self.rules.read().await.iter().any(|r| r.wants_resource()) || self.wants_subject().await
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

    /// Remove every rule, rate limit and outage.
    pub async fn clear(&self) -> Result<()> {
        let _edit = self.editing().await?;
        store::faults::delete_all(&self.db).await?;
        self.empty_buckets(None).await?;
        if self.shared {
            store::faults::forget_counts(&self.db, RULE, None).await?;
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

    async fn persist(&self, kind: &str, id: &str, position: i64, spec: &str) -> Result<()> {
        store::faults::put(&self.db, kind, id, position, spec, now_ms()).await?;
        self.bump().await
    }

    /// Tell the other emulators on this database that the faults changed (see [`Self::sync`]).
    async fn bump(&self) -> Result<()> {
        store::faults::bump(&self.db).await
    }

    /// A new `<prefix>-<n>` ID for a fault of `kind`. The numbers come from a counter kept in the database, so
    /// an ID is never handed out twice — not after its fault is deleted, not after a restart — and a client
    /// holding an old ID cannot stop something else with it. (A database from before the counter starts it
    /// after the faults it has; names in use, such as a rule named by its creator, are skipped.)
    async fn new_id(&self, kind: &str, prefix: &str, in_use: impl Fn(&str) -> bool) -> Result<String> {
        loop {
            let id = format!("{prefix}-{}", store::faults::next_number(&self.db, kind).await?);
            if !in_use(&id) {
                return Ok(id);
            }
        }
    }

    async fn forget(&self, kind: &str, id: &str) -> Result<()> {
        store::faults::delete(&self.db, kind, id).await?;
        if kind == RATE_LIMIT {
            self.empty_buckets(Some(id)).await?;
        }
        if self.shared && kind == RULE {
            store::faults::forget_counts(&self.db, kind, Some(id)).await?;
        }
        self.bump().await
    }

    /// A limit set anew, or gone, starts again with full buckets and no refusals: the shared ones are its
    /// rows (see `rate_limits` and `crate::store::faults`), `None` for every limit's.
    async fn empty_buckets(&self, limit: Option<&str>) -> Result<()> {
        if self.shared {
            store::faults::empty_buckets(&self.db, limit).await?;
            store::faults::forget_counts(&self.db, RATE_LIMIT, limit).await?;
        }
        Ok(())
    }

    /// The shared counts of the faults of `kind`, when they are kept in the database (none when it cannot be
    /// read).
    async fn shared_counts(&self, kind: &str) -> Option<HashMap<String, (u64, u64)>> {
        if !self.shared {
            return None;
        }
        Some(store::faults::counts(&self.db, kind).await.unwrap_or_else(|e| {
            tracing::warn!(%kind, error = %e, "cannot read the shared fault counts; showing this emulator's");
            HashMap::new()
        }))
    }
}

/// No generation read yet: the first [`FaultEngine::sync`] reads the faults again.
const UNKNOWN: i64 = -1;

/// The fault of `old` that is `same`, or a new one `restore`d.
fn kept<T>(old: &[Arc<T>], same: impl Fn(&T) -> bool, restore: impl FnOnce() -> Result<T>) -> Result<Arc<T>> {
    match old.iter().find(|o| same(o)) {
        Some(o) => Ok(o.clone()),
        None => restore().map(Arc::new),
    }
}

//! A rule's trigger — its window, skip, times and probability — shared by API and data-plane rules: when a
//! matching event (a call, a connection, a health check) is actually faulted, and the counts that say so.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use fakecloud_api::FaultTrigger;
use fakecloud_api::limits::{FAULT_COUNT_MAX, WINDOW_SECONDS_MAX};
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::db::{Db, ms};
use crate::error::{ApiError, Result};
use crate::store;
use crate::validate;

fn parse_time(field: &str, s: &str) -> Result<i64> {
    s.parse::<jiff::Timestamp>().map(|t| t.as_millisecond()).map_err(|e| {
        ApiError::invalid(field, format!("{s:?} is not an RFC 3339 time such as 2026-11-22T10:00:00Z ({e})"))
    })
}

/// A duration in seconds, 0..=`max`.
pub fn seconds(field: &str, v: f64, max: f64) -> Result<Duration> {
    Ok(Duration::from_secs_f64(validate::in_range(field, v, 0.0, max)?))
}

/// Check `trigger` and resolve its window to absolute times (ms): `(from, until)`. `now` is when the rule is
/// added, which `duration_seconds` counts from.
pub fn window(trigger: &FaultTrigger, now: i64) -> Result<(Option<i64>, Option<i64>)> {
    if let Some(p) = trigger.probability {
        validate::in_range("trigger.probability", p, 0.0, 1.0)?;
    }
    validate::in_range("trigger.skip", trigger.skip, 0, FAULT_COUNT_MAX)?;
    if let Some(t) = trigger.times {
        validate::in_range("trigger.times", t, 0, FAULT_COUNT_MAX)?;
    }
    let from_ms = trigger.from.as_deref().map(|s| parse_time("trigger.from", s)).transpose()?;
    let mut until_ms = trigger.until.as_deref().map(|s| parse_time("trigger.until", s)).transpose()?;
    if let Some(d) = trigger.duration_seconds {
        let d = seconds("trigger.duration_seconds", d, WINDOW_SECONDS_MAX)?;
        let end = from_ms.unwrap_or(now).max(now).saturating_add(ms(d));
        until_ms = Some(until_ms.map_or(end, |u| u.min(end)));
    }
    if let (Some(f), Some(u)) = (from_ms, until_ms)
        && u <= f
    {
        return Err(ApiError::invalid("trigger.until", "must be after trigger.from"));
    }
    Ok((from_ms, until_ms))
}

/// Whether `now` is inside the window `(from, until)`.
pub fn in_window((from_ms, until_ms): (Option<i64>, Option<i64>), now: i64) -> bool {
    from_ms.is_none_or(|f| now >= f) && until_ms.is_none_or(|u| now < u)
}

/// A rule's draws and counts.
pub struct Firing {
    /// Seeded from the emulator's seed and the rule's name, so the same rules make the same draws every run.
    rng: Mutex<StdRng>,
    matched: AtomicU64,
    injected: AtomicU64,
}

fn seed_for(seed: u64, id: &str) -> u64 {
    // FNV-1a of the name, mixed with the seed: stable across runs and platforms.
    id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)) ^ seed
}

impl Firing {
    pub fn new(seed: u64, id: &str) -> Self {
        Self {
            rng: Mutex::new(StdRng::seed_from_u64(seed_for(seed, id))),
            matched: AtomicU64::new(0),
            injected: AtomicU64::new(0),
        }
    }

    /// Count a matching event; the rule's generator (for the action's own draws) when `trigger` fires for it.
    pub fn fire(&self, t: &FaultTrigger) -> Option<MutexGuard<'_, StdRng>> {
        use rand::Rng;
        let n = self.matched.fetch_add(1, Ordering::SeqCst) + 1;
        if n <= t.skip {
            return None;
        }
        let mut rng = self.rng();
        if let Some(p) = t.probability
            && rng.random::<f64>() >= p
        {
            return None;
        }
        if let Some(times) = t.times {
            // Count the injection only if there is room left, atomically.
            let fired =
                self.injected.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |i| (i < times).then_some(i + 1));
            if fired.is_err() {
                return None;
            }
        } else {
            self.injected.fetch_add(1, Ordering::SeqCst);
        }
        Some(rng)
    }

    /// [`Self::fire`] for a rule of several emulators sharing `db`: the rule's counts are its row there, so
    /// `skip` and `times` count every emulator's events. The probability is drawn here, on each match. A
    /// database that cannot be reached leaves the counting to this emulator.
    pub async fn fire_shared(&self, t: &FaultTrigger, db: &Db, id: &str) -> Option<MutexGuard<'_, StdRng>> {
        use rand::Rng;
        let drawn = t.probability.is_none_or(|p| self.rng().random::<f64>() < p);
        match store::faults::count_match(db, id, t, drawn).await {
            Ok(fired) => fired.then(|| self.rng()),
            Err(e) => {
                tracing::warn!(rule = %id, error = %e, "cannot count the match in the database; counting it here");
                self.fire(t)
            }
        }
    }

    fn rng(&self) -> MutexGuard<'_, StdRng> {
        self.rng.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `(matched, injected)`.
    pub fn counts(&self) -> (u64, u64) {
        (self.matched.load(Ordering::SeqCst), self.injected.load(Ordering::SeqCst))
    }
}

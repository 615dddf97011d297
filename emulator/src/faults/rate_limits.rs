//! Rate limits, in one engine of two kinds: token buckets (governor's GCRA, which is a token bucket) and fixed
//! windows aligned to the clock. A refused call gets the limit's status and code, with an accurate
//! `Retry-After` and the `RateLimit-*` headers unless the limit says a cloud sends none; a limit may also put
//! what is left in a header of every answer it applies to (Azure's `x-ms-ratelimit-remaining-*`).

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::http::{HeaderName, HeaderValue, Method};
use fakecloud_api::limits::{
    RATE_LIMIT_CAPACITY_MAX, RATE_LIMIT_CAPACITY_MIN, RATE_LIMIT_FORMAT_MAX_CHARS, RATE_LIMIT_MESSAGE_MAX_CHARS,
    RATE_LIMIT_WINDOW_SECONDS_MAX, RATE_LIMIT_WINDOW_SECONDS_MIN, REFILL_PER_SECOND_MAX, REFILL_PER_SECOND_MIN,
};
use fakecloud_api::{RateLimit, RateLimitBucket, RateLimitKind, RateLimitScope, SetRateLimitRequest, codes};
use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};

use super::call::{Call, Verdict};
use crate::db::{Db, now_ms};
use crate::error::{ApiError, Kind, Result, SERVER_HEADERS};
use crate::store;
use crate::store::faults::BucketRow;
use crate::validate;

type Limiter = RateLimiter<String, DefaultKeyedStateStore<String>, DefaultClock, StateInformationMiddleware>;

/// What `remaining_format` writes the count in place of.
const REMAINING: &str = "{remaining}";

/// The statuses clouds throttle with: 400 (ELB), 403 (GCP), 429, 503 (EC2).
const STATUSES: [u16; 4] = [400, 403, 429, 503];

/// How a limit counts. Buckets are keyed by `all` or the caller's role, never a token.
enum Meter {
    Bucket {
        limiter: Limiter,
        /// What each bucket held after its last call, and when: governor cannot be asked without taking a
        /// token, so the tokens shown are this plus the refill since.
        last_seen: Mutex<BTreeMap<&'static str, (f64, Instant)>>,
    },
    Window {
        millis: i64,
        /// The window each bucket last counted in (its start over the length), and the calls it counted.
        counts: Mutex<BTreeMap<&'static str, (i64, u32)>>,
    },
}

pub struct ActiveLimit {
    pub id: String,
    spec: SetRateLimitRequest,
    meter: Meter,
    refused: AtomicU64,
}

impl ActiveLimit {
    pub fn new(id: &str, spec: SetRateLimitRequest, operations: &[String]) -> Result<Self> {
        let known = |field: &str, op: &String| {
            if operations.contains(op) {
                Ok(())
            } else {
                let names = operations.join(", ");
                Err(ApiError::invalid(field, format!("{op:?} is not an operation; operations: {names}")))
            }
        };
        match (spec.scope, &spec.operation) {
            (RateLimitScope::Operation, None) => {
                return Err(ApiError::invalid("operation", "scope operation needs the operation's name"));
            }
            (RateLimitScope::Operation, Some(op)) => known("operation", op)?,
            (_, Some(_)) => return Err(ApiError::invalid("operation", "only with scope operation")),
            (_, None) => {}
        }
        match (spec.scope, spec.operations.is_empty()) {
            (RateLimitScope::Operations, true) => {
                return Err(ApiError::invalid("operations", "scope operations needs a list of operation names"));
            }
            (RateLimitScope::Operations, false) => {
                for (i, op) in spec.operations.iter().enumerate() {
                    known(&format!("operations[{i}]"), op)?;
                }
            }
            (_, false) => return Err(ApiError::invalid("operations", "only with scope operations")),
            (_, true) => {}
        }
        Self::build(id, spec)
    }

    /// Checked here rather than in `new` so that a stored limit is checked again when it is restored: governor
    /// panics on a bucket whose refill time overflows its nanosecond clock.
    fn build(id: &str, spec: SetRateLimitRequest) -> Result<Self> {
        let capacity = validate::in_range("capacity", spec.capacity, RATE_LIMIT_CAPACITY_MIN, RATE_LIMIT_CAPACITY_MAX)?;
        let capacity = NonZeroU32::new(capacity).ok_or_else(|| ApiError::invalid("capacity", "must be at least 1"))?;
        if !STATUSES.contains(&spec.status) {
            return Err(ApiError::invalid("status", format!("must be 400, 403, 429 or 503 (got {})", spec.status)));
        }
        if let Some(code) = &spec.code {
            validate::FAULT_CODE.check("code", code)?;
        }
        if let Some(message) = &spec.message {
            validate::in_range("message's length", message.chars().count(), 1, RATE_LIMIT_MESSAGE_MAX_CHARS)?;
        }
        check_remaining_header(&spec)?;
        let meter = match (spec.kind, spec.window_seconds) {
            (RateLimitKind::TokenBucket, Some(_)) => {
                return Err(ApiError::invalid("window_seconds", "only with kind fixed-window"));
            }
            (RateLimitKind::TokenBucket, None) => {
                let Some(rate) = spec.refill_per_second else {
                    return Err(ApiError::invalid("refill_per_second", "kind token-bucket needs its refill rate"));
                };
                let rate = validate::in_range("refill_per_second", rate, REFILL_PER_SECOND_MIN, REFILL_PER_SECOND_MAX)?;
                let quota = Quota::with_period(Duration::from_secs_f64(1.0 / rate))
                    .ok_or_else(|| ApiError::invalid("refill_per_second", "is too large"))?
                    .allow_burst(capacity);
                Meter::Bucket { limiter: RateLimiter::keyed(quota).with_middleware(), last_seen: Mutex::default() }
            }
            (RateLimitKind::FixedWindow, None) => {
                return Err(ApiError::invalid("window_seconds", "kind fixed-window needs the window's length"));
            }
            (RateLimitKind::FixedWindow, Some(seconds)) => {
                let seconds = validate::in_range(
                    "window_seconds",
                    seconds,
                    RATE_LIMIT_WINDOW_SECONDS_MIN,
                    RATE_LIMIT_WINDOW_SECONDS_MAX,
                )?;
                if spec.refill_per_second.is_some() {
                    return Err(ApiError::invalid(
                        "refill_per_second",
                        "only with kind token-bucket: a fixed window's calls come back when the window ends",
                    ));
                }
                Meter::Window { millis: i64::from(seconds) * 1000, counts: Mutex::default() }
            }
        };
        Ok(Self { id: id.to_string(), spec, meter, refused: AtomicU64::new(0) })
    }

    pub fn restore(id: &str, spec: &str) -> Result<Self> {
        let spec: SetRateLimitRequest = serde_json::from_str(spec).map_err(|e| ApiError::internal(e.to_string()))?;
        Self::build(id, spec)
    }

    pub fn stored(&self) -> String {
        serde_json::to_string(&self.spec).unwrap_or_default()
    }

    fn applies(&self, call: &Call<'_>) -> bool {
        match self.spec.scope {
            RateLimitScope::All => true,
            RateLimitScope::Reads => call.method == Method::GET,
            RateLimitScope::Writes => call.method != Method::GET,
            RateLimitScope::Operation => call.named(|name| self.spec.operation.as_deref() == Some(name)),
            RateLimitScope::Operations => call.named(|name| self.spec.operations.iter().any(|op| op == name)),
        }
    }

    /// Count the call; `Some` (a refusal) when nothing is left. `headers` gets what every answer to the call
    /// carries: the limit's remaining header, if it has one. `shared`: the database the buckets are kept in
    /// when several emulators serve one cloud from it (see [`Self::count_shared`]).
    pub async fn judge(
        &self,
        call: &Call<'_>,
        headers: &mut Vec<(String, String)>,
        shared: Option<&Db>,
    ) -> Option<Verdict> {
        if !self.applies(call) {
            return None;
        }
        let shown = if self.spec.per_token { call.role.as_str() } else { "all" };
        let (left, wait) = match shared {
            Some(db) => self.count_shared(db, shown).await,
            None => self.count_here(call, shown),
        };
        if let Some(name) = &self.spec.remaining_header {
            let value = match &self.spec.remaining_format {
                Some(format) => format.replace(REMAINING, &left.to_string()),
                None => left.to_string(),
            };
            headers.push((name.clone(), value));
        }
        let wait = wait?;
        self.refused.fetch_add(1, Ordering::SeqCst);
        if let Some(db) = shared
            && let Err(e) = store::faults::count_refusal(db, &self.id).await
        {
            tracing::warn!(limit = %self.id, error = %e, "cannot count the refusal in the database");
        }
        // Retry-After is whole seconds: round up, so a client that honours it is never early.
        let retry = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        Some(Verdict::Throttle { error: self.refusal(retry), fault: self.id.clone() })
    }

    /// [`Self::judge`]'s count in this process's buckets.
    fn count_here(&self, call: &Call<'_>, shown: &'static str) -> (u32, Option<Duration>) {
        match &self.meter {
            Meter::Bucket { limiter, last_seen } => {
                let key = if self.spec.per_token { call.token.to_string() } else { String::new() };
                let checked = limiter.check_key(&key);
                let left = checked.as_ref().map_or(0, |snapshot| snapshot.remaining_burst_capacity());
                last_seen.lock().unwrap_or_else(|p| p.into_inner()).insert(shown, (f64::from(left), Instant::now()));
                (left, checked.err().map(|not_until| not_until.wait_time_from(limiter.clock().now())))
            }
            Meter::Window { millis, counts } => {
                let now = now_ms();
                let window = now.div_euclid(*millis);
                let mut counts = counts.lock().unwrap_or_else(|p| p.into_inner());
                let (counted_in, calls) = counts.entry(shown).or_insert((window, 0));
                if *counted_in != window {
                    (*counted_in, *calls) = (window, 0);
                }
                if *calls < self.spec.capacity {
                    *calls += 1;
                    (self.spec.capacity - *calls, None)
                } else {
                    (0, Some(window_left(*millis, window, now)))
                }
            }
        }
    }

    /// [`Self::judge`]'s count in the database's buckets (`rate_buckets`), one atomic statement a call, so
    /// every emulator on the database draws from the same bucket. The token bucket is kept as GCRA's
    /// theoretical arrival time, as governor keeps it in memory. A database that cannot be reached lets the
    /// call through: the limit is the cloud's throttle, not a second outage.
    async fn count_shared(&self, db: &Db, key: &str) -> (u32, Option<Duration>) {
        let capacity = self.spec.capacity;
        let counted = match &self.meter {
            Meter::Bucket { .. } => {
                let (now, every) = (jiff::Timestamp::now().as_microsecond(), self.emission_us());
                let burst = every.saturating_mul(i64::from(capacity));
                store::faults::take_token(db, &self.id, key, now, every, burst).await.map(|(tat, took)| {
                    let left = ((burst - (tat - now)) / every).clamp(0, i64::from(capacity));
                    let wait = (took == 0)
                        .then(|| Duration::from_micros(u64::try_from(tat + every - burst - now).unwrap_or(0)));
                    (u32::try_from(left).unwrap_or(0), wait)
                })
            }
            Meter::Window { millis, .. } => {
                let now = now_ms();
                let window = now.div_euclid(*millis);
                store::faults::count_call(db, &self.id, key, window).await.map(|calls| match u32::try_from(calls) {
                    Ok(calls) if calls <= capacity => (capacity - calls, None),
                    _ => (0, Some(window_left(*millis, window, now))),
                })
            }
        };
        counted.unwrap_or_else(|e| {
            tracing::warn!(limit = %self.id, error = %e, "cannot count the call in the shared bucket; letting it through");
            (capacity, None)
        })
    }

    /// A token bucket's time between two tokens, in microseconds (at least one).
    fn emission_us(&self) -> i64 {
        let rate = self.spec.refill_per_second.unwrap_or(REFILL_PER_SECOND_MIN);
        ((1e6 / rate).round() as i64).max(1)
    }

    fn refusal(&self, retry: u64) -> ApiError {
        let spec = &self.spec;
        let budget = match spec.window_seconds {
            Some(w) => format!("{} calls per {w} s window", spec.capacity),
            None => format!("{} calls, {}/s", spec.capacity, spec.refill_per_second.unwrap_or_default()),
        };
        let message = match (&spec.message, spec.retry_after) {
            (Some(m), _) => m.clone(),
            (None, true) => format!("rate limit {} exceeded ({budget}); retry after {retry} s", self.id),
            (None, false) => format!("rate limit {} exceeded ({budget})", self.id),
        };
        let code = spec.code.clone().unwrap_or_else(|| codes::REQUEST_LIMIT_EXCEEDED.to_string());
        // The limit's own status, checked when it was set.
        let mut error = ApiError::new(Kind::Status(spec.status), code, message);
        error.headers =
            vec![("RateLimit-Limit".into(), spec.capacity.to_string()), ("RateLimit-Remaining".into(), "0".into())];
        if spec.retry_after {
            error.headers.push(("Retry-After".into(), retry.to_string()));
            error.headers.push(("RateLimit-Reset".into(), retry.to_string()));
        }
        error
    }

    /// As the API shows it. `shared`: the limit's rows of `rate_buckets` (key, mark, calls) and its refusals
    /// counted in `fault_counts`, when they are kept in the database.
    pub fn to_api(&self, shared: Option<(&[BucketRow], u64)>) -> RateLimit {
        let capacity = f64::from(self.spec.capacity);
        let mut buckets: Vec<RateLimitBucket> = match (&self.meter, shared.map(|(rows, _)| rows)) {
            (Meter::Bucket { .. }, Some(rows)) => {
                let (now, every) = (jiff::Timestamp::now().as_microsecond(), self.emission_us() as f64);
                let burst = every * capacity;
                rows.iter()
                    .map(|(key, tat, _)| {
                        let tokens = (burst - (*tat - now).max(0) as f64) / every;
                        RateLimitBucket { key: key.clone(), tokens: tokens.clamp(0.0, capacity) }
                    })
                    .collect()
            }
            (Meter::Window { millis, .. }, Some(rows)) => {
                let window = now_ms().div_euclid(*millis);
                rows.iter()
                    .map(|(key, counted_in, calls)| {
                        let used = if *counted_in == window { *calls as f64 } else { 0.0 };
                        RateLimitBucket { key: key.clone(), tokens: (capacity - used).max(0.0) }
                    })
                    .collect()
            }
            (Meter::Bucket { last_seen, .. }, None) => {
                let seen = last_seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
                seen.into_iter()
                    .map(|(key, (left, at))| {
                        let rate = self.spec.refill_per_second.unwrap_or_default();
                        let refilled = left + at.elapsed().as_secs_f64() * rate;
                        RateLimitBucket { key: key.to_string(), tokens: refilled.min(capacity) }
                    })
                    .collect()
            }
            (Meter::Window { millis, counts }, None) => {
                let window = now_ms().div_euclid(*millis);
                let counts = counts.lock().unwrap_or_else(|p| p.into_inner()).clone();
                counts
                    .into_iter()
                    .map(|(key, (counted_in, calls))| {
                        let used = if counted_in == window { f64::from(calls) } else { 0.0 };
                        RateLimitBucket { key: key.to_string(), tokens: capacity - used }
                    })
                    .collect()
            }
        };
        if buckets.is_empty() && !self.spec.per_token {
            buckets.push(RateLimitBucket { key: "all".into(), tokens: capacity });
        }
        RateLimit {
            id: self.id.clone(),
            limit: self.spec.clone(),
            refused: shared.map_or_else(|| self.refused.load(Ordering::SeqCst), |(_, refused)| refused),
            buckets,
        }
    }
}

/// How long until the fixed window `window` (of `millis`) ends, from `now`.
fn window_left(millis: i64, window: i64, now: i64) -> Duration {
    let ends = (window + 1).saturating_mul(millis);
    Duration::from_millis(u64::try_from(ends - now).unwrap_or(0))
}

/// The remaining header must be one a response can carry, and not one the server frames the answer with.
fn check_remaining_header(spec: &SetRateLimitRequest) -> Result<()> {
    let Some(name) = &spec.remaining_header else {
        return match spec.remaining_format {
            Some(_) => Err(ApiError::invalid("remaining_format", "only with remaining_header")),
            None => Ok(()),
        };
    };
    let field = "remaining_header";
    let Ok(parsed) = HeaderName::try_from(name.as_str()) else {
        return Err(ApiError::invalid(field, format!("{} is not a valid HTTP header name", validate::quoted(name))));
    };
    if SERVER_HEADERS.contains(&parsed.as_str()) {
        return Err(ApiError::invalid(
            field,
            format!("is set by the server; a limit's header may not be {}", SERVER_HEADERS.join(", ")),
        ));
    }
    if let Some(format) = &spec.remaining_format {
        let field = "remaining_format";
        validate::in_range("remaining_format's length", format.chars().count(), 1, RATE_LIMIT_FORMAT_MAX_CHARS)?;
        if !format.contains(REMAINING) {
            return Err(ApiError::invalid(field, format!("must contain {REMAINING}, where the count goes")));
        }
        if HeaderValue::try_from(format.replace(REMAINING, &u32::MAX.to_string())).is_err() {
            return Err(ApiError::invalid(field, "is not a valid HTTP header value"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A limit stored before limits had kinds, codes and headers still loads, as the bucket it was.
    #[test]
    fn a_limit_stored_before_the_new_options_still_restores() {
        let old = r#"{"scope":"writes","per_token":false,"capacity":5,"refill_per_second":1.0,"status":503}"#;
        let limit = ActiveLimit::restore("writes", old).unwrap();
        assert_eq!(limit.spec.kind, RateLimitKind::TokenBucket);
        assert!(limit.spec.retry_after && limit.spec.code.is_none() && limit.spec.remaining_header.is_none());
        assert_eq!(limit.spec.status, 503);
    }
}

//! Token-bucket rate limits (governor's GCRA, which is a token bucket): 429 (or 503) with an accurate
//! `Retry-After` and the `RateLimit-*` headers when a bucket is empty.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::http::Method;
use fakecloud_api::limits::{
    RATE_LIMIT_CAPACITY_MAX, RATE_LIMIT_CAPACITY_MIN, REFILL_PER_SECOND_MAX, REFILL_PER_SECOND_MIN,
};
use fakecloud_api::{RateLimit, RateLimitBucket, RateLimitScope, SetRateLimitRequest, codes};
use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};

use super::call::{Call, Verdict};
use crate::error::{ApiError, Kind, Result};
use crate::validate;

type Limiter = RateLimiter<String, DefaultKeyedStateStore<String>, DefaultClock, StateInformationMiddleware>;

pub struct ActiveLimit {
    pub id: String,
    spec: SetRateLimitRequest,
    limiter: Limiter,
    refused: AtomicU64,
    /// What each bucket held after its last call, and when: governor cannot be asked without taking a token,
    /// so the tokens shown are this plus the refill since. Keyed by `all` or the caller's role, never a token.
    last_seen: Mutex<BTreeMap<&'static str, (f64, Instant)>>,
}

impl ActiveLimit {
    pub fn new(id: &str, spec: SetRateLimitRequest, operations: &[String]) -> Result<Self> {
        match (spec.scope, &spec.operation) {
            (RateLimitScope::Operation, None) => {
                return Err(ApiError::invalid("operation", "scope operation needs the operation's name"));
            }
            (RateLimitScope::Operation, Some(op)) if !operations.contains(op) => {
                return Err(ApiError::invalid(
                    "operation",
                    format!("{op:?} is not an operation; operations: {}", operations.join(", ")),
                ));
            }
            (RateLimitScope::Operation, Some(_)) => {}
            (_, Some(_)) => return Err(ApiError::invalid("operation", "only with scope operation")),
            (_, None) => {}
        }
        Self::build(id, spec)
    }

    /// Checked here rather than in `new` so that a stored limit is checked again when it is restored: governor
    /// panics on a bucket whose refill time overflows its nanosecond clock.
    fn build(id: &str, spec: SetRateLimitRequest) -> Result<Self> {
        let capacity = validate::in_range("capacity", spec.capacity, RATE_LIMIT_CAPACITY_MIN, RATE_LIMIT_CAPACITY_MAX)?;
        let rate = validate::in_range(
            "refill_per_second",
            spec.refill_per_second,
            REFILL_PER_SECOND_MIN,
            REFILL_PER_SECOND_MAX,
        )?;
        if spec.status != 429 && spec.status != 503 {
            return Err(ApiError::invalid("status", format!("must be 429 or 503 (got {})", spec.status)));
        }
        let capacity = NonZeroU32::new(capacity).ok_or_else(|| ApiError::invalid("capacity", "must be at least 1"))?;
        let quota = Quota::with_period(Duration::from_secs_f64(1.0 / rate))
            .ok_or_else(|| ApiError::invalid("refill_per_second", "is too large"))?
            .allow_burst(capacity);
        Ok(Self {
            id: id.to_string(),
            spec,
            limiter: RateLimiter::keyed(quota).with_middleware(),
            refused: AtomicU64::new(0),
            last_seen: Mutex::default(),
        })
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
            RateLimitScope::Operation => self.spec.operation.as_deref() == Some(call.operation),
        }
    }

    /// Take a token; `Some` (a refusal) when the bucket is empty.
    pub fn judge(&self, call: &Call<'_>) -> Option<Verdict> {
        if !self.applies(call) {
            return None;
        }
        let key = if self.spec.per_token { call.token.to_string() } else { String::new() };
        let shown = if self.spec.per_token { call.role.as_str() } else { "all" };
        let checked = self.limiter.check_key(&key);
        let left = checked.as_ref().map_or(0.0, |snapshot| f64::from(snapshot.remaining_burst_capacity()));
        self.last_seen.lock().unwrap_or_else(|p| p.into_inner()).insert(shown, (left, Instant::now()));
        match checked {
            Ok(_) => None,
            Err(not_until) => {
                self.refused.fetch_add(1, Ordering::SeqCst);
                let wait = not_until.wait_time_from(self.limiter.clock().now());
                // Retry-After is whole seconds: round up, so a client that honours it is never early.
                let retry = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
                // The limit's own status (429, or 503 as some clouds throttle), checked when it was set.
                let mut error = ApiError::new(
                    Kind::Status(self.spec.status),
                    codes::REQUEST_LIMIT_EXCEEDED,
                    format!(
                        "rate limit {} exceeded ({} calls, {}/s); retry after {retry} s",
                        self.id, self.spec.capacity, self.spec.refill_per_second
                    ),
                );
                error.headers = vec![
                    ("Retry-After".into(), retry.to_string()),
                    ("RateLimit-Limit".into(), self.spec.capacity.to_string()),
                    ("RateLimit-Remaining".into(), "0".into()),
                    ("RateLimit-Reset".into(), retry.to_string()),
                ];
                Some(Verdict::Refuse { error, fault: self.id.clone() })
            }
        }
    }

    pub fn to_api(&self) -> RateLimit {
        let capacity = f64::from(self.spec.capacity);
        let seen = self.last_seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut buckets: Vec<RateLimitBucket> = seen
            .into_iter()
            .map(|(key, (left, at))| {
                let refilled = left + at.elapsed().as_secs_f64() * self.spec.refill_per_second;
                RateLimitBucket { key: key.to_string(), tokens: refilled.min(capacity) }
            })
            .collect();
        if buckets.is_empty() && !self.spec.per_token {
            buckets.push(RateLimitBucket { key: "all".into(), tokens: capacity });
        }
        RateLimit {
            id: self.id.clone(),
            limit: self.spec.clone(),
            refused: self.refused.load(Ordering::SeqCst),
            buckets,
        }
    }
}

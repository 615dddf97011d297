//! Rate limiting as client-go does it: a token bucket (`--kube-api-qps`/`--kube-api-burst` on the Kubernetes
//! client; 10 qps / burst 100 on the node queue's retries) and per-item exponential backoff, combined as
//! `DefaultTypedControllerRateLimiter` combines them (the longer of the two delays wins).

use std::collections::HashMap;
use std::future::Future as _;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

// tokio's clock, so paused-time tests can drive the bucket.
use tokio::time::Instant;

/// A token bucket that hands out reservations (client-go's `rate.Limiter.Reserve`): taking a token never
/// fails, it says how long to wait for it, so waiters are served in order.
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    /// A full bucket. `qps` must be above zero and `burst` at least 1 (the flags are validated before).
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self { qps: qps.max(f64::MIN_POSITIVE), burst, state: Mutex::new((burst, Instant::now())) }
    }

    /// Take one token; the wait before it is usable.
    pub fn reserve(&self) -> Duration {
        self.reserve_at(Instant::now())
    }

    fn reserve_at(&self, now: Instant) -> Duration {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let left = self.refilled(*s, now) - 1.0;
        *s = (left, now.max(s.1));
        if left >= 0.0 { Duration::ZERO } else { Duration::from_secs_f64(-left / self.qps) }
    }

    /// Take a token only if one is there at `now` (client-go's passive limiter, `TryAccept`): a refusal takes
    /// nothing and keeps no one waiting.
    pub fn try_take_at(&self, now: Instant) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let tokens = self.refilled(*s, now);
        let taken = tokens >= 1.0;
        *s = (if taken { tokens - 1.0 } else { tokens }, now.max(s.1));
        taken
    }

    /// The tokens in the bucket at `now`, from its state (tokens, when).
    fn refilled(&self, (tokens, last): (f64, Instant), now: Instant) -> f64 {
        (tokens + now.saturating_duration_since(last).as_secs_f64() * self.qps).min(self.burst)
    }
}

/// Per-item exponential backoff (`ItemExponentialFailureRateLimiter`): `base·2ⁿ` after the n-th consecutive
/// failure of the same item, capped at `max`, forgotten after a success.
#[derive(Debug)]
pub struct ItemBackoff {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<String, u32>>,
}

impl ItemBackoff {
    pub fn new(base: Duration, max: Duration) -> Self {
        Self { base, max, failures: Mutex::default() }
    }

    /// Count a failure of `key`; the delay before its next try.
    pub fn failed(&self, key: &str) -> Duration {
        let mut f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let n = f.entry(key.to_string()).or_insert(0);
        let delay = self.base.saturating_mul(2u32.saturating_pow(*n)).min(self.max);
        *n = n.saturating_add(1);
        delay
    }

    pub fn forget(&self, key: &str) {
        self.failures.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }
}

/// The node queue's limiter (`DefaultTypedControllerRateLimiter`): per item 5 ms doubling to 1000 s, and all
/// retries together at most 10 a second after a burst of 100.
#[derive(Debug)]
pub struct ControllerRateLimiter {
    items: ItemBackoff,
    overall: TokenBucket,
}

impl Default for ControllerRateLimiter {
    fn default() -> Self {
        Self {
            items: ItemBackoff::new(Duration::from_millis(5), Duration::from_secs(1000)),
            overall: TokenBucket::new(10.0, 100),
        }
    }
}

impl ControllerRateLimiter {
    /// The delay before retrying `key` after a failure.
    pub fn when(&self, key: &str) -> Duration {
        self.items.failed(key).max(self.overall.reserve())
    }

    pub fn forget(&self, key: &str) {
        self.items.forget(key);
    }
}

/// A tower layer that holds each request until the bucket has a token for it: `--kube-api-qps` and
/// `--kube-api-burst` for the Kubernetes client, as client-go's `flowcontrol.NewTokenBucketRateLimiter`.
#[derive(Debug, Clone)]
pub struct ThrottleLayer {
    bucket: Arc<TokenBucket>,
}

impl ThrottleLayer {
    pub fn new(qps: f64, burst: u32) -> Self {
        Self { bucket: Arc::new(TokenBucket::new(qps, burst)) }
    }
}

impl<S> tower::Layer<S> for ThrottleLayer {
    type Service = Throttle<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Throttle { inner, bucket: self.bucket.clone(), wait: None, granted: false }
    }
}

/// See [`ThrottleLayer`]. Ready once a token is granted (and the inner service is ready); each call uses it.
pub struct Throttle<S> {
    inner: S,
    bucket: Arc<TokenBucket>,
    wait: Option<Pin<Box<tokio::time::Sleep>>>,
    granted: bool,
}

impl<S, R> tower::Service<R> for Throttle<S>
where
    S: tower::Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if !self.granted {
            if self.wait.is_none() {
                let delay = self.bucket.reserve();
                if !delay.is_zero() {
                    self.wait = Some(Box::pin(tokio::time::sleep(delay)));
                }
            }
            if let Some(w) = self.wait.as_mut() {
                if w.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.wait = None;
            }
            self.granted = true;
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        self.granted = false;
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_allows_the_burst_then_spaces_by_qps() {
        let b = TokenBucket::new(10.0, 3);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(b.reserve_at(t0), Duration::ZERO);
        }
        // Reservations queue up: the 4th waits 100 ms, the 5th 200 ms.
        assert_eq!(b.reserve_at(t0).as_millis(), 100);
        assert_eq!(b.reserve_at(t0).as_millis(), 200);
        // A second later the debt is paid and 8 tokens have come back (capped at the burst of 3).
        let t1 = t0 + Duration::from_secs(1);
        for _ in 0..3 {
            assert_eq!(b.reserve_at(t1), Duration::ZERO);
        }
        assert!(!b.reserve_at(t1).is_zero());
    }

    #[test]
    fn a_passive_take_refuses_without_owing() {
        let b = TokenBucket::new(10.0, 2);
        let t0 = Instant::now();
        assert!(b.try_take_at(t0) && b.try_take_at(t0));
        assert!(!b.try_take_at(t0) && !b.try_take_at(t0), "empty, and refusing takes nothing");
        // 100 ms later exactly one token is back: the refusals left no debt to pay first.
        let t1 = t0 + Duration::from_millis(100);
        assert!(b.try_take_at(t1));
        assert!(!b.try_take_at(t1));
    }

    #[test]
    fn item_backoff_doubles_per_item_and_resets() {
        let b = ItemBackoff::new(Duration::from_millis(5), Duration::from_secs(1000));
        assert_eq!(b.failed("a"), Duration::from_millis(5));
        assert_eq!(b.failed("a"), Duration::from_millis(10));
        assert_eq!(b.failed("b"), Duration::from_millis(5));
        for _ in 0..40 {
            b.failed("a");
        }
        assert_eq!(b.failed("a"), Duration::from_secs(1000));
        b.forget("a");
        assert_eq!(b.failed("a"), Duration::from_millis(5));
    }

    #[test]
    fn the_controller_limiter_takes_the_longer_delay() {
        let l = ControllerRateLimiter::default();
        // 100 retries of different items pass the bucket; the 101st waits for it (100 ms at 10 qps) even
        // though its own backoff is only 5 ms.
        for i in 0..100 {
            assert_eq!(l.when(&format!("n{i}")), Duration::from_millis(5));
        }
        let d = l.when("n100");
        assert!(d > Duration::from_millis(90) && d <= Duration::from_millis(100), "{d:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn throttle_holds_requests_beyond_the_burst() {
        use tower::{Layer, Service, ServiceExt};
        let mut svc = ThrottleLayer::new(2.0, 2).layer(tower::service_fn(|()| async { Ok::<_, ()>(()) }));
        let t0 = tokio::time::Instant::now();
        for _ in 0..4 {
            svc.ready().await.unwrap().call(()).await.unwrap();
        }
        // Two at once, then one every 500 ms.
        assert_eq!(t0.elapsed(), Duration::from_secs(1));
    }
}

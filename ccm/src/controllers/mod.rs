//! The controllers, one module each, and the `--controllers` flag's names (upstream's canonical names and
//! aliases, `*` for all and `-name` to disable one).

pub mod node;
pub mod node_lifecycle;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControllerName {
    CloudNode,
    CloudNodeLifecycle,
    Service,
    Route,
}

impl ControllerName {
    pub const ALL: [Self; 4] = [Self::CloudNode, Self::CloudNodeLifecycle, Self::Service, Self::Route];

    pub fn canonical(self) -> &'static str {
        match self {
            Self::CloudNode => "cloud-node-controller",
            Self::CloudNodeLifecycle => "cloud-node-lifecycle-controller",
            Self::Service => "service-lb-controller",
            Self::Route => "node-route-controller",
        }
    }

    pub fn alias(self) -> &'static str {
        match self {
            Self::CloudNode => "cloud-node",
            Self::CloudNodeLifecycle => "cloud-node-lifecycle",
            Self::Service => "service",
            Self::Route => "route",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.canonical() == s || c.alias() == s)
    }
}

/// The controllers `--controllers` enables, in a stable order.
pub fn enabled(flags: &[String]) -> Result<Vec<ControllerName>, String> {
    let mut all = false;
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for f in flags.iter().map(|f| f.trim()).filter(|f| !f.is_empty()) {
        if f == "*" {
            all = true;
            continue;
        }
        let (list, name) = match f.strip_prefix('-') {
            Some(n) => (&mut off, n),
            None => (&mut on, f),
        };
        list.push(
            ControllerName::parse(name).ok_or_else(|| format!("{name:?} is not in the list of known controllers"))?,
        );
    }
    Ok(ControllerName::ALL.into_iter().filter(|c| (all || on.contains(c)) && !off.contains(c)).collect())
}

/// Per-object exponential backoff, as client-go's `ItemExponentialFailureRateLimiter`: the delay doubles with
/// every failure of the same object, from `base` up to `max`, and resets after a success.
#[derive(Debug)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    pub fn new(base: Duration, max: Duration) -> Self {
        Self { base, max, failures: Mutex::default() }
    }

    /// Count a failure of `key` and return how long to wait before the next try.
    pub fn failed(&self, key: &str) -> Duration {
        let mut f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let n = f.entry(key.to_string()).or_insert(0);
        let delay = self.base.saturating_mul(2u32.saturating_pow(*n)).min(self.max);
        *n = n.saturating_add(1);
        delay
    }

    pub fn succeeded(&self, key: &str) {
        self.failures.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controllers_flag_takes_names_aliases_star_and_minus() {
        let v = |s: &[&str]| enabled(&s.iter().map(|x| x.to_string()).collect::<Vec<_>>());
        assert_eq!(v(&["*"]).unwrap().len(), 4);
        assert_eq!(
            v(&["*", "-route", "-service"]).unwrap(),
            [ControllerName::CloudNode, ControllerName::CloudNodeLifecycle]
        );
        assert_eq!(
            v(&["cloud-node-controller", "cloud-node-lifecycle"]).unwrap(),
            [ControllerName::CloudNode, ControllerName::CloudNodeLifecycle]
        );
        assert!(v(&["nodes"]).unwrap_err().contains("\"nodes\" is not in the list of known controllers"));
    }

    #[test]
    fn backoff_doubles_per_object_and_resets() {
        let b = Backoff::new(Duration::from_millis(5), Duration::from_secs(1000));
        assert_eq!(b.failed("a"), Duration::from_millis(5));
        assert_eq!(b.failed("a"), Duration::from_millis(10));
        assert_eq!(b.failed("b"), Duration::from_millis(5));
        for _ in 0..40 {
            b.failed("a");
        }
        assert_eq!(b.failed("a"), Duration::from_secs(1000));
        b.succeeded("a");
        assert_eq!(b.failed("a"), Duration::from_millis(5));
    }
}

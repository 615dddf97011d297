//! The `/metrics` families, by upstream's names, in the Prometheus text format (0.0.4) that upstream
//! components serve. A small registry of our own rather than `prometheus-client`, whose OpenMetrics encoder
//! appends `_total` to every counter: `cloudprovider_<provider>_api_request_errors` is a counter without it.
//!
//! - `workqueue_*{name}`: per controller queue (`Nodes` for cloud-node), as client-go's workqueue reports them;
//! - `running_managed_controllers{manager,name}` with upstream's legacy controller names;
//! - `leader_election_master_status{name}`;
//! - `cloudprovider_fakecloud_api_request_duration_seconds{request}` / `..._errors{request}`, `request` being
//!   the emulator's operation (`GetInstance`, `ListInstances`, ...);
//! - `node_controller_cloud_provider_taint_removal_delay_seconds`, `node_controller_initial_node_sync_delay_seconds`.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Prometheus' default buckets, as cloud providers use for their API latency histograms.
const DEFAULT_BUCKETS: [f64; 11] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

fn exponential(start: f64, factor: f64, count: i32) -> Vec<f64> {
    (0..count).map(|i| start * factor.powi(i)).collect()
}

struct Family<V> {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    labels: &'static [&'static str],
    values: Mutex<BTreeMap<Vec<String>, V>>,
}

impl<V: Default> Family<V> {
    fn new(name: &'static str, help: &'static str, kind: &'static str, labels: &'static [&'static str]) -> Self {
        Self { name, help, kind, labels, values: Mutex::default() }
    }

    fn with<R>(&self, label_values: &[&str], f: impl FnOnce(&mut V) -> R) -> R {
        debug_assert_eq!(label_values.len(), self.labels.len(), "{}: label values", self.name);
        let mut values = self.values.lock().unwrap_or_else(|p| p.into_inner());
        f(values.entry(label_values.iter().map(|v| v.to_string()).collect()).or_default())
    }

    fn header(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}\n# TYPE {} {}", self.name, self.help, self.name, self.kind);
    }

    fn label_set(&self, values: &[String], extra: Option<(&str, &str)>) -> String {
        let pairs: Vec<String> = self
            .labels
            .iter()
            .zip(values)
            .map(|(k, v)| (*k, v.as_str()))
            .chain(extra)
            .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
            .collect();
        if pairs.is_empty() { String::new() } else { format!("{{{}}}", pairs.join(",")) }
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', r"\\").replace('"', "\\\"").replace('\n', r"\n")
}

/// A monotonically increasing count per label set.
pub struct CounterVec(Family<f64>);

impl CounterVec {
    fn new(name: &'static str, help: &'static str, labels: &'static [&'static str]) -> Self {
        Self(Family::new(name, help, "counter", labels))
    }

    pub fn inc(&self, labels: &[&str]) {
        self.0.with(labels, |v| *v += 1.0);
    }

    pub fn get(&self, labels: &[&str]) -> f64 {
        self.0.with(labels, |v| *v)
    }

    fn render(&self, out: &mut String) {
        self.0.header(out);
        for (labels, v) in self.0.values.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = writeln!(out, "{}{} {v}", self.0.name, self.0.label_set(labels, None));
        }
    }
}

/// A value per label set that goes up and down.
pub struct GaugeVec(Family<f64>);

impl GaugeVec {
    fn new(name: &'static str, help: &'static str, labels: &'static [&'static str]) -> Self {
        Self(Family::new(name, help, "gauge", labels))
    }

    pub fn set(&self, labels: &[&str], value: f64) {
        self.0.with(labels, |v| *v = value);
    }

    pub fn get(&self, labels: &[&str]) -> f64 {
        self.0.with(labels, |v| *v)
    }

    fn render(&self, out: &mut String) {
        self.0.header(out);
        for (labels, v) in self.0.values.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = writeln!(out, "{}{} {v}", self.0.name, self.0.label_set(labels, None));
        }
    }
}

#[derive(Default)]
struct Hist {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

/// Observations per label set, in cumulative buckets.
pub struct HistogramVec {
    family: Family<Hist>,
    buckets: Vec<f64>,
}

impl HistogramVec {
    fn new(name: &'static str, help: &'static str, labels: &'static [&'static str], buckets: Vec<f64>) -> Self {
        Self { family: Family::new(name, help, "histogram", labels), buckets }
    }

    pub fn observe(&self, labels: &[&str], value: f64) {
        let buckets = &self.buckets;
        self.family.with(labels, |h| {
            h.counts.resize(buckets.len(), 0);
            for (c, le) in h.counts.iter_mut().zip(buckets) {
                if value <= *le {
                    *c += 1;
                }
            }
            h.sum += value;
            h.count += 1;
        });
    }

    pub fn count(&self, labels: &[&str]) -> u64 {
        self.family.with(labels, |h| h.count)
    }

    fn render(&self, out: &mut String) {
        let f = &self.family;
        f.header(out);
        for (labels, h) in f.values.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            for (i, le) in self.buckets.iter().enumerate() {
                let c = h.counts.get(i).copied().unwrap_or(0);
                let _ = writeln!(out, "{}_bucket{} {c}", f.name, f.label_set(labels, Some(("le", &le.to_string()))));
            }
            let _ = writeln!(out, "{}_bucket{} {}", f.name, f.label_set(labels, Some(("le", "+Inf"))), h.count);
            let _ = writeln!(out, "{}_sum{} {}", f.name, f.label_set(labels, None), h.sum);
            let _ = writeln!(out, "{}_count{} {}", f.name, f.label_set(labels, None), h.count);
        }
    }
}

/// Every family this CCM serves.
pub struct Metrics {
    pub running_managed_controllers: GaugeVec,
    pub leader_election_master_status: GaugeVec,
    pub api_request_duration: HistogramVec,
    pub api_request_errors: CounterVec,
    pub taint_removal_delay: HistogramVec,
    pub initial_node_sync_delay: HistogramVec,
    workqueue_depth: GaugeVec,
    workqueue_adds: CounterVec,
    workqueue_retries: CounterVec,
    workqueue_queue_duration: HistogramVec,
    workqueue_work_duration: HistogramVec,
    queues: Mutex<Vec<Arc<QueueState>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let node_delay_buckets = exponential(1.0, 4.0, 6);
        let work_buckets = exponential(10e-9, 10.0, 10);
        Self {
            running_managed_controllers: GaugeVec::new(
                "running_managed_controllers",
                "[BETA] Indicates where instances of a controller are currently running",
                &["manager", "name"],
            ),
            leader_election_master_status: GaugeVec::new(
                "leader_election_master_status",
                "[ALPHA] Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.",
                &["name"],
            ),
            api_request_duration: HistogramVec::new(
                "cloudprovider_fakecloud_api_request_duration_seconds",
                "[ALPHA] Latency of fakecloud API calls",
                &["request"],
                DEFAULT_BUCKETS.to_vec(),
            ),
            api_request_errors: CounterVec::new(
                "cloudprovider_fakecloud_api_request_errors",
                "[ALPHA] fakecloud API errors",
                &["request"],
            ),
            taint_removal_delay: HistogramVec::new(
                "node_controller_cloud_provider_taint_removal_delay_seconds",
                "[ALPHA] Number of seconds after node creation when NodeController removed the cloud-provider taint of a single node.",
                &[],
                node_delay_buckets.clone(),
            ),
            initial_node_sync_delay: HistogramVec::new(
                "node_controller_initial_node_sync_delay_seconds",
                "[ALPHA] Number of seconds after node creation when NodeController finished the initial synchronization of a single node.",
                &[],
                node_delay_buckets,
            ),
            workqueue_depth: GaugeVec::new("workqueue_depth", "[ALPHA] Current depth of workqueue", &["name"]),
            workqueue_adds: CounterVec::new(
                "workqueue_adds_total",
                "[ALPHA] Total number of adds handled by workqueue",
                &["name"],
            ),
            workqueue_retries: CounterVec::new(
                "workqueue_retries_total",
                "[ALPHA] Total number of retries handled by workqueue",
                &["name"],
            ),
            workqueue_queue_duration: HistogramVec::new(
                "workqueue_queue_duration_seconds",
                "[ALPHA] How long in seconds an item stays in workqueue before being requested.",
                &["name"],
                work_buckets.clone(),
            ),
            workqueue_work_duration: HistogramVec::new(
                "workqueue_work_duration_seconds",
                "[ALPHA] How long in seconds processing an item from workqueue takes.",
                &["name"],
                work_buckets,
            ),
            queues: Mutex::default(),
        }
    }
}

impl Metrics {
    /// The metrics of the work queue called `name` (upstream's queue names: `Nodes`, `service`, `Routes`).
    pub fn queue(self: &Arc<Self>, name: &str) -> Queue {
        let state = Arc::new(QueueState { name: name.to_string(), ..Default::default() });
        self.queues.lock().unwrap_or_else(|p| p.into_inner()).push(state.clone());
        self.workqueue_depth.set(&[name], 0.0);
        self.workqueue_adds.0.with(&[name], |_| ());
        self.workqueue_retries.0.with(&[name], |_| ());
        Queue { metrics: self.clone(), state }
    }

    /// Count a cloud API call.
    pub fn api_request(&self, request: &str, took: Duration, failed: bool) {
        self.api_request_duration.observe(&[request], took.as_secs_f64());
        if failed {
            self.api_request_errors.inc(&[request]);
        }
    }

    /// The text exposition of every family.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.api_request_duration.render(&mut out);
        self.api_request_errors.render(&mut out);
        self.leader_election_master_status.render(&mut out);
        self.taint_removal_delay.render(&mut out);
        self.initial_node_sync_delay.render(&mut out);
        self.running_managed_controllers.render(&mut out);
        self.workqueue_adds.render(&mut out);
        self.workqueue_depth.render(&mut out);
        self.render_running(&mut out);
        self.workqueue_queue_duration.render(&mut out);
        self.workqueue_retries.render(&mut out);
        self.workqueue_work_duration.render(&mut out);
        out
    }

    /// `workqueue_unfinished_work_seconds` and `workqueue_longest_running_processor_seconds`: computed from
    /// the work in progress when scraped, as client-go's `updateUnfinishedWork` does.
    fn render_running(&self, out: &mut String) {
        let now = Instant::now();
        let queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        let per_queue: Vec<(&str, f64, f64)> = queues
            .iter()
            .map(|q| {
                let running = q.running.lock().unwrap_or_else(|p| p.into_inner());
                let ages = running.values().map(|t| now.saturating_duration_since(*t).as_secs_f64());
                let (sum, max) = ages.fold((0.0, 0.0_f64), |(s, m), a| (s + a, m.max(a)));
                (q.name.as_str(), sum, max)
            })
            .collect();
        for (metric, help, pick) in [
            (
                "workqueue_longest_running_processor_seconds",
                "[ALPHA] How many seconds has the longest running processor for workqueue been running.",
                2,
            ),
            (
                "workqueue_unfinished_work_seconds",
                "[ALPHA] How many seconds of work has done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.",
                1,
            ),
        ] {
            let _ = writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} gauge");
            for (name, sum, max) in &per_queue {
                let v = if pick == 1 { sum } else { max };
                let _ = writeln!(out, "{metric}{{name=\"{}\"}} {v}", escape(name));
            }
        }
    }
}

#[derive(Default)]
struct QueueState {
    name: String,
    /// Items waiting, with when they were added (client-go's depth counts each item once however often it is
    /// added before being processed).
    pending: Mutex<HashMap<String, Instant>>,
    running: Mutex<HashMap<u64, Instant>>,
    next: AtomicU64,
}

/// One controller's queue metrics. The controllers run on kube's scheduler, so these are taken at its edges:
/// an add per watch event and per retry, an item leaving the queue when its sync starts.
#[derive(Clone)]
pub struct Queue {
    metrics: Arc<Metrics>,
    state: Arc<QueueState>,
}

impl Queue {
    pub fn add(&self, key: &str) {
        let name = self.state.name.as_str();
        self.metrics.workqueue_adds.inc(&[name]);
        let mut pending = self.state.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.entry(key.to_string()).or_insert_with(Instant::now);
        self.metrics.workqueue_depth.set(&[name], pending.len() as f64);
    }

    /// A failed item goes back with a delay (`AddRateLimited`): a retry and an add. It is not counted as waiting
    /// (nor its wait as queue time) during the delay, as client-go does not.
    pub fn retry(&self) {
        self.metrics.workqueue_retries.inc(&[&self.state.name]);
        self.metrics.workqueue_adds.inc(&[&self.state.name]);
    }

    /// `key`'s sync starts; the returned guard records its duration when dropped.
    pub fn start(&self, key: &str) -> Work {
        let name = self.state.name.as_str();
        let mut pending = self.state.pending.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(added) = pending.remove(key) {
            self.metrics.workqueue_queue_duration.observe(&[name], added.elapsed().as_secs_f64());
        }
        self.metrics.workqueue_depth.set(&[name], pending.len() as f64);
        drop(pending);
        let id = self.state.next.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        self.state.running.lock().unwrap_or_else(|p| p.into_inner()).insert(id, started);
        Work { queue: self.clone(), id, started }
    }
}

/// A sync in progress; see [`Queue::start`].
pub struct Work {
    queue: Queue,
    id: u64,
    started: Instant,
}

impl Drop for Work {
    fn drop(&mut self) {
        let q = &self.queue;
        q.state.running.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.id);
        q.metrics.workqueue_work_duration.observe(&[&q.state.name], self.started.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_render_in_the_text_format_with_upstream_names() {
        let m = Arc::new(Metrics::default());
        m.api_request("GetInstance", Duration::from_millis(7), false);
        m.api_request("GetInstance", Duration::from_millis(30), true);
        m.running_managed_controllers.set(&["cloud-controller-manager", "cloud-node"], 1.0);
        m.initial_node_sync_delay.observe(&[], 3.0);
        let text = m.render();
        for line in [
            "# TYPE cloudprovider_fakecloud_api_request_errors counter",
            "cloudprovider_fakecloud_api_request_errors{request=\"GetInstance\"} 1",
            "cloudprovider_fakecloud_api_request_duration_seconds_bucket{request=\"GetInstance\",le=\"0.01\"} 1",
            "cloudprovider_fakecloud_api_request_duration_seconds_bucket{request=\"GetInstance\",le=\"+Inf\"} 2",
            "cloudprovider_fakecloud_api_request_duration_seconds_count{request=\"GetInstance\"} 2",
            "running_managed_controllers{manager=\"cloud-controller-manager\",name=\"cloud-node\"} 1",
            "node_controller_initial_node_sync_delay_seconds_bucket{le=\"1\"} 0",
            "node_controller_initial_node_sync_delay_seconds_bucket{le=\"4\"} 1",
            "node_controller_initial_node_sync_delay_seconds_bucket{le=\"1024\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
    }

    #[test]
    fn queue_depth_counts_each_waiting_item_once() {
        let m = Arc::new(Metrics::default());
        let q = m.queue("Nodes");
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(m.workqueue_depth.get(&["Nodes"]), 2.0);
        assert_eq!(m.workqueue_adds.get(&["Nodes"]), 3.0);
        let work = q.start("a");
        assert_eq!(m.workqueue_depth.get(&["Nodes"]), 1.0);
        assert!(m.render().contains("workqueue_longest_running_processor_seconds{name=\"Nodes\"}"));
        drop(work);
        q.retry();
        assert_eq!(m.workqueue_retries.get(&["Nodes"]), 1.0);
        assert_eq!(m.workqueue_adds.get(&["Nodes"]), 4.0);
        assert_eq!(m.workqueue_depth.get(&["Nodes"]), 1.0, "a retry waiting out its delay is not in the queue");
        assert_eq!(m.workqueue_work_duration.count(&["Nodes"]), 1);
        assert_eq!(m.workqueue_queue_duration.count(&["Nodes"]), 1);
        let text = m.render();
        assert!(text.contains("workqueue_unfinished_work_seconds{name=\"Nodes\"} 0\n"), "{text}");
    }
}

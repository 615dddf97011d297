//! What each simulated kubelet does when. A pure planner: given the running and hung machines, the Nodes as the
//! watch sees them and what each kubelet did last, it returns the API calls due now. Everything else (I/O,
//! concurrency) lives in the parent module, so these rules are unit-tested without a cluster.
//!
//! The split with kwok: kwok renews the Leases and runs the pods; this planner registers Nodes, reports their
//! status, and silences and resumes them. The status is not left to a kwok stage because kwok plays a delayed
//! stage even after the Node's Lease was taken from it (it checks only when it queues the stage), so a stage
//! could report a stopped machine Ready minutes later; decided here, a silent machine never speaks.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fakecloud_api::Instance;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;

use super::objects::{self, Silence};

/// A machine tagged with this, value `none`, gets no simulated kubelet: its Node, if any, is someone else's to
/// register and keep alive — a test playing the kubelet itself (a Node named otherwise than its machine, or one
/// registered without a providerID), or a machine whose kubelet never comes up.
pub const NO_KUBELET_TAG: &str = "fakecloud.io/kubelet";

/// The kubelet's lease controller backs off to at most 7 s between failed renewals.
const MAX_BACKOFF: Duration = Duration::from_secs(7);

/// How often each kubelet does what.
#[derive(Debug, Clone, Copy)]
pub struct Periods {
    pub poll: Duration,
    /// The status report when nothing changed (the kubelet's `nodeStatusReportFrequency`).
    pub status: Duration,
    /// How long a started machine's kubelet reports NotReady (its network not up yet) before Ready.
    pub not_ready: Duration,
}

/// What the simulation remembers about one kubelet (one instance name).
#[derive(Debug)]
pub struct Kubelet {
    /// Its instance was running at the last look: the machine is up.
    running: bool,
    /// Its machine is hung (see `/v1/hangs`): up, but the kubelet says nothing.
    hung: bool,
    /// Its Node's Lease may be held by this simulation: taken when the machine fell silent, or not known
    /// otherwise (the first sight of a Node registered before). Released before the kubelet speaks again.
    silenced: bool,
    /// Until when it reports NotReady after its machine started.
    ready_at: Option<Instant>,
    /// When the status report is due; `None`: at once.
    next_status: Option<Instant>,
    /// Calls failed in a row, and when to try again.
    failures: u32,
    retry_at: Option<Instant>,
}

impl Default for Kubelet {
    fn default() -> Self {
        Self {
            running: false,
            hung: false,
            silenced: true,
            ready_at: None,
            next_status: None,
            failures: 0,
            retry_at: None,
        }
    }
}

/// One kubelet's call for this round.
#[derive(Debug)]
pub struct Job {
    pub name: String,
    pub action: Action,
}

#[derive(Debug)]
pub enum Action {
    /// No Node of this name: create it (Ready, or not yet), then release a Lease an earlier Node of the name
    /// left silenced.
    Register { instance: Box<Instance>, ready: bool },
    /// Post the status (a strategic-merge patch): on a change at once, else every status period.
    Report { status: serde_json::Value },
    /// The machine is up again: post the status, then release the Lease so that kwok renews it again.
    Resume { status: serde_json::Value },
    /// The machine stopped or hung: take its Node's Lease (the Node's UID owns a Lease made anew).
    Silence { uid: String, why: Silence },
}

/// The machines that are up: the running instances by name, but those tagged [`NO_KUBELET_TAG`]`=none`. Should
/// two running instances share a name, the newest (listed last; the emulator lists oldest first) is the machine
/// behind the Node.
pub fn running_by_name(instances: Vec<Instance>) -> BTreeMap<String, Instance> {
    let simulated = |i: &Instance| i.tags.get(NO_KUBELET_TAG).is_none_or(|v| v != "none");
    instances.into_iter().filter(simulated).map(|i| (i.name.clone(), i)).collect()
}

/// The calls due at `now`. Updates `kubelets`: the Node of a machine no longer running, or `hung` (by name),
/// is silenced (so the controller manager marks it unreachable, as for a dead kubelet); one whose machine runs
/// again resumes at once — NotReady for `periods.not_ready` after a start, as a real node until its network is
/// up; Ready at once after a hang.
pub fn plan(
    running: &BTreeMap<String, Instance>,
    hung: &BTreeSet<String>,
    node_of: impl Fn(&str) -> Option<Arc<Node>>,
    kubelets: &mut HashMap<String, Kubelet>,
    now: Instant,
    wall: Timestamp,
    periods: &Periods,
) -> Vec<Job> {
    let mut jobs = Vec::new();
    // Machines no longer running fall silent. Forgotten once no Node is left (the CCM deletes a terminated
    // machine's Node), so that a later start of the name is a fresh one.
    kubelets.retain(|name, k| {
        if running.contains_key(name) {
            return true;
        }
        let Some(node) = node_of(name) else { return false };
        if std::mem::take(&mut k.running) {
            tracing::info!(node = %name, "instance no longer running; its kubelet falls silent");
        }
        if !k.silenced && !k.backing_off(now) {
            let uid = node.metadata.uid.clone().unwrap_or_default();
            jobs.push(Job { name: name.clone(), action: Action::Silence { uid, why: Silence::Stopped } });
        }
        true
    });
    for (name, inst) in running {
        let k = kubelets.entry(name.clone()).or_default();
        if !k.running {
            // (Re)started machine: its network comes up after the window.
            (k.running, k.ready_at, k.next_status) = (true, Some(now + periods.not_ready), None);
        }
        if hung.contains(name) != k.hung {
            k.hung = !k.hung;
            if k.hung {
                tracing::info!(node = %name, "machine hung; its kubelet falls silent");
            } else {
                tracing::info!(node = %name, "machine resumed; its kubelet reports again");
                (k.next_status, k.retry_at) = (None, None);
            }
        }
        if k.backing_off(now) {
            continue;
        }
        let ready = k.ready_at.is_none_or(|t| now >= t);
        let action = match (node_of(name), k.hung) {
            // A hung machine registers nothing.
            (None, true) => continue,
            (None, false) => Action::Register { instance: Box::new(inst.clone()), ready },
            (Some(_), true) if k.silenced => continue,
            (Some(node), true) => {
                Action::Silence { uid: node.metadata.uid.clone().unwrap_or_default(), why: Silence::Hung }
            }
            (Some(node), false) if k.silenced => {
                Action::Resume { status: objects::status_patch(inst, &node, wall, ready) }
            }
            (Some(node), false) => {
                // A Node not showing what this kubelet reports (its network just came up, or it was marked
                // Unknown) gets its status at once, as a kubelet reports a change.
                if k.next_status.is_some_and(|t| now < t) && objects::reports(&node, ready) {
                    continue;
                }
                Action::Report { status: objects::status_patch(inst, &node, wall, ready) }
            }
        };
        jobs.push(Job { name: name.clone(), action });
    }
    jobs
}

impl Kubelet {
    fn backing_off(&self, now: Instant) -> bool {
        self.retry_at.is_some_and(|t| now < t)
    }

    /// Record a call that succeeded. The first report after a (re)start is followed by one a fraction of a
    /// period later, fixed per name, so a thousand kubelets started together do not report in lockstep.
    pub fn succeeded(&mut self, name: &str, action: &Action, planned_at: Instant, periods: &Periods) {
        match action {
            Action::Silence { .. } => self.silenced = true,
            Action::Register { .. } | Action::Resume { .. } | Action::Report { .. } => {
                self.silenced = false;
                let after = match self.next_status {
                    None => periods.status.mul_f64(0.5 + 0.5 * phase(name)),
                    Some(_) => periods.status,
                };
                self.next_status = Some(planned_at + after);
            }
        }
        self.failures = 0;
        self.retry_at = None;
    }

    /// Record a failed call: try again after an exponential backoff from one poll up to [`MAX_BACKOFF`].
    pub fn failed(&mut self, now: Instant, periods: &Periods) {
        self.failures = self.failures.saturating_add(1);
        let backoff = periods.poll.saturating_mul(1 << self.failures.min(8).saturating_sub(1)).min(MAX_BACKOFF);
        self.retry_at = Some(now + backoff);
    }
}

/// A stable fraction in [0, 1) per name (FNV-1a), to spread reports over a period.
fn phase(name: &str) -> f64 {
    (fnv1a(name) % 10_000) as f64 / 10_000.0
}

/// FNV-1a: a stable hash, here and for naming a simulation's Nodes to kwok.
pub fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelets::objects::{Shape, node};

    const PERIODS: Periods =
        Periods { poll: Duration::from_secs(1), status: Duration::from_secs(300), not_ready: Duration::ZERO };
    const NONE_HUNG: &BTreeSet<String> = &BTreeSet::new();

    fn inst(name: &str) -> Instance {
        serde_json::from_value(serde_json::json!({
            "id": format!("i-{name}"), "name": name, "zone": "local-1a", "region": "local-1",
            "instance_type": "fc.small", "market": "on-demand", "state": "running", "private_ip": "10.0.0.9",
            "provider_id": format!("fakecloud://local-1a/i-{name}"), "tags": {},
            "created_at": "2026-11-22T00:00:00Z", "state_changed_at": "2026-11-22T00:00:00Z",
        }))
        .expect("a valid instance")
    }

    fn registered_as(name: &str, ready: bool) -> Arc<Node> {
        let mut n = node(&inst(name), Shape::FALLBACK, "v1.37.2", &[], ("k", "v"), Timestamp::now(), ready);
        n.metadata.uid = Some(format!("uid-{name}"));
        Arc::new(n)
    }

    fn registered(name: &str) -> Arc<Node> {
        registered_as(name, true)
    }

    fn kinds(jobs: &[Job]) -> Vec<(String, &'static str)> {
        jobs.iter()
            .map(|j| {
                let kind = match &j.action {
                    Action::Register { .. } => "register",
                    Action::Report { .. } => "report",
                    Action::Resume { .. } => "resume",
                    Action::Silence { why: Silence::Stopped, .. } => "silence (stopped)",
                    Action::Silence { why: Silence::Hung, .. } => "silence (hung)",
                };
                (j.name.clone(), kind)
            })
            .collect()
    }

    fn one(name: &str, kind: &'static str) -> [(String, &'static str); 1] {
        [(name.to_string(), kind)]
    }

    fn run(jobs: &[Job], kubelets: &mut HashMap<String, Kubelet>, at: Instant) {
        for j in jobs {
            kubelets.get_mut(&j.name).expect("planned").succeeded(&j.name, &j.action, at, &PERIODS);
        }
    }

    #[test]
    fn a_machine_tagged_without_a_kubelet_gets_none() {
        let mut own = inst("own");
        own.tags.insert(NO_KUBELET_TAG.into(), "none".into());
        let mut other = inst("other");
        other.tags.insert(NO_KUBELET_TAG.into(), "simulated".into());
        let running = running_by_name(vec![own, other, inst("plain")]);
        assert_eq!(running.keys().collect::<Vec<_>>(), ["other", "plain"]);
    }

    #[test]
    fn registers_reports_on_schedule_and_silences_the_node_when_the_instance_stops() {
        let t0 = Instant::now();
        let wall = Timestamp::now();
        let mut ks = HashMap::new();
        let running = running_by_name(vec![inst("a")]);
        let jobs = plan(&running, NONE_HUNG, |_| None, &mut ks, t0, wall, &PERIODS);
        assert_eq!(kinds(&jobs), one("a", "register"));
        run(&jobs, &mut ks, t0);

        let node = registered("a");
        let seen = |_: &str| Some(node.clone());
        assert!(plan(&running, NONE_HUNG, seen, &mut ks, t0 + Duration::from_secs(1), wall, &PERIODS).is_empty());
        // The first report after a start comes a fraction of a period later (spread per name), then every period.
        let report_at = ks["a"].next_status.expect("scheduled");
        assert!((t0 + Duration::from_secs(150)..t0 + Duration::from_secs(300)).contains(&report_at));
        let jobs = plan(&running, NONE_HUNG, seen, &mut ks, report_at, wall, &PERIODS);
        assert_eq!(kinds(&jobs), one("a", "report"));
        run(&jobs, &mut ks, report_at);
        assert_eq!(ks["a"].next_status, Some(report_at + Duration::from_secs(300)));

        // Stopped: the Lease taken once, then nothing, however long.
        let none = BTreeMap::new();
        let jobs = plan(&none, NONE_HUNG, seen, &mut ks, t0 + Duration::from_secs(400), wall, &PERIODS);
        assert_eq!(kinds(&jobs), one("a", "silence (stopped)"));
        run(&jobs, &mut ks, t0 + Duration::from_secs(400));
        assert!(plan(&none, NONE_HUNG, seen, &mut ks, t0 + Duration::from_secs(9000), wall, &PERIODS).is_empty());
        // Running again: status and the Lease released at once.
        let jobs = plan(&running, NONE_HUNG, seen, &mut ks, t0 + Duration::from_secs(9001), wall, &PERIODS);
        assert_eq!(kinds(&jobs), one("a", "resume"));
    }

    #[test]
    fn a_node_first_seen_is_resumed_and_one_gone_with_its_machine_is_forgotten() {
        let t0 = Instant::now();
        let wall = Timestamp::now();
        let mut ks = HashMap::new();
        let running = running_by_name(vec![inst("a")]);
        // Registered before this simulation started: its Lease may be a silenced one, so it is released.
        let jobs = plan(&running, NONE_HUNG, |_| Some(registered("a")), &mut ks, t0, wall, &PERIODS);
        assert_eq!(kinds(&jobs), one("a", "resume"));
        run(&jobs, &mut ks, t0);
        // Terminated and its Node deleted: nothing to silence, and the name is forgotten.
        assert!(plan(&BTreeMap::new(), NONE_HUNG, |_| None, &mut ks, t0, wall, &PERIODS).is_empty());
        assert!(ks.is_empty());
    }

    #[test]
    fn a_node_marked_unknown_gets_status_at_once_and_a_deleted_one_is_registered_again() {
        let t0 = Instant::now();
        let wall = Timestamp::now();
        let mut ks = HashMap::new();
        let running = running_by_name(vec![inst("a")]);
        run(&plan(&running, NONE_HUNG, |_| None, &mut ks, t0, wall, &PERIODS), &mut ks, t0);
        let mut unknown = (*registered("a")).clone();
        for c in unknown.status.as_mut().and_then(|s| s.conditions.as_mut()).expect("conditions") {
            c.status = "Unknown".into();
        }
        let unknown = Arc::new(unknown);
        let jobs =
            plan(&running, NONE_HUNG, |_| Some(unknown.clone()), &mut ks, t0 + Duration::from_secs(1), wall, &PERIODS);
        assert_eq!(kinds(&jobs), one("a", "report"));
        let jobs = plan(&running, NONE_HUNG, |_| None, &mut ks, t0 + Duration::from_secs(2), wall, &PERIODS);
        assert_eq!(kinds(&jobs), one("a", "register"));
    }

    #[test]
    fn a_started_machine_reports_not_ready_for_the_window_then_ready_at_once() {
        let periods = Periods { not_ready: Duration::from_secs(15), ..PERIODS };
        let t0 = Instant::now();
        let wall = Timestamp::now();
        let mut ks = HashMap::new();
        let running = running_by_name(vec![inst("a")]);
        let jobs = plan(&running, NONE_HUNG, |_| None, &mut ks, t0, wall, &periods);
        assert!(matches!(jobs[0].action, Action::Register { ready: false, .. }));
        run(&jobs, &mut ks, t0);
        let not_ready = registered_as("a", false);
        let seen = |_: &str| Some(not_ready.clone());
        assert!(plan(&running, NONE_HUNG, seen, &mut ks, t0 + Duration::from_secs(1), wall, &periods).is_empty());
        // The window is over: Ready is posted at once, not at the next status period.
        let jobs = plan(&running, NONE_HUNG, seen, &mut ks, t0 + Duration::from_secs(15), wall, &periods);
        let Action::Report { status } = &jobs[0].action else { panic!("status due: {jobs:?}") };
        let ready = status["status"]["conditions"].as_array().and_then(|c| c.iter().find(|c| c["type"] == "Ready"));
        assert_eq!(ready.map(|c| c["status"].clone()), Some("True".into()));
    }

    #[test]
    fn a_hung_machine_is_silenced_once_and_resumes_ready_at_once() {
        let periods = Periods { not_ready: Duration::from_secs(15), ..PERIODS };
        let t0 = Instant::now();
        let wall = Timestamp::now();
        let mut ks = HashMap::new();
        let running = running_by_name(vec![inst("a"), inst("b")]);
        run(&plan(&running, NONE_HUNG, |_| None, &mut ks, t0, wall, &periods), &mut ks, t0);
        let seen = |name: &str| Some(registered(name));
        let hung: BTreeSet<String> = ["a".to_string()].into();
        let later = t0 + Duration::from_secs(60);
        let jobs = plan(&running, &hung, seen, &mut ks, later, wall, &periods);
        assert_eq!(kinds(&jobs), one("a", "silence (hung)"), "only a's kubelet falls silent");
        run(&jobs, &mut ks, later);
        // Still hung a minute on, still silent; the machine is running, so its kubelet is not forgotten.
        assert!(plan(&running, &hung, seen, &mut ks, later + Duration::from_secs(60), wall, &periods).is_empty());
        let jobs = plan(&running, NONE_HUNG, seen, &mut ks, later + Duration::from_secs(61), wall, &periods);
        assert_eq!(kinds(&jobs), one("a", "resume"));
        let Action::Resume { status } = &jobs[0].action else { unreachable!() };
        let ready = status["status"]["conditions"].as_array().and_then(|c| c.iter().find(|c| c["type"] == "Ready"));
        assert_eq!(ready.map(|c| c["status"].clone()), Some("True".into()), "no startup window after a hang");
    }

    #[test]
    fn failures_back_off_up_to_seven_seconds() {
        let t0 = Instant::now();
        let wall = Timestamp::now();
        let mut ks = HashMap::new();
        let running = running_by_name(vec![inst("a")]);
        let mut at = t0;
        let mut gaps = Vec::new();
        for _ in 0..6 {
            let jobs = plan(&running, NONE_HUNG, |_| None, &mut ks, at, wall, &PERIODS);
            assert_eq!(jobs.len(), 1);
            ks.get_mut("a").expect("planned").failed(at, &PERIODS);
            let retry = ks["a"].retry_at.expect("retry");
            assert!(
                plan(&running, NONE_HUNG, |_| None, &mut ks, retry - Duration::from_millis(1), wall, &PERIODS)
                    .is_empty()
            );
            gaps.push((retry - at).as_secs());
            at = retry;
        }
        assert_eq!(gaps, [1, 2, 4, 7, 7, 7]);
        // A success clears the backoff.
        let jobs = plan(&running, NONE_HUNG, |_| None, &mut ks, at, wall, &PERIODS);
        run(&jobs, &mut ks, at);
        assert_eq!(ks["a"].failures, 0);
    }

    #[test]
    fn reports_of_kubelets_started_together_are_spread() {
        let t0 = Instant::now();
        let wall = Timestamp::now();
        let mut ks = HashMap::new();
        let running = running_by_name((0..1000).map(|n| inst(&format!("n{n:04}"))).collect());
        let jobs = plan(&running, NONE_HUNG, |_| None, &mut ks, t0, wall, &PERIODS);
        run(&jobs, &mut ks, t0);
        let mut per_tenth = [0usize; 11];
        for k in ks.values() {
            let due = k.next_status.expect("scheduled") - t0;
            assert!((Duration::from_secs(150)..=Duration::from_secs(300)).contains(&due), "{due:?}");
            per_tenth[(due.as_secs() / 30) as usize] += 1;
        }
        assert!(per_tenth.iter().all(|&n| n < 300), "reports bunch up: {per_tenth:?}");
    }

    #[test]
    fn the_newest_running_instance_of_a_name_wins() {
        let mut old = inst("a");
        old.id = "i-old".into();
        let running = running_by_name(vec![old, inst("a")]);
        assert_eq!(running["a"].id, "i-a");
    }
}

//! When each simulated kubelet acts. A pure planner: given the running instances, the Nodes as the watch sees
//! them and what each kubelet did last, it returns the API calls due now. Everything else (I/O, concurrency)
//! lives in the parent module, so these rules are unit-tested without a cluster.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fakecloud_api::Instance;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;

use super::objects;

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
    pub lease: Duration,
    pub status: Duration,
    /// How long a started machine's kubelet reports NotReady (its network not up yet) before Ready.
    pub not_ready: Duration,
}

/// What the simulation remembers about one kubelet (one instance name).
#[derive(Debug, Default)]
pub struct Kubelet {
    /// Its instance was running at the last look: the machine is up.
    alive: bool,
    /// Its machine is hung (see `/v1/hangs`): up, but the kubelet says nothing.
    hung: bool,
    /// Until when it reports NotReady after its machine started.
    ready_at: Option<Instant>,
    /// When the Lease is due; `None`: at once (just started or resumed).
    next_lease: Option<Instant>,
    /// When the status heartbeat is due; `None`: at once.
    next_status: Option<Instant>,
    /// Calls failed in a row, and when to try again.
    failures: u32,
    retry_at: Option<Instant>,
}

/// One kubelet's calls for this round.
#[derive(Debug)]
pub struct Job {
    pub instance: Instance,
    pub action: Action,
}

#[derive(Debug)]
pub enum Action {
    /// No Node of this name: create it (Ready, or not yet), then its Lease.
    Register { ready: bool },
    /// The Node exists (with this UID): post `status` (a strategic-merge patch) and/or renew the Lease.
    Heartbeat { uid: String, status: Option<serde_json::Value>, lease: bool },
}

impl Action {
    /// (lease renewed, status posted) when the call succeeds.
    fn renews(&self) -> (bool, bool) {
        match self {
            Action::Register { .. } => (true, true),
            Action::Heartbeat { status, lease, .. } => (*lease, status.is_some()),
        }
    }
}

/// The machines that are up: the running instances by name, but those tagged [`NO_KUBELET_TAG`]`=none`. Should
/// two running instances share a name, the newest (listed last; the emulator lists oldest first) is the machine
/// behind the Node.
pub fn running_by_name(instances: Vec<Instance>) -> BTreeMap<String, Instance> {
    let simulated = |i: &Instance| i.tags.get(NO_KUBELET_TAG).is_none_or(|v| v != "none");
    instances.into_iter().filter(simulated).map(|i| (i.name.clone(), i)).collect()
}

/// The calls due at `now`. Updates `kubelets`: a kubelet whose instance is no longer running, or whose machine
/// is `hung` (by name), falls silent (nothing is planned for it, so its Lease and Ready heartbeat lapse and the
/// controller manager marks the Node unreachable); one whose instance runs again resumes at once — NotReady for
/// `periods.not_ready` after a start, as a real node until its network is up; at once Ready after a hang.
pub fn plan(
    running: &BTreeMap<String, Instance>,
    hung: &BTreeSet<String>,
    node_of: impl Fn(&str) -> Option<Arc<Node>>,
    kubelets: &mut HashMap<String, Kubelet>,
    now: Instant,
    wall: Timestamp,
    periods: &Periods,
) -> Vec<Job> {
    for (name, k) in kubelets.iter_mut() {
        if k.alive && !running.contains_key(name) {
            tracing::info!(node = %name, "instance no longer running; its kubelet falls silent");
            k.alive = false;
        }
    }
    // Forget silent kubelets (names of terminated instances would pile up): a later start is a fresh start.
    kubelets.retain(|_, k| k.alive);
    let mut jobs = Vec::new();
    for (name, inst) in running {
        let k = kubelets.entry(name.clone()).or_default();
        if !k.alive {
            // (Re)started machine: register or resume at once.
            *k = Kubelet { alive: true, ready_at: Some(now + periods.not_ready), ..Kubelet::default() };
        }
        if hung.contains(name) != k.hung {
            k.hung = !k.hung;
            if k.hung {
                tracing::info!(node = %name, "machine hung; its kubelet falls silent");
                continue;
            }
            tracing::info!(node = %name, "machine resumed; its kubelet reports again");
            (k.next_lease, k.next_status, k.retry_at) = (None, None, None);
        }
        if k.hung || k.retry_at.is_some_and(|t| now < t) {
            continue;
        }
        let ready = k.ready_at.is_none_or(|t| now >= t);
        let action = match node_of(name) {
            None => Action::Register { ready },
            Some(node) => {
                // A Node not showing what this kubelet reports (marked Unknown while it was silent, or its network
                // just came up) gets its status at once.
                let status_due = k.next_status.is_none_or(|t| now >= t) || !objects::reports(&node, ready);
                let lease_due = k.next_lease.is_none_or(|t| now >= t);
                if !status_due && !lease_due {
                    continue;
                }
                Action::Heartbeat {
                    uid: node.metadata.uid.clone().unwrap_or_default(),
                    status: status_due.then(|| objects::status_patch(inst, &node, wall, ready)),
                    lease: lease_due,
                }
            }
        };
        jobs.push(Job { instance: inst.clone(), action });
    }
    jobs
}

impl Kubelet {
    /// Record a round's calls that succeeded. The first renewal after a (re)start is followed by one a fraction
    /// of a period later, fixed per name, so a thousand kubelets started together do not renew in lockstep.
    pub fn succeeded(&mut self, name: &str, action: &Action, planned_at: Instant, periods: &Periods) {
        let (lease, status) = action.renews();
        let next = |prev: Option<Instant>, period: Duration| {
            let after = if prev.is_none() { period.mul_f64(0.5 + 0.5 * phase(name)) } else { period };
            Some(planned_at + after)
        };
        if lease {
            self.next_lease = next(self.next_lease, periods.lease);
        }
        if status {
            self.next_status = next(self.next_status, periods.status);
        }
        self.failures = 0;
        self.retry_at = None;
    }

    /// Record a failed round: try again after an exponential backoff from one poll up to [`MAX_BACKOFF`].
    pub fn failed(&mut self, now: Instant, periods: &Periods) {
        self.failures = self.failures.saturating_add(1);
        let backoff = periods.poll.saturating_mul(1 << self.failures.min(8).saturating_sub(1)).min(MAX_BACKOFF);
        self.retry_at = Some(now + backoff);
    }
}

/// A stable fraction in [0, 1) per name (FNV-1a), to spread renewals over a period.
fn phase(name: &str) -> f64 {
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    (hash % 10_000) as f64 / 10_000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelets::objects::{Shape, node};

    const PERIODS: Periods = Periods {
        poll: Duration::from_secs(1),
        lease: Duration::from_secs(10),
        status: Duration::from_secs(20),
        not_ready: Duration::ZERO,
    };
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

    fn registered(name: &str) -> Arc<Node> {
        let mut n = node(&inst(name), Shape::FALLBACK, "v1.37.2", &[], Timestamp::now(), true);
        n.metadata.uid = Some(format!("uid-{name}"));
        Arc::new(n)
    }

    fn kinds(jobs: &[Job]) -> Vec<(String, &'static str)> {
        jobs.iter()
            .map(|j| {
                let kind = match &j.action {
                    Action::Register { .. } => "register",
                    Action::Heartbeat { status: Some(_), lease: true, .. } => "status+lease",
                    Action::Heartbeat { status: Some(_), lease: false, .. } => "status",
                    Action::Heartbeat { status: None, .. } => "lease",
                };
                (j.instance.name.clone(), kind)
            })
            .collect()
    }

    fn run(jobs: &[Job], kubelets: &mut HashMap<String, Kubelet>, at: Instant) {
        for j in jobs {
            kubelets.get_mut(&j.instance.name).expect("planned").succeeded(&j.instance.name, &j.action, at, &PERIODS);
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
    fn registers_then_renews_on_schedule_and_falls_silent_when_the_instance_stops() {
        let t0 = Instant::now();
        let wall = Timestamp::now();
        let mut ks = HashMap::new();
        let running = running_by_name(vec![inst("a")]);
        let jobs = plan(&running, NONE_HUNG, |_| None, &mut ks, t0, wall, &PERIODS);
        assert_eq!(kinds(&jobs), [("a".to_string(), "register")]);
        run(&jobs, &mut ks, t0);

        let node = registered("a");
        let seen = |_: &str| Some(node.clone());
        assert!(
            plan(&running, NONE_HUNG, seen, &mut ks, t0 + Duration::from_secs(1), wall, &PERIODS).is_empty(),
            "nothing due yet"
        );
        // The first renewal after a start comes a fraction of a period later (spread per name), then every period.
        let (lease_at, status_at) = (ks["a"].next_lease.expect("lease"), ks["a"].next_status.expect("status"));
        assert!((t0 + Duration::from_secs(5)..t0 + Duration::from_secs(10)).contains(&lease_at));
        assert!((t0 + Duration::from_secs(10)..t0 + Duration::from_secs(20)).contains(&status_at));
        assert!(
            plan(&running, NONE_HUNG, seen, &mut ks, lease_at - Duration::from_millis(1), wall, &PERIODS).is_empty()
        );
        let jobs = plan(&running, NONE_HUNG, seen, &mut ks, lease_at, wall, &PERIODS);
        assert_eq!(kinds(&jobs), [("a".to_string(), "lease")]);
        run(&jobs, &mut ks, lease_at);
        assert_eq!(ks["a"].next_lease, Some(lease_at + Duration::from_secs(10)));
        let jobs =
            plan(&running, NONE_HUNG, seen, &mut ks, status_at.max(lease_at + Duration::from_secs(10)), wall, &PERIODS);
        assert_eq!(kinds(&jobs), [("a".to_string(), "status+lease")]);

        // Stopped: nothing planned, however long.
        let none = BTreeMap::new();
        assert!(plan(&none, NONE_HUNG, seen, &mut ks, t0 + Duration::from_secs(100), wall, &PERIODS).is_empty());
        // Running again: status (Ready, with a transition) and Lease at once.
        let jobs = plan(&running, NONE_HUNG, seen, &mut ks, t0 + Duration::from_secs(101), wall, &PERIODS);
        assert_eq!(kinds(&jobs), [("a".to_string(), "status+lease")]);
    }

    #[test]
    fn a_node_marked_unknown_gets_status_at_once_and_a_deleted_one_is_registered_again() {
        let t0 = Instant::now();
        let wall = Timestamp::now();
        let mut ks = HashMap::new();
        let running = running_by_name(vec![inst("a")]);
        let jobs = plan(&running, NONE_HUNG, |_| Some(registered("a")), &mut ks, t0, wall, &PERIODS);
        run(&jobs, &mut ks, t0);
        let mut unknown = (*registered("a")).clone();
        for c in unknown.status.as_mut().and_then(|s| s.conditions.as_mut()).expect("conditions") {
            c.status = "Unknown".into();
        }
        let unknown = Arc::new(unknown);
        let jobs =
            plan(&running, NONE_HUNG, |_| Some(unknown.clone()), &mut ks, t0 + Duration::from_secs(1), wall, &PERIODS);
        assert_eq!(kinds(&jobs), [("a".to_string(), "status")]);
        let jobs = plan(&running, NONE_HUNG, |_| None, &mut ks, t0 + Duration::from_secs(2), wall, &PERIODS);
        assert_eq!(kinds(&jobs), [("a".to_string(), "register")]);
    }

    #[test]
    fn a_started_machine_reports_not_ready_for_the_window_then_ready_at_once() {
        let periods = Periods { not_ready: Duration::from_secs(15), ..PERIODS };
        let t0 = Instant::now();
        let wall = Timestamp::now();
        let mut ks = HashMap::new();
        let running = running_by_name(vec![inst("a")]);
        let jobs = plan(&running, NONE_HUNG, |_| None, &mut ks, t0, wall, &periods);
        assert!(matches!(jobs[0].action, Action::Register { ready: false }));
        run(&jobs, &mut ks, t0);
        let mut not_ready = node(&inst("a"), Shape::FALLBACK, "v1.37.2", &[], wall, false);
        not_ready.metadata.uid = Some("uid-a".into());
        let not_ready = Arc::new(not_ready);
        let seen = |_: &str| Some(not_ready.clone());
        assert!(plan(&running, NONE_HUNG, seen, &mut ks, t0 + Duration::from_secs(1), wall, &periods).is_empty());
        // The window is over: Ready is posted at once, not at the next status period.
        let jobs = plan(&running, NONE_HUNG, seen, &mut ks, t0 + Duration::from_secs(15), wall, &periods);
        let Action::Heartbeat { status: Some(patch), .. } = &jobs[0].action else { panic!("status due: {jobs:?}") };
        let ready = patch["status"]["conditions"].as_array().and_then(|c| c.iter().find(|c| c["type"] == "Ready"));
        assert_eq!(ready.map(|c| c["status"].clone()), Some("True".into()));
    }

    #[test]
    fn a_hung_machine_says_nothing_and_reports_at_once_when_it_resumes() {
        let t0 = Instant::now();
        let wall = Timestamp::now();
        let mut ks = HashMap::new();
        let running = running_by_name(vec![inst("a"), inst("b")]);
        let seen = |name: &str| Some(registered(name));
        run(&plan(&running, NONE_HUNG, seen, &mut ks, t0, wall, &PERIODS), &mut ks, t0);
        let hung: BTreeSet<String> = ["a".to_string()].into();
        let later = t0 + Duration::from_secs(60);
        let jobs = plan(&running, &hung, seen, &mut ks, later, wall, &PERIODS);
        assert_eq!(kinds(&jobs), [("b".to_string(), "status+lease")], "only b's kubelet speaks");
        run(&jobs, &mut ks, later);
        // Still hung a minute on, still silent; the machine is running, so its kubelet is not forgotten.
        assert!(plan(&running, &hung, seen, &mut ks, later + Duration::from_secs(1), wall, &PERIODS).is_empty());
        let jobs = plan(&running, NONE_HUNG, seen, &mut ks, later + Duration::from_secs(2), wall, &PERIODS);
        assert_eq!(kinds(&jobs), [("a".to_string(), "status+lease")], "resumed: status and Lease at once");
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
    fn renewals_of_kubelets_started_together_are_spread() {
        let t0 = Instant::now();
        let wall = Timestamp::now();
        let mut ks = HashMap::new();
        let running = running_by_name((0..1000).map(|n| inst(&format!("n{n:04}"))).collect());
        let jobs = plan(&running, NONE_HUNG, |_| None, &mut ks, t0, wall, &PERIODS);
        run(&jobs, &mut ks, t0);
        let mut per_second = [0usize; 11];
        for k in ks.values() {
            let due = k.next_lease.expect("scheduled") - t0;
            assert!((Duration::from_secs(5)..=Duration::from_secs(10)).contains(&due), "{due:?}");
            per_second[due.as_secs() as usize] += 1;
        }
        assert!(per_second.iter().all(|&n| n < 300), "renewals bunch up: {per_second:?}");
    }

    #[test]
    fn the_newest_running_instance_of_a_name_wins() {
        let mut old = inst("a");
        old.id = "i-old".into();
        let running = running_by_name(vec![old, inst("a")]);
        assert_eq!(running["a"].id, "i-a");
    }
}

//! Events as upstream's controllers record them: `core/v1` Events through client-go's legacy recorder, whose
//! `source.component` (`cloud-node-controller`, `cloud-node-lifecycle-controller`, ...) is what `kubectl get
//! events` and field selectors such as `source=cloud-node-controller` show. (kube's `Recorder` writes
//! `events.k8s.io/v1` without a source.)
//!
//! Like client-go's broadcaster, recording never blocks a sync: events go through a bounded queue to one
//! writer task and are dropped when it is full. Before writing, the writer does what client-go's
//! `EventCorrelator` does with its defaults (`tools/record/events_cache.go`):
//! - **aggregation**: once an object has had 10 events of one type and reason with different messages within
//!   10 minutes of each other, the next ones are one event, "(combined from similar events): <message>",
//!   whose count goes up;
//! - **counting**: a repeat of an event already written patches its `count`, `lastTimestamp` and message
//!   instead of creating another;
//! - **spam filter**: each object may have 25 events of a type from one component, then one more every 5
//!   minutes; the rest are dropped.
//!
//! So a node whose route the cloud keeps refusing gets what upstream gives it, not one event per try.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::client_go::ratelimit::TokenBucket;

/// client-go's broadcaster queue length.
const QUEUE: usize = 1000;
/// client-go's correlator caches (LRUs of 4096); ours are simply cleared when full.
const CACHE: usize = 4096;
/// client-go's `defaultAggregateMaxEvents` and `defaultAggregateIntervalInSeconds`.
const AGGREGATE_AFTER: usize = 10;
const AGGREGATE_WITHIN: Duration = Duration::from_secs(600);
/// client-go's `defaultSpamBurst` and `defaultSpamQPS` (one event every 300 s).
const SPAM_BURST: u32 = 25;
const SPAM_QPS: f64 = 1.0 / 300.0;
const AGGREGATE_PREFIX: &str = "(combined from similar events): ";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "Normal",
            Self::Warning => "Warning",
        }
    }
}

struct Record {
    /// When it was recorded: client-go's `makeEvent` stamps the event then, not when the writer gets to it, so
    /// an event written late from a long queue still says when it happened.
    at: Timestamp,
    regarding: ObjectReference,
    type_: EventType,
    reason: &'static str,
    message: String,
}

/// Records events as one component. Cheap to clone; the writer task ends when the last clone is dropped.
#[derive(Clone)]
pub struct Recorder {
    tx: mpsc::Sender<Record>,
}

impl Recorder {
    pub fn new(client: kube::Client, component: &str) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(write(client, component.to_string(), rx));
        Self { tx }
    }

    /// Queue an event about `regarding`; never waits.
    pub fn publish(&self, regarding: ObjectReference, type_: EventType, reason: &'static str, message: String) {
        if self.tx.try_send(Record { at: Timestamp::now(), regarding, type_, reason, message }).is_err() {
            tracing::warn!(reason, "event queue full; event dropped");
        }
    }
}

/// The object an event is about, as client-go's keys name it: kind, namespace, name, UID, API version.
type Object = (String, String, String, String, String);

/// "Similar" events (client-go's `EventAggregatorByReasonFunc`, without the host and reporting fields we leave
/// empty): the object, the type and the reason. The component is the recorder's own.
type Similar = (Object, EventType, &'static str);

/// "The same event again" (client-go's `getEventKey`): similar and the same message. An aggregate event is
/// keyed by its similar key alone (`None`), so every later similar event counts on it.
type Key = (Similar, Option<String>);

/// Whose events the spam filter counts together (client-go's `getSpamKey`): the object and the type.
type SpamKey = (Object, EventType);

fn object(o: &ObjectReference) -> Object {
    let s = |v: &Option<String>| v.clone().unwrap_or_default();
    (s(&o.kind), s(&o.namespace), s(&o.name), s(&o.uid), s(&o.api_version))
}

/// An event already written (or being written): where, and what its count and first time are.
struct Observed {
    namespace: String,
    name: String,
    count: i32,
    first: Timestamp,
}

/// What to write for a recorded event.
enum Write {
    Create(Event),
    /// A repeat: the event as it now is (name, count, times, message), sent as a patch; created if it is gone.
    Repeat(Event),
}

/// client-go's `EventCorrelator` with its defaults (see the module docs).
#[derive(Default)]
struct Correlator {
    /// Distinct messages of each similar group, and when the group last had an event.
    groups: HashMap<Similar, (HashSet<String>, Instant)>,
    observed: HashMap<Key, Observed>,
    /// Each object's spam budget.
    buckets: HashMap<SpamKey, TokenBucket>,
}

impl Correlator {
    /// The write `r` becomes at `now`, or `None` when the spam filter drops it. As client-go, the count goes up
    /// even for a dropped repeat, so the next one written carries it.
    fn correlate(&mut self, component: &str, r: Record, now: Instant) -> Option<Write> {
        let object = object(&r.regarding);
        let group = (object.clone(), r.type_, r.reason);
        if self.groups.len() >= CACHE {
            self.groups.clear();
        }
        let (messages, last) = self.groups.entry(group.clone()).or_insert_with(|| (HashSet::new(), now));
        if now.duration_since(*last) > AGGREGATE_WITHIN {
            messages.clear();
        }
        *last = now;
        messages.insert(r.message.clone());
        let (key, message) = if messages.len() < AGGREGATE_AFTER {
            ((group, Some(r.message.clone())), r.message.clone())
        } else {
            // client-go keeps the set below the threshold, so every later one aggregates while the group is hot.
            if let Some(any) = messages.iter().next().cloned() {
                messages.remove(&any);
            }
            ((group, None), format!("{AGGREGATE_PREFIX}{}", r.message))
        };
        let mut event = new_event(component, &r.regarding, r.type_, r.reason, &message, r.at);
        if self.observed.len() >= CACHE {
            self.observed.clear();
        }
        let write = match self.observed.get_mut(&key) {
            Some(seen) => {
                seen.count += 1;
                event.metadata.namespace = Some(seen.namespace.clone());
                event.metadata.name = Some(seen.name.clone());
                event.count = Some(seen.count);
                event.first_timestamp = Some(Time(seen.first));
                Write::Repeat(event)
            }
            None => {
                let observed = Observed {
                    namespace: event.metadata.namespace.clone().unwrap_or_default(),
                    name: event.metadata.name.clone().unwrap_or_default(),
                    count: 1,
                    first: event.first_timestamp.as_ref().map_or_else(Timestamp::now, |t| t.0),
                };
                self.observed.insert(key, observed);
                Write::Create(event)
            }
        };
        self.admit((object, r.type_), now).then_some(write)
    }

    /// Take a token from the object's bucket, if it has one.
    fn admit(&mut self, key: SpamKey, now: Instant) -> bool {
        if self.buckets.len() >= CACHE {
            self.buckets.clear();
        }
        self.buckets.entry(key).or_insert_with(|| TokenBucket::new(SPAM_QPS, SPAM_BURST)).try_take_at(now)
    }
}

/// A new event as client-go's `makeEvent` builds it, recorded `at`; events about cluster-scoped objects go to
/// `default`.
pub fn new_event(
    component: &str,
    regarding: &ObjectReference,
    type_: EventType,
    reason: &str,
    message: &str,
    at: Timestamp,
) -> Event {
    let name = format!("{}.{:x}", regarding.name.as_deref().unwrap_or(component), at.as_nanosecond());
    Event {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(regarding.namespace.clone().unwrap_or_else(|| "default".into())),
            ..Default::default()
        },
        involved_object: regarding.clone(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        type_: Some(type_.as_str().to_string()),
        first_timestamp: Some(Time(at)),
        last_timestamp: Some(Time(at)),
        count: Some(1),
        source: Some(EventSource { component: Some(component.to_string()), host: None }),
        reporting_component: Some(component.to_string()),
        reporting_instance: Some(String::new()),
        ..Default::default()
    }
}

async fn write(client: kube::Client, component: String, mut rx: mpsc::Receiver<Record>) {
    let mut correlator = Correlator::default();
    while let Some(r) = rx.recv().await {
        let reason = r.reason;
        let event = match correlator.correlate(&component, r, Instant::now()) {
            None => continue,
            Some(Write::Create(event)) => event,
            Some(Write::Repeat(event)) => {
                let api = Api::<Event>::namespaced(client.clone(), event.metadata.namespace.as_deref().unwrap_or(""));
                let patch = serde_json::json!({
                    "count": event.count,
                    "lastTimestamp": event.last_timestamp,
                    "message": event.message,
                });
                let name = event.metadata.name.clone().unwrap_or_default();
                match api.patch(&name, &PatchParams::default(), &Patch::Strategic(patch)).await {
                    Ok(_) => continue,
                    // Gone (events expire): created again, as client-go does.
                    Err(kube::Error::Api(s)) if s.is_not_found() => event,
                    Err(e) => {
                        tracing::warn!(reason, error = %e, "cannot update event");
                        continue;
                    }
                }
            }
        };
        let api = Api::<Event>::namespaced(client.clone(), event.metadata.namespace.as_deref().unwrap_or(""));
        if let Err(e) = api.create(&PostParams::default(), &event).await {
            tracing::warn!(reason, error = %e, "cannot record event");
        }
    }
}

/// The reference upstream's node controllers put in their events.
pub fn node_ref(node: &k8s_openapi::api::core::v1::Node) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: node.metadata.name.clone(),
        uid: node.metadata.uid.clone(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_look_like_client_gos() {
        let node: k8s_openapi::api::core::v1::Node =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "n1", "uid": "u-1"}})).unwrap();
        let ev = new_event(
            "cloud-node-controller",
            &node_ref(&node),
            EventType::Normal,
            "Synced",
            "Node synced successfully",
            Timestamp::now(),
        );
        assert_eq!(ev.metadata.namespace.as_deref(), Some("default"));
        assert!(ev.metadata.name.as_deref().unwrap().starts_with("n1."));
        assert_eq!(ev.source.unwrap().component.as_deref(), Some("cloud-node-controller"));
        assert_eq!(ev.reporting_component.as_deref(), Some("cloud-node-controller"));
        assert_eq!(ev.involved_object.kind.as_deref(), Some("Node"));
        assert_eq!(ev.involved_object.uid.as_deref(), Some("u-1"));
        assert_eq!((ev.type_.as_deref(), ev.count), (Some("Normal"), Some(1)));
    }

    fn record(node: &str, type_: EventType, message: &str) -> Record {
        let regarding = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.into()),
            uid: Some(format!("uid-{node}")),
            ..Default::default()
        };
        Record { at: Timestamp::now(), regarding, type_, reason: "FailedToCreateRoute", message: message.into() }
    }

    /// (created?, name, count, message) of a write.
    fn shape(w: &Write) -> (bool, String, i32, String) {
        let (created, e) = match w {
            Write::Create(e) => (true, e),
            Write::Repeat(e) => (false, e),
        };
        (created, e.metadata.name.clone().unwrap(), e.count.unwrap(), e.message.clone().unwrap())
    }

    #[test]
    fn a_repeat_counts_on_the_first_event() {
        let (mut c, t) = (Correlator::default(), Instant::now());
        let first = shape(&c.correlate("route_controller", record("n1", EventType::Warning, "no"), t).unwrap());
        let again = shape(&c.correlate("route_controller", record("n1", EventType::Warning, "no"), t).unwrap());
        assert!(first.0 && !again.0);
        assert_eq!((again.1, again.2, again.3), (first.1, 2, "no".to_string()));
    }

    #[test]
    fn the_tenth_similar_message_within_ten_minutes_becomes_one_combined_event() {
        let (mut c, mut t) = (Correlator::default(), Instant::now());
        let mut writes = Vec::new();
        for i in 1..=12 {
            writes.push(shape(&c.correlate("rc", record("n1", EventType::Warning, &format!("try {i}")), t).unwrap()));
            t += Duration::from_secs(30);
        }
        assert!(writes[..9].iter().all(|w| w.0 && w.2 == 1 && !w.3.starts_with("(combined")), "{writes:?}");
        let combined = &writes[9];
        assert_eq!((combined.0, combined.2, combined.3.as_str()), (true, 1, "(combined from similar events): try 10"));
        assert_eq!(writes[10], (false, combined.1.clone(), 2, "(combined from similar events): try 11".into()));
        assert_eq!(writes[11].2, 3);
        // Another reason, type or object is another group.
        let other = shape(&c.correlate("rc", record("n2", EventType::Warning, "try 13"), t).unwrap());
        assert_eq!((other.0, other.3.as_str()), (true, "try 13"));
        // Ten quiet minutes and more: the group starts over.
        t += AGGREGATE_WITHIN + Duration::from_secs(1);
        let fresh = shape(&c.correlate("rc", record("n1", EventType::Warning, "try 14"), t).unwrap());
        assert_eq!((fresh.0, fresh.3.as_str()), (true, "try 14"));
    }

    #[test]
    fn an_object_gets_25_events_of_a_type_then_one_every_five_minutes() {
        let (mut c, mut t) = (Correlator::default(), Instant::now());
        let admitted = |c: &mut Correlator, t, node: &str, type_| {
            (0..40).filter(|i| c.correlate("rc", record(node, type_, &format!("m{i}")), t).is_some()).count()
        };
        assert_eq!(admitted(&mut c, t, "n1", EventType::Warning), 25);
        // Other objects and the other type have budgets of their own.
        assert_eq!(admitted(&mut c, t, "n2", EventType::Warning), 25);
        assert_eq!(admitted(&mut c, t, "n1", EventType::Normal), 25);
        t += Duration::from_secs(299);
        assert!(c.correlate("rc", record("n1", EventType::Warning, "late"), t).is_none());
        t += Duration::from_secs(2);
        assert!(c.correlate("rc", record("n1", EventType::Warning, "later"), t).is_some());
        assert!(c.correlate("rc", record("n1", EventType::Warning, "later still"), t).is_none());
    }
}

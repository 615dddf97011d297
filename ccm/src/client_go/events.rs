//! Events as upstream's controllers record them: `core/v1` Events through client-go's legacy recorder, whose
//! `source.component` (`cloud-node-controller`, `cloud-node-lifecycle-controller`, ...) is what `kubectl get
//! events` and field selectors such as `source=cloud-node-controller` show. (kube's `Recorder` writes
//! `events.k8s.io/v1` without a source.)
//!
//! Like client-go's broadcaster, recording never blocks a sync: events go through a bounded queue to one
//! writer task and are dropped when it is full; a repeat of an identical event patches the first one's
//! `count` and `lastTimestamp` instead of creating another.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use tokio::sync::mpsc;

/// client-go's broadcaster queue length.
const QUEUE: usize = 1000;
/// client-go's event cache (an LRU of 4096); ours is simply cleared when full.
const CACHE: usize = 4096;

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
        if self.tx.try_send(Record { regarding, type_, reason, message }).is_err() {
            tracing::warn!(reason, "event queue full; event dropped");
        }
    }
}

/// The identity of "the same event again" (client-go's `getEventKey`, without the host we do not set).
type Key = (String, String, String, String, EventType, &'static str, String);

fn key(r: &Record) -> Key {
    let o = &r.regarding;
    let s = |v: &Option<String>| v.clone().unwrap_or_default();
    (s(&o.kind), s(&o.namespace), s(&o.name), s(&o.uid), r.type_, r.reason, r.message.clone())
}

/// A new event as client-go's `makeEvent` builds it; events about cluster-scoped objects go to `default`.
pub fn new_event(component: &str, regarding: &ObjectReference, type_: EventType, reason: &str, message: &str) -> Event {
    let now = Timestamp::now();
    let name = format!("{}.{:x}", regarding.name.as_deref().unwrap_or(component), now.as_nanosecond());
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
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        source: Some(EventSource { component: Some(component.to_string()), host: None }),
        reporting_component: Some(component.to_string()),
        reporting_instance: Some(String::new()),
        ..Default::default()
    }
}

async fn write(client: kube::Client, component: String, mut rx: mpsc::Receiver<Record>) {
    // key → (namespace, name, count) of the event already written.
    let mut seen: HashMap<Key, (String, String, i32)> = HashMap::new();
    while let Some(r) = rx.recv().await {
        let k = key(&r);
        if let Some((ns, name, count)) = seen.get(&k).cloned() {
            let patch = serde_json::json!({"count": count + 1, "lastTimestamp": Time(Timestamp::now())});
            let api = Api::<Event>::namespaced(client.clone(), &ns);
            match api.patch(&name, &PatchParams::default(), &Patch::Strategic(patch)).await {
                Ok(_) => {
                    seen.insert(k, (ns, name, count + 1));
                    continue;
                }
                // Gone (events expire): record it afresh below.
                Err(kube::Error::Api(s)) if s.is_not_found() => {}
                Err(e) => {
                    tracing::warn!(reason = r.reason, error = %e, "cannot update event");
                    continue;
                }
            }
        }
        let ev = new_event(&component, &r.regarding, r.type_, r.reason, &r.message);
        let ns = ev.metadata.namespace.clone().unwrap_or_default();
        match Api::<Event>::namespaced(client.clone(), &ns).create(&PostParams::default(), &ev).await {
            Ok(created) => {
                if seen.len() >= CACHE {
                    seen.clear();
                }
                seen.insert(k, (ns, created.metadata.name.unwrap_or_default(), 1));
            }
            Err(e) => tracing::warn!(reason = r.reason, error = %e, "cannot record event"),
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
        );
        assert_eq!(ev.metadata.namespace.as_deref(), Some("default"));
        assert!(ev.metadata.name.as_deref().unwrap().starts_with("n1."));
        assert_eq!(ev.source.unwrap().component.as_deref(), Some("cloud-node-controller"));
        assert_eq!(ev.reporting_component.as_deref(), Some("cloud-node-controller"));
        assert_eq!(ev.involved_object.kind.as_deref(), Some("Node"));
        assert_eq!(ev.involved_object.uid.as_deref(), Some("u-1"));
        assert_eq!((ev.type_.as_deref(), ev.count), (Some("Normal"), Some(1)));
    }
}

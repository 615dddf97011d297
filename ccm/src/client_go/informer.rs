//! One watch of Nodes shared by the controllers, as upstream's shared informer: one cache (without
//! `managedFields`), and every added or changed Node announced to subscribers — the cloud-node controller's
//! queue — after the cache has it.
//!
//! A subscriber gets each Node's name once per change it has not consumed yet, as a workqueue dedups: a Node
//! that heartbeats ten times while its sync waits is one entry. So a slow subscriber holds at most one entry
//! per Node, and never makes the watch wait.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::{Notify, watch};

#[derive(Default)]
struct Subscriber {
    /// Names in first-changed order, and the same names as a set for the dedup.
    pending: Mutex<(VecDeque<String>, HashSet<String>)>,
    ready: Notify,
    closed: AtomicBool,
    /// Whether deleted Nodes are announced too.
    deletes: bool,
}

impl Subscriber {
    fn push(&self, name: String) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if p.1.insert(name.clone()) {
            p.0.push_back(name);
        }
        drop(p);
        self.ready.notify_one();
    }

    fn pop(&self) -> Option<String> {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let name = p.0.pop_front()?;
        p.1.remove(&name);
        Some(name)
    }
}

pub struct NodeInformer {
    api: Api<Node>,
    writer: Writer<Node>,
    store: Store<Node>,
    subscribers: Vec<Arc<Subscriber>>,
    synced: watch::Sender<bool>,
}

/// Resolves once the cache holds the first full listing. (kube's `Store::wait_until_ready` wakes only the
/// last of several concurrent waiters: its readiness is a oneshot channel with one waker.)
#[derive(Clone)]
pub struct Synced(watch::Receiver<bool>);

impl Synced {
    /// `false` if the informer ended before it synced.
    pub async fn wait(mut self) -> bool {
        self.0.wait_for(|s| *s).await.is_ok()
    }
}

impl NodeInformer {
    pub fn new(client: kube::Client) -> Self {
        let (store, writer) = reflector::store();
        Self { api: Api::all(client), writer, store, subscribers: Vec::new(), synced: watch::Sender::new(false) }
    }

    /// The cache; complete once [`NodeInformer::synced`] resolves.
    pub fn store(&self) -> Store<Node> {
        self.store.clone()
    }

    pub fn synced(&self) -> Synced {
        Synced(self.synced.subscribe())
    }

    /// The names of Nodes added or changed from the start of [`NodeInformer::run`] on, deduplicated while
    /// unconsumed. Ends if the informer does.
    pub fn subscribe(&mut self) -> impl Stream<Item = String> + Send + 'static {
        self.subscriber(false)
    }

    /// As [`NodeInformer::subscribe`], deleted Nodes included.
    pub fn subscribe_with_deletes(&mut self) -> impl Stream<Item = String> + Send + 'static {
        self.subscriber(true)
    }

    fn subscriber(&mut self, deletes: bool) -> impl Stream<Item = String> + Send + 'static {
        let sub = Arc::new(Subscriber { deletes, ..Default::default() });
        self.subscribers.push(sub.clone());
        futures::stream::unfold(sub, |sub| async move {
            loop {
                if let Some(name) = sub.pop() {
                    return Some((name, sub));
                }
                if sub.closed.load(Ordering::Acquire) {
                    return None;
                }
                // `notify_one` leaves a permit when nobody waits, so a push between `pop` and here is not lost.
                sub.ready.notified().await;
            }
        })
    }

    /// Watch until the process ends (the watch retries with backoff).
    pub async fn run(self) {
        let (subscribers, synced) = (self.subscribers, self.synced);
        let nodes = watcher(self.api, watcher::Config::default()).default_backoff().modify(strip_managed_fields);
        reflector::reflector(self.writer, nodes)
            .for_each(|event| {
                match event {
                    Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) => {
                        subscribers.iter().for_each(|s| s.push(n.name_any()))
                    }
                    Ok(watcher::Event::Delete(n)) => {
                        subscribers.iter().filter(|s| s.deletes).for_each(|s| s.push(n.name_any()))
                    }
                    Ok(watcher::Event::Init) => {}
                    Ok(watcher::Event::InitDone) => {
                        if !*synced.borrow() {
                            tracing::info!("node cache synced");
                        }
                        synced.send_replace(true);
                    }
                    Err(e) => tracing::warn!(error = %e, "node watch failed; retrying"),
                }
                futures::future::ready(())
            })
            .await;
        for s in &subscribers {
            s.closed.store(true, Ordering::Release);
            s.ready.notify_one();
        }
    }
}

/// Drop `metadata.managedFields` before caching a Node: nothing here reads them, and on a Node written by the
/// kubelet, the controller manager and the CCM they are a good part of the object (controller-runtime strips
/// them from its caches for the same reason).
fn strip_managed_fields(node: &mut Node) {
    node.metadata.managed_fields = None;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_subscriber_gets_each_waiting_name_once_in_first_changed_order() {
        let sub = Arc::new(Subscriber::default());
        for name in ["a", "b", "a", "c", "b"] {
            sub.push(name.into());
        }
        let got: Vec<String> = std::iter::from_fn(|| sub.pop()).collect();
        assert_eq!(got, ["a", "b", "c"]);
        // Consumed: a new change is announced again.
        sub.push("a".into());
        assert_eq!(sub.pop().as_deref(), Some("a"));
        assert_eq!(sub.pop(), None);
    }
}

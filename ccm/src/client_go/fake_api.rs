//! An API server in memory for the controllers' unit tests, as client-go's fake clientset: a `kube::Client`
//! whose requests are recorded (method, path, query, patch type, JSON body) and answered from a store of
//! objects, with failures injected by method and path.
//!
//! Answers: GET returns the stored object; PUT stores the body with the next resourceVersion; PATCH applies the
//! body to the stored object (see [`strategic_merge`] for what a strategic-merge patch does here) and stores it
//! with the next resourceVersion; POST echoes the body; DELETE removes the object. A path not in the store is a
//! 404.
//!
//! Events are written by the recorder's own task, concurrently with the sync that published them, so they
//! are kept apart from the other writes: [`FakeApi::events`]. Run the test with `start_paused = true` and call
//! [`settle`] before reading them: with tokio's clock paused, a sleep returns only once every other task idles.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::http::{Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Sent {
    /// `"PATCH /api/v1/nodes/a/status"`.
    pub call: String,
    pub query: String,
    /// The patch type of a PATCH (`strategic`, `merge`, ...), empty otherwise.
    pub patch: String,
    pub body: Value,
}

struct Failure {
    call: String,
    code: u16,
    times: usize,
}

#[derive(Default)]
struct State {
    objects: HashMap<String, Value>,
    sent: Vec<Sent>,
    failures: Vec<Failure>,
}

#[derive(Default, Clone)]
pub struct FakeApi {
    state: Arc<Mutex<State>>,
}

/// Let every spawned task (the event recorder, kube's buffer) run until it waits; see the module doc.
pub async fn settle() {
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Where the API keeps `obj`: `/api/v1/nodes/<name>` or `/api/v1/namespaces/<ns>/<kind>s/<name>`.
fn path_of(obj: &Value) -> String {
    let kind = obj["kind"].as_str().unwrap_or_default().to_lowercase();
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    match obj["metadata"]["namespace"].as_str() {
        Some(ns) => format!("/api/v1/namespaces/{ns}/{kind}s/{name}"),
        None => format!("/api/v1/{kind}s/{name}"),
    }
}

fn status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": format!("fake: {reason}"),
        "reason": reason, "code": code})
}

/// Whether `actual` has everything `expected` has: objects by key (a `null` expects the key absent or null),
/// arrays element by element and of the same length, anything else equal.
pub fn contains(actual: &Value, expected: &Value) -> bool {
    match (actual, expected) {
        (_, Value::Null) => actual.is_null(),
        (Value::Object(a), Value::Object(e)) => e.iter().all(|(k, v)| contains(a.get(k).unwrap_or(&Value::Null), v)),
        (Value::Array(a), Value::Array(e)) => a.len() == e.len() && a.iter().zip(e).all(|(a, e)| contains(a, e)),
        _ => actual == expected,
    }
}

impl FakeApi {
    /// Store an object (with `kind` and `metadata.name`; a namespace for namespaced kinds).
    pub fn with(self, obj: Value) -> Self {
        self.lock().objects.insert(path_of(&obj), obj);
        self
    }

    /// Store `obj` unless an object is stored at its path already: a test that sets the API's copy apart from
    /// the cache's (another writer got there first) keeps its own.
    pub fn or_with(self, obj: Value) -> Self {
        self.lock().objects.entry(path_of(&obj)).or_insert(obj);
        self
    }

    /// The object stored at `path` (`/api/v1/namespaces/default/services/s1`), as the last write left it.
    pub fn object(&self, path: &str) -> Option<Value> {
        self.lock().objects.get(path).cloned()
    }

    /// The next `times` requests `call` (`"PATCH /api/v1/nodes/a"`) fail with `code`.
    pub fn failing(self, call: &str, code: u16, times: usize) -> Self {
        self.lock().failures.push(Failure { call: call.into(), code, times });
        self
    }

    pub fn client(&self) -> kube::Client {
        let api = self.clone();
        let service = tower::service_fn(move |req: Request<Body>| {
            let api = api.clone();
            async move { Ok::<_, Infallible>(api.serve(req).await) }
        });
        kube::Client::new(service, "default")
    }

    /// Every request but those about events, in order.
    pub fn requests(&self) -> Vec<Sent> {
        self.lock().sent.iter().filter(|s| !s.call.contains("/events")).cloned().collect()
    }

    /// The requests that change something (not GET), events apart: `"METHOD path"`, in order.
    pub fn writes(&self) -> Vec<String> {
        self.requests().into_iter().filter(|s| !s.call.starts_with("GET ")).map(|s| s.call).collect()
    }

    /// The events created, as `"Type Reason"`, in order.
    pub fn events(&self) -> Vec<String> {
        self.event_bodies()
            .iter()
            .map(|e| format!("{} {}", e["type"].as_str().unwrap_or_default(), e["reason"].as_str().unwrap_or_default()))
            .collect()
    }

    pub fn event_bodies(&self) -> Vec<Value> {
        let sent = self.lock().sent.clone();
        sent.into_iter()
            .filter(|s| s.call.starts_with("POST ") && s.call.ends_with("/events"))
            .map(|s| s.body)
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn serve(&self, req: Request<Body>) -> Response<Body> {
        let (parts, body) = req.into_parts();
        let bytes = body.collect_bytes().await.unwrap_or_default();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let path = parts.uri.path().to_string();
        let call = format!("{} {path}", parts.method);
        let content_type = parts.headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
        let patch = match content_type {
            "application/strategic-merge-patch+json" => "strategic",
            "application/merge-patch+json" => "merge",
            "application/json-patch+json" => "json",
            "application/apply-patch+yaml" => "apply",
            _ => "",
        };
        let mut s = self.lock();
        s.sent.push(Sent {
            call: call.clone(),
            query: parts.uri.query().unwrap_or_default().to_string(),
            patch: if parts.method == "PATCH" { patch.into() } else { String::new() },
            body: body.clone(),
        });
        if let Some(f) = s.failures.iter_mut().find(|f| f.call == call && f.times > 0) {
            f.times -= 1;
            let reason = match f.code {
                404 => "NotFound",
                409 => "Conflict",
                _ => "InternalError",
            };
            return respond(f.code, status(f.code, reason));
        }
        let key = path.strip_suffix("/status").unwrap_or(&path).to_string();
        let (code, answer) = match parts.method.as_str() {
            "POST" => (201, body),
            "PUT" => {
                let rv = s.objects.get(&key).and_then(|o| o["metadata"]["resourceVersion"].as_str()?.parse().ok());
                let mut obj = body;
                obj["metadata"]["resourceVersion"] = json!((rv.unwrap_or(0u64) + 1).to_string());
                s.objects.insert(key, obj.clone());
                (200, obj)
            }
            "PATCH" if matches!(patch, "strategic" | "merge") => match s.objects.get(&key) {
                Some(obj) => {
                    let rv: u64 = obj["metadata"]["resourceVersion"].as_str().and_then(|v| v.parse().ok()).unwrap_or(0);
                    let mut obj = if patch == "strategic" {
                        strategic_merge(obj.clone(), body)
                    } else {
                        merged(obj.clone(), body)
                    };
                    obj["metadata"]["resourceVersion"] = json!((rv + 1).to_string());
                    s.objects.insert(key, obj.clone());
                    (200, obj)
                }
                None => (404, status(404, "NotFound")),
            },
            "DELETE" => match s.objects.remove(&key) {
                Some(obj) => (200, obj),
                None => (404, status(404, "NotFound")),
            },
            _ => match s.objects.get(&key) {
                Some(obj) => (200, obj.clone()),
                None => (404, status(404, "NotFound")),
            },
        };
        respond(code, answer)
    }
}

fn respond(code: u16, body: Value) -> Response<Body> {
    let mut resp = Response::new(Body::from(body.to_string().into_bytes()));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp
}

/// `base` with `patch` merged in (JSON merge patch: objects merge, `null` removes a key, anything else replaces),
/// to build test objects as variations of one and to apply merge patches.
pub fn merged(mut base: Value, patch: Value) -> Value {
    match (&mut base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    b.remove(&k);
                    continue;
                }
                let slot = b.entry(k).or_insert(Value::Null);
                *slot = merged(slot.take(), v);
            }
            base
        }
        (_, p) => p,
    }
}

/// Lists of strings whose patch strategy is `merge` (a strategic-merge patch adds to them instead of replacing
/// them): `metadata.finalizers` is the one the controllers write.
const MERGED_STRING_LISTS: &[&str] = &["finalizers"];
const SET_ORDER: &str = "$setElementOrder/";
const DELETE_FROM: &str = "$deleteFromPrimitiveList/";

/// A strategic-merge patch applied as the API server applies it (apimachinery's `StrategicMergeMapPatch`), for
/// what the controllers send: objects merge and `null` removes a key; a list in [`MERGED_STRING_LISTS`] is
/// merged, with its `$setElementOrder/` and `$deleteFromPrimitiveList/` directives; any other list is replaced,
/// `{"$patch": ...}` elements dropped. Simplified: the API server merges some lists of objects by key
/// (`conditions`, `taints`, ...); here they are replaced, so a test must not read those back.
pub fn strategic_merge(original: Value, patch: Value) -> Value {
    let (Value::Object(mut orig), Value::Object(mut patch)) = (original, patch) else {
        unreachable!("a strategic-merge patch merges objects");
    };
    // First the lists with an order directive (apimachinery's `mergePatchIntoOriginal`), then the rest, the
    // deletion lists included: a deletion applies to the list as ordered.
    let ordered: Vec<String> = patch.keys().filter_map(|k| k.strip_prefix(SET_ORDER)).map(str::to_string).collect();
    for key in ordered {
        let order = strings(patch.remove(&format!("{SET_ORDER}{key}")));
        let (server, added) = (orig.get(&key).cloned(), patch.remove(&key));
        let list = match (server, added) {
            (Some(s), None) => strings(Some(s)),
            (None, Some(a)) => strings(Some(a)),
            (Some(s), Some(a)) => merge_strings(strings(Some(s)), strings(Some(a))),
            (None, None) => continue,
        };
        let server_order = strings(orig.get(&key).cloned());
        let (in_order, server_only): (Vec<String>, Vec<String>) = list.into_iter().partition(|v| order.contains(v));
        orig.insert(key, normalize(in_order, server_only, &order, &server_order).into());
    }
    for (key, value) in patch {
        if let Some(list) = key.strip_prefix(DELETE_FROM) {
            if let Some(current) = orig.get(list).cloned() {
                let gone = strings(Some(value));
                let kept: Vec<String> = strings(Some(current)).into_iter().filter(|v| !gone.contains(v)).collect();
                orig.insert(list.to_string(), kept.into());
            }
            continue;
        }
        if value.is_null() {
            orig.remove(&key);
            continue;
        }
        let merged = match (orig.remove(&key), value) {
            (Some(o @ Value::Object(_)), p @ Value::Object(_)) => strategic_merge(o, p),
            (Some(Value::Array(o)), Value::Array(p)) if MERGED_STRING_LISTS.contains(&key.as_str()) => {
                merge_strings(strings(Some(Value::Array(o))), strings(Some(Value::Array(p)))).into()
            }
            (_, Value::Array(p)) => Value::Array(p.into_iter().filter(|v| v.get("$patch").is_none()).collect()),
            (_, p) => p,
        };
        orig.insert(key, merged);
    }
    Value::Object(orig)
}

fn strings(v: Option<Value>) -> Vec<String> {
    serde_json::from_value(v.unwrap_or(Value::Null)).unwrap_or_default()
}

/// apimachinery's `mergeSlice` for strings: the union, deduplicated, then the patch's items in the patch's
/// order interleaved with the server's own.
fn merge_strings(server: Vec<String>, patch: Vec<String>) -> Vec<String> {
    let mut all: Vec<String> = Vec::new();
    for v in server.iter().chain(&patch) {
        if !all.contains(v) {
            all.push(v.clone());
        }
    }
    let (in_patch, server_only): (Vec<String>, Vec<String>) = all.into_iter().partition(|v| patch.contains(v));
    normalize(in_patch, server_only, &patch, &server)
}

/// apimachinery's `normalizeElementOrder`: `patch_items` sorted by `patch_order`, `server_only` by
/// `server_order`, then each server-only item placed before the first patch item that comes after it on the
/// server (`mergeSortedSlice`).
fn normalize(
    mut patch_items: Vec<String>,
    mut server_only: Vec<String>,
    patch_order: &[String],
    server_order: &[String],
) -> Vec<String> {
    let index = |l: &[String], v: &String| l.iter().position(|x| x == v);
    patch_items.sort_by_key(|v| index(patch_order, v).unwrap_or(usize::MAX));
    server_only.sort_by_key(|v| index(server_order, v).unwrap_or(usize::MAX));
    let (mut left, mut right) = (server_only.into_iter().peekable(), patch_items.into_iter().peekable());
    let mut out = Vec::new();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => return out,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => {
                matches!((index(server_order, l), index(server_order, r)), (Some(a), Some(b)) if a < b)
            }
        };
        out.extend(if take_left { left.next() } else { right.next() });
    }
}

/// Assert that `actual` [`contains`] `expected`, showing both when not.
#[track_caller]
pub fn assert_contains(actual: &Value, expected: &Value, what: &str) {
    assert!(
        contains(actual, expected),
        "{what}: expected to contain\n{}\nbut was\n{}",
        serde_json::to_string_pretty(expected).unwrap_or_default(),
        serde_json::to_string_pretty(actual).unwrap_or_default()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const LB: &str = "service.kubernetes.io/load-balancer-cleanup";

    /// Each row's result is what apimachinery v0.37.2's `strategicpatch.StrategicMergePatch` gives for that
    /// server list and patch (run against `v1.Service`): the server's finalizers, the patch's `metadata`, after.
    #[test]
    fn finalizer_patches_apply_as_the_api_server_applies_them() {
        let cases = [
            (json!(["late"]), json!({"finalizers": [LB]}), json!([LB, "late"])),
            (
                json!(["other", "late"]),
                json!({"$setElementOrder/finalizers": ["other", LB], "finalizers": [LB]}),
                json!(["other", LB, "late"]),
            ),
            (
                json!(["late", "other"]),
                json!({"$setElementOrder/finalizers": ["other", LB], "finalizers": [LB]}),
                json!(["late", "other", LB]),
            ),
            (
                json!(["late"]),
                json!({"$setElementOrder/finalizers": ["other", LB], "finalizers": [LB]}),
                json!([LB, "late"]),
            ),
            (
                json!(["b", "late", "a"]),
                json!({"$setElementOrder/finalizers": ["a", "b", LB], "finalizers": [LB]}),
                json!(["late", "a", "b", LB]),
            ),
            (
                json!(["other", LB, "late"]),
                json!({"$deleteFromPrimitiveList/finalizers": [LB], "$setElementOrder/finalizers": ["other"]}),
                json!(["other", "late"]),
            ),
            (
                json!(["late", LB, "other"]),
                json!({"$deleteFromPrimitiveList/finalizers": [LB], "$setElementOrder/finalizers": ["other"]}),
                json!(["late", "other"]),
            ),
            (
                json!([LB, "late"]),
                json!({"$deleteFromPrimitiveList/finalizers": [LB], "$setElementOrder/finalizers": ["other"]}),
                json!(["late"]),
            ),
            (json!([LB, "late"]), json!({"finalizers": null}), Value::Null),
        ];
        for (server, patch, want) in cases {
            let original = json!({"metadata": {"name": "s1", "finalizers": server}, "spec": {"type": "LoadBalancer"}});
            let after = strategic_merge(original, json!({"metadata": patch}));
            assert_eq!(after["metadata"]["finalizers"], want, "{server} + {patch}");
            assert_eq!(after["spec"], json!({"type": "LoadBalancer"}), "{server} + {patch}: the rest untouched");
        }
    }
}

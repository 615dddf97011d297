//! An API server in memory for the controllers' unit tests, as client-go's fake clientset: a `kube::Client`
//! whose requests are recorded (method, path, query, patch type, JSON body) and answered from a store of
//! objects, with failures injected by method and path.
//!
//! Answers: GET returns the stored object; PUT stores the body with the next resourceVersion; PATCH returns the
//! stored object unchanged (the controllers do not read it back); POST echoes the body; DELETE removes the
//! object. A path not in the store is a 404.
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

/// `base` with `patch` merged in (JSON merge patch: objects merge, anything else replaces), to build test objects
/// as variations of one.
pub fn merged(mut base: Value, patch: Value) -> Value {
    match (&mut base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                let slot = b.entry(k).or_insert(Value::Null);
                *slot = merged(slot.take(), v);
            }
            base
        }
        (_, p) => p,
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

//! What a verdict does to a call (see [`super::call::Verdict`]): refuse it, delay it, run it and then fail, give
//! no answer, or hide what it changed — and eventual consistency's concealment, which shows a lagging resource's
//! previous version (or nothing, for a creation) to reads until its lag ends; and a quota refusal answered in
//! the installed failure-shape preset's cloud shape.

use std::collections::HashMap;

use axum::Json;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use fakecloud_api::{Instance, InstanceState, NoResponseMode, ZONE_OUTAGE_REASON};

use super::FaultEngine;
use super::call::Verdict;
use crate::call::ErrorCode;
use crate::call::{ResourceId, Written};
use crate::config::Config;
use crate::db::Db;
use crate::error::{ApiError, Kind, QuotaRefused};
use crate::store;

/// The API representation of an instance or load balancer, for eventual consistency's "previous version".
async fn current_json(db: &Db, cfg: &Config, id: &str) -> Option<serde_json::Value> {
    let value = if id.starts_with("i-") {
        serde_json::to_value(store::instances::get(db, cfg, id).await.ok()?)
    } else if id.starts_with("lb-") {
        serde_json::to_value(store::load_balancers::get(db, id).await.ok()?)
    } else {
        return None;
    };
    value.ok()
}

/// A request over a quota, refused as the installed failure-shape preset's cloud refuses it (its status and
/// code; the message still says which quota and how to raise it). Without a preset, the emulator's own `422`.
pub async fn shape_quota_refusal(resp: Response, faults: &FaultEngine) -> Response {
    let Some(refused) = resp.extensions().get::<QuotaRefused>() else {
        return resp;
    };
    let Some(preset) = faults.installed_preset().await else {
        return resp;
    };
    let (status, code) = super::presets::quota_refusal(preset, refused.quota);
    let mut shaped = ApiError::new(Kind::Status(status), code, refused.message.clone());
    shaped.quota = Some(refused.quota);
    shaped.into_response()
}

/// Eventual consistency: reads see resources as they were before a lagging write — not at all for a creation,
/// the previous version for a change.
pub async fn conceal(resp: Response, operation: &str, path_id: Option<&str>, faults: &FaultEngine) -> Response {
    let lagging = faults.lagging_now().await;
    // Only JSON is rewritten: a stream (the audit tail) must not be read to its end here.
    let json =
        resp.headers().get(header::CONTENT_TYPE).is_some_and(|ct| ct.as_bytes().starts_with(b"application/json"));
    if lagging.is_empty() || !resp.status().is_success() || !json {
        return resp;
    }
    if let Some(id) = path_id
        && let Some(previous) = lagging.get(id)
    {
        return match previous {
            Some(prev) => {
                let mut r = (StatusCode::OK, Json(prev.clone())).into_response();
                r.extensions_mut().insert(ResourceId(id.to_string()));
                r
            }
            // GetInstance -> InstanceNotFound, as the resource's own 404 would say.
            None => {
                let code = format!("{}NotFound", operation.trim_start_matches("Get"));
                ApiError::new(Kind::NotFound, code, format!("{id} does not exist")).into_response()
            }
        };
    }
    let (parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return ApiError::internal("cannot read a response body").into_response();
    };
    let mut value: serde_json::Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(_) => return Response::from_parts(parts, axum::body::Body::from(bytes)),
    };
    if let Some(items) = value.get_mut("items").and_then(|i| i.as_array_mut()) {
        lag_items(items, &lagging, |item| item.get("id").and_then(|id| id.as_str()), |item, prev| *item = prev.clone());
    }
    let mut resp = Response::from_parts(parts, axum::body::Body::from(value.to_string()));
    resp.headers_mut().remove(header::CONTENT_LENGTH);
    resp
}

/// Eventual consistency on a list's items, each named by `id_of`: a lagging creation is left out, a lagging
/// change shows its previous version (`previous` puts it in the item's place).
fn lag_items<T>(
    items: &mut Vec<T>,
    lagging: &HashMap<String, Option<serde_json::Value>>,
    id_of: impl Fn(&T) -> Option<&str>,
    previous: impl Fn(&mut T, &serde_json::Value),
) {
    items.retain(|item| !matches!(id_of(item).and_then(|id| lagging.get(id)), Some(None)));
    for item in items.iter_mut() {
        if let Some(Some(prev)) = id_of(item).and_then(|id| lagging.get(id)) {
            previous(item, prev);
        }
    }
}

/// During a zone outage its instances cannot be reached: a running one is reported stopped, as a cloud whose
/// zone is down reports it.
pub fn unreachable_in(dark: &[String], i: &mut Instance) {
    if dark.contains(&i.zone) && matches!(i.state, InstanceState::Pending | InstanceState::Running) {
        i.state = InstanceState::Stopped;
        i.state_reason = Some(ZONE_OUTAGE_REASON.to_string());
    }
}

/// Instances (with their places in the list) as a user's read sees them now, for a face that reads them through
/// the store rather than the native API's answer: a dark zone's reported stopped, then eventual consistency's
/// lag — what the native API's list shows.
pub async fn as_read(faults: &FaultEngine, instances: &mut Vec<(i64, Instance)>) {
    let dark = faults.dark_zones().await;
    if !dark.is_empty() {
        instances.iter_mut().for_each(|(_, i)| unreachable_in(&dark, i));
    }
    let lagging = faults.lagging_now().await;
    if lagging.is_empty() {
        return;
    }
    lag_items(
        instances,
        &lagging,
        |(_, i)| Some(i.id.as_str()),
        |(_, i), prev| {
            match serde_json::from_value::<Instance>(prev.clone()) {
                Ok(prev) => *i = prev,
                // Written from an instance by `current_json`: a bug, not the caller's; the read shows the truth.
                Err(e) => {
                    tracing::warn!(instance = %i.id, error = %e, "cannot read a lagging instance's previous version")
                }
            }
        },
    );
}

/// The resources whose creation lags now: a face that reads load balancers through the store leaves them out, as
/// the native API's lists do (a lagging change still shows what it changed: the version from before it is the
/// native API's JSON, which such a face does not read).
pub async fn unseen(faults: &FaultEngine) -> std::collections::HashSet<String> {
    faults.lagging_now().await.into_iter().filter(|(_, previous)| previous.is_none()).map(|(id, _)| id).collect()
}

/// Put `headers` on `resp`: a fault's, or the rate limits' remaining counts (each checked as a header name and
/// value when it was set; one that is not is left out).
pub fn put_headers(resp: &mut Response, headers: Vec<(String, String)>) {
    for (k, v) in headers {
        if let (Ok(k), Ok(v)) = (HeaderName::try_from(k), HeaderValue::try_from(v)) {
            resp.headers_mut().insert(k, v);
        }
    }
}

/// Carry out a fault verdict around the call: `run` answers it, `answer` answers an error in the face's shape.
#[allow(clippy::too_many_arguments)]
pub async fn apply(
    verdict: Verdict,
    run: impl Future<Output = Response>,
    answer: impl FnOnce(ApiError) -> Response,
    engine: &FaultEngine,
    db: &Db,
    cfg: &Config,
    path_id: Option<&str>,
    fault: &mut Option<String>,
) -> Response {
    match verdict {
        Verdict::Pass => run.await,
        Verdict::Refuse { error, fault: f } | Verdict::Throttle { error, fault: f } => {
            *fault = Some(f);
            answer(error)
        }
        Verdict::Delay { by, fault: f } => {
            *fault = Some(f);
            tokio::time::sleep(by).await;
            run.await
        }
        Verdict::Hide { for_, fault: f } => {
            // A change to an existing resource: reads keep seeing the version from before it.
            let previous = match path_id {
                Some(id) => current_json(db, cfg, id).await,
                None => None,
            };
            let resp = run.await;
            if !resp.status().is_success() {
                return resp;
            }
            // The native API's answer names its resource; an AWS answer carries what its changes wrote.
            let ids = match (resp.extensions().get::<ResourceId>(), resp.extensions().get::<Written>()) {
                (Some(ResourceId(id)), _) => std::slice::from_ref(id),
                (None, Some(Written(ids))) => ids.as_slice(),
                (None, None) => &[],
            };
            for id in ids {
                match (path_id, &previous) {
                    (Some(changed), Some(prev)) if changed == id => engine.lag(id, Some(prev.clone()), for_).await,
                    (Some(_), _) => {}
                    (None, _) => engine.lag(id, None, for_).await,
                }
                *fault = Some(f.clone());
            }
            resp
        }
        Verdict::ApplyThenFail { error, fault: f } => {
            let resp = run.await;
            if resp.status().is_success() {
                *fault = Some(f);
                answer(error)
            } else {
                resp
            }
        }
        Verdict::NoResponse { mode, hang, fault: f } => {
            *fault = Some(f);
            if mode == NoResponseMode::Hang {
                tokio::time::sleep(hang).await;
            }
            // A body that fails makes the server drop the connection: the client gets no complete answer.
            let body = axum::body::Body::from_stream(futures::stream::once(async {
                Err::<axum::body::Bytes, std::io::Error>(std::io::Error::other("fault injection: no response"))
            }));
            let mut resp = Response::new(body);
            resp.extensions_mut().insert(ErrorCode("NoResponse".into()));
            resp
        }
    }
}

//! Every call passes here: a request ID; authentication and the role its operation needs (from the spec's
//! `security`); bounded path IDs and keys; the fault engine's verdict and eventual consistency; metrics; and
//! the audit log — the entry of a change written in its own transaction (see `crate::call`), any other entry
//! before or just after the answer. A request body has a deadline of its own here (`BodyWatch`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use axum::extract::{FromRequest, FromRequestParts, MatchedPath, RawPathParams, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use fakecloud_api::{REQUEST_ID_HEADER, codes};

use super::extract;
use super::state::AppState;
use crate::auth::Role;
use crate::call::ErrorCode;
use crate::call::{CallContext, ResourceId};
use crate::db::audit::rows::Record;
use crate::db::group_commit::settled;
use crate::db::now_ms;
use crate::error::{ApiError, Kind};
use crate::faults::{Call, Subject, effects};
use crate::store;
use crate::validate;

/// The most of a request's path its audit entry keeps.
const AUDITED_PATH_MAX_CHARS: usize = 1024;

/// Authenticate, authorise, and record every API call.
pub(super) async fn gatekeeper(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path();
    let route = req.extensions().get::<MatchedPath>().map(|m| m.as_str().to_string());
    let op = route.as_deref().and_then(|r| st.operations.get(&method, r)).cloned();
    let mutating = !matches!(method, Method::GET | Method::HEAD);
    // Health, metrics and the spec are open to all and not audited; other methods on them get the 405 below.
    if route.is_some() && op.is_none() && !path.starts_with("/v1") && !mutating {
        return next.run(req).await;
    }
    let role = st.tokens.role_of(req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()));
    let operation = op.as_ref().map_or_else(|| "Unknown".to_string(), |o| o.name.clone());
    let (recorder, req) =
        Recorder::open(&st, req, role, operation, op.as_ref().filter(|_| mutating).map(|o| o.success), |e| {
            e.into_response()
        });
    let (mut parts, body) = req.into_parts();
    let path_params: Vec<String> = RawPathParams::from_request_parts(&mut parts, &())
        .await
        .map(|p| p.iter().map(|(_, v)| v.to_string()).collect())
        .unwrap_or_default();
    // An ID far longer than any this API hands out is refused, not looked up, repeated or audited whole.
    let bad_input = path_params
        .iter()
        .find_map(|v| validate::PATH_ID.check("path", v).err())
        .or_else(|| extract::idempotency_key(&parts.headers).err());
    let path_id = path_params.last().filter(|_| bad_input.is_none()).cloned();
    let req = Request::from_parts(parts, body);
    let entry = &recorder.entry;

    let mut fault = None;
    // Answered only once every change the call read is committed (see db::group_commit).
    let resp = recorder.run(async {
            match (&op, role) {
                (None, _) if route.is_none() => next.run(req).await,
                (None, _) => {
                    // The open endpoints (health, metrics, the spec) are GET only.
                    let allow = route.as_deref().and_then(|r| st.operations.allow(r)).unwrap_or_else(|| "GET, HEAD".into());
                    let message = format!("{method} is not allowed on {}; it allows {allow}", entry.path);
                    let mut r = ApiError::new(Kind::Status(StatusCode::METHOD_NOT_ALLOWED.as_u16()), codes::METHOD_NOT_ALLOWED, message).into_response();
                    if let Ok(v) = HeaderValue::from_str(&allow) {
                        r.headers_mut().insert(header::ALLOW, v);
                    }
                    r
                }
                (Some(_), None) => {
                    let mut r = ApiError::new(
                        Kind::Status(StatusCode::UNAUTHORIZED.as_u16()),
                        codes::UNAUTHORIZED,
                        "missing or invalid bearer token: send Authorization: Bearer <token> (see the credentials file the emulator printed at start)",
                    )
                    .into_response();
                    r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                    r
                }
                (Some(op), Some(role)) if role < op.role => {
                    ApiError::new(Kind::Status(StatusCode::FORBIDDEN.as_u16()), codes::FORBIDDEN, format!("{} needs the admin token", op.name)).into_response()
                }
                (Some(op), Some(role)) => {
                    if let Some(e) = &bad_input {
                        return e.clone().into_response();
                    }
                    let token = if role == Role::Admin { &st.tokens.admin } else { &st.tokens.user };
                    let admin_only = op.role == Role::Admin;
                    if !admin_only {
                        st.faults().sync().await;
                    }
                    let (subject, req) = if !admin_only && st.faults().wants_subject().await {
                        match describe(&st, path_id.as_deref(), req).await {
                            Ok(described) => described,
                            Err(e) => return e.into_response(),
                        }
                    } else {
                        (None, req)
                    };
                    // Faults see a HEAD as the GET it is.
                    let call_method = if method == Method::HEAD { Method::GET } else { method.clone() };
                    let call = Call {
                        operation: &op.name,
                        stands_for: None,
                        method: &call_method,
                        resource_id: path_id.as_deref(),
                        role,
                        admin_only,
                        token,
                        subject: subject.as_ref(),
                    };
                    let (verdict, headers) = st.faults().judge(&call).await;
                    let resp = effects::apply(verdict, next.run(req), IntoResponse::into_response, st.faults(), &st.db, &st.cfg, path_id.as_deref(), &mut fault).await;
                    let resp = effects::shape_quota_refusal(resp, st.faults()).await;
                    // Eventual consistency is the public API's lag: the admin token is the cloud's own view (its
                    // machines — the simulated kubelets — and the operator), which sees every instance at once.
                    let mut resp = if mutating || role == Role::Admin {
                        resp
                    } else {
                        effects::conceal(resp, &op.name, path_id.as_deref(), st.faults()).await
                    };
                    // Rate limits' remaining counts, on every answer.
                    effects::put_headers(&mut resp, headers);
                    resp
                }
            }
        })
        .await;
    recorder.close(&st, resp, path_id, fault).await
}

/// A call as every face of the cloud records it: its request ID, its audit entry (written with its change, for
/// a call that makes one: see `crate::call`), its metrics, and its body's deadline (`BodyWatch`).
pub(crate) struct Recorder {
    started: Instant,
    /// Its entry as it is so far: a face that learns the operation or the caller from the request (the AWS
    /// face, from its body) fills them in before [`Recorder::close`].
    pub(crate) entry: Record,
    ctx: Arc<CallContext>,
    body_read: Option<Arc<BodyRead>>,
    mutating: bool,
    /// An error as the face answers it (the recorder's own: a body too late), in the call's scope.
    answer_error: fn(ApiError) -> Response,
}

impl Recorder {
    /// Open the record of `req`'s call, whose body is watched from now on. `change`: the status its entry is
    /// written with if it commits a change (`None`: it does not change state). `answer_error`: how the face
    /// answers an error.
    pub(crate) fn open(
        st: &AppState,
        req: Request,
        role: Option<Role>,
        operation: String,
        change: Option<u16>,
        answer_error: fn(ApiError) -> Response,
    ) -> (Self, Request) {
        let started = Instant::now();
        // A path is audited as long as a path of this API can be; a longer one (64 KB, say) only to that length.
        let path: String = req.uri().path().chars().take(AUDITED_PATH_MAX_CHARS).collect();
        let method = req.method().clone();
        let (parts, body) = req.into_parts();
        let (body, body_read) = BodyWatch::watch(&parts.headers, body, st.cfg.connections.body_read_timeout);
        let entry = Record {
            time_ms: 0,
            request_id: uuid::Uuid::new_v4().simple().to_string(),
            role: role.map_or("anonymous", Role::as_str),
            operation,
            method: method.to_string(),
            path,
            resource_id: None,
            status: 0,
            error_code: None,
            latency_us: 0,
            fault: None,
        };
        // A change is audited in its own transaction, as if it succeeds (see crate::call).
        let written = change.map(|status| (Record { status, ..entry.clone() }, st.audit.clone()));
        let ctx = CallContext::new(entry.request_id.clone(), written);
        let mutating = !matches!(method, Method::GET | Method::HEAD);
        (Self { started, entry, ctx, body_read, mutating, answer_error }, Request::from_parts(parts, body))
    }

    pub(crate) fn request_id(&self) -> &str {
        &self.entry.request_id
    }

    /// The call only read, whatever its method (a face learns it from the body: the AWS face's `Describe*` are
    /// POSTs): its entry goes with the next batch of reads instead of a transaction of its own, and the data
    /// plane has nothing to follow.
    pub(crate) fn only_read(&mut self) {
        self.mutating = false;
    }

    /// Answer the call with `answer`, run as this call; answered once every change it read is committed (see
    /// `db::group_commit`).
    pub(crate) async fn run<F: std::future::Future<Output = Response>>(&self, answer: F) -> Response {
        settled(self.ctx.scope(answer)).await
    }

    /// Close the record with the call's answer: the request ID on it, a body that came too late said so,
    /// the data plane poked after a change, metrics, the audit entry. `fault`: what a fault made of the call.
    pub(crate) async fn close(
        self,
        st: &AppState,
        mut resp: Response,
        path_id: Option<String>,
        fault: Option<String>,
    ) -> Response {
        let Self { started, entry, ctx, body_read, mutating, answer_error } = self;
        if let Some(read) = &body_read {
            // The body did not arrive in time: whatever the call made of a cut-off body, the answer is that.
            if read.timed_out.load(Ordering::Acquire) {
                let timeout = st.cfg.connections.body_read_timeout;
                let late = ApiError::new(
                    Kind::Status(StatusCode::REQUEST_TIMEOUT.as_u16()),
                    codes::REQUEST_TIMEOUT,
                    format!(
                        "the request body did not arrive within {timeout:?} of the request's head (--body-read-timeout)"
                    ),
                );
                resp = ctx.scope(async { answer_error(late) }).await;
            }
            // Answered before its body was read (refused, say): the rest of the body may still be on its way, and
            // a client that pooled the connection would send its next request after it. Say the connection is done.
            if !read.done.load(Ordering::Acquire) {
                resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
        }
        if let Ok(v) = HeaderValue::from_str(&entry.request_id) {
            resp.headers_mut().insert(REQUEST_ID_HEADER, v);
        }
        let status = resp.status().as_u16();
        // Whatever changed (a load balancer, an instance behind one, a reset), the data plane follows it now.
        if mutating
            && resp.status().is_success()
            && let Some(dataplane) = &st.dataplane
        {
            dataplane.poke();
        }
        let elapsed = started.elapsed();
        st.metrics.observe(&entry.operation, status, elapsed.as_secs_f64());
        let written = ctx.written();
        // An answer that names no resource (the AWS face's XML) is about the one its change was written with.
        let resource_id = resp.extensions().get::<ResourceId>().map(|r| r.0.clone()).or(path_id);
        let resource_id = resource_id.or_else(|| written.as_ref().and_then(|(_, w)| w.resource_id.clone()));
        let record = Record {
            time_ms: now_ms(),
            resource_id,
            status,
            error_code: resp.extensions().get::<ErrorCode>().map(|c| c.0.to_string()),
            latency_us: i64::try_from(elapsed.as_micros()).unwrap_or(i64::MAX),
            fault: fault.clone(),
            ..entry
        };
        match written {
            // Written with the change, and the answer is the one it was written as.
            Some((_, w)) if (w.status, &w.resource_id, &w.fault) == (status, &record.resource_id, &record.fault) => {}
            Some((seq, _)) => st.audit.amend(seq, &record).await,
            None if mutating => st.audit.record_now(record).await,
            None => st.audit.record(record),
        }
        if let Some(f) = fault {
            st.metrics.fault_injected(&f);
        }
        resp
    }
}

/// A request body that notes when it has been read to its end, and fails once its deadline has passed: a body
/// that trickles in (a byte every few seconds) holds its connection no longer than the body-read timeout.
struct BodyWatch {
    inner: axum::body::Body,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    read: Arc<BodyRead>,
}

/// What became of a watched body.
#[derive(Debug, Default)]
struct BodyRead {
    done: AtomicBool,
    timed_out: AtomicBool,
}

impl BodyWatch {
    /// `body`, and what becomes of it, if the headers say there is one.
    fn watch(
        headers: &axum::http::HeaderMap,
        body: axum::body::Body,
        timeout: std::time::Duration,
    ) -> (axum::body::Body, Option<Arc<BodyRead>>) {
        let length =
            headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
        let declared = length.is_some_and(|n| n > 0) || headers.contains_key(header::TRANSFER_ENCODING);
        if !declared {
            return (body, None);
        }
        let read = Arc::new(BodyRead::default());
        // A timeout too long for the clock is none.
        let deadline = tokio::time::Instant::now().checked_add(timeout).unwrap_or_else(far_future);
        let watched = Self { inner: body, deadline: Box::pin(tokio::time::sleep_until(deadline)), read: read.clone() };
        (axum::body::Body::new(watched), Some(read))
    }
}

fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + std::time::Duration::from_secs(86_400 * 365)
}

impl hyper::body::Body for BodyWatch {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        use std::task::Poll;
        let frame = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(frame, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.read.done.store(true, Ordering::Release);
        }
        if frame.is_pending() && self.deadline.as_mut().poll(cx).is_ready() {
            self.read.timed_out.store(true, Ordering::Release);
            return Poll::Ready(Some(Err(axum::Error::new("the request body did not arrive in time"))));
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// What a call is about, for faults that match on zone, name or tag: the instance or load balancer named in
/// the path, or what a create's JSON body asks for (the body is read and put back).
async fn describe(st: &AppState, path_id: Option<&str>, req: Request) -> Result<(Option<Subject>, Request), ApiError> {
    if let Some(id) = path_id {
        // A resource that cannot be read now is one no rule matches by name, zone or tag.
        let labels = store::labels(&st.db, id).await.ok().flatten();
        let subject = labels.map(Subject::from);
        return Ok((subject, req));
    }
    if req.method() != Method::POST {
        return Ok((None, req));
    }
    let (parts, body) = req.into_parts();
    let bytes = axum::body::Bytes::from_request(Request::from_parts(parts.clone(), body), &())
        .await
        .map_err(extract::body_rejection)?;
    let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let text = |k: &str| value.get(k).and_then(|v| v.as_str()).map(str::to_string);
    let subject = Subject {
        name: text("name"),
        zone: text("zone"),
        tags: value.get("tags").and_then(|t| serde_json::from_value(t.clone()).ok()).unwrap_or_default(),
    };
    Ok((Some(subject), Request::from_parts(parts, axum::body::Body::from(bytes))))
}

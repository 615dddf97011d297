//! The AWS face (issue #49): the cloud as AWS's SDKs and CLI see it, beside the native REST API (`crate::http`)
//! on the same store. A call is the Query protocol (`POST /` with a form body, or `GET /?Action=…`), signed
//! with SigV4 by the cloud's own key pair ([`credentials`]); its answer is XML in EC2's shape. Each call is
//! recorded as the native API's are (`http::Recorder`: request ID, audit entry named by its action, metrics), and
//! judged by the fault engine as the native call it stands for is (`ec2`'s table of what each action stands for;
//! `error`, how a fault's refusal reads in AWS's words).
//!
//! - [`credentials`]: each cloud's key pair, derived from its user token.
//! - [`sigv4`]: the signature, verified. [`query`]: the request's parameters. [`xml`]: the answers.
//! - `error`: AWS's codes, for the face's refusals and the cloud's errors alike.
//! - `api`: which API a call is to; `actions`: what its table says of an action; `about`: what a call is about,
//!   for the fault rules that match on a resource, its zone, name or tags (`named`: what each API reads for it).
//! - `ec2`: EC2's operations. `elb`: classic Elastic Load Balancing's. `elbv2`: Elastic Load Balancing v2's,
//!   network load balancers.

mod about;
mod actions;
mod api;
pub mod credentials;
mod ec2;
mod elb;
mod elbv2;
mod error;
mod named;
mod query;
pub mod sigv4;
mod xml;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::Response;
use axum::routing::get;

use self::about::About;
use self::api::{Api, Style};
use self::credentials::Keys;
use self::error::AwsError;
use self::query::Params;
use crate::auth::Role;
use crate::call::Written;
use crate::error::{ApiError, Kind};
use crate::faults::{Call, Verdict, effects};
use crate::http::{AppState, MAX_BODY_BYTES, Recorder};

/// The face of one cloud: its state and its key pair.
#[derive(Clone)]
struct Face {
    st: AppState,
    keys: Arc<Keys>,
}

/// The AWS face of the cloud whose state is `st`, at `/`.
pub fn router(st: AppState) -> Router {
    let keys = Arc::new(Keys::of(&st.tokens));
    Router::new().route("/", get(answer).post(answer)).with_state(Face { st, keys })
}

/// The EC2 ID of the cloud's one VPC, whose default security group the cloud makes.
pub fn vpc_id(topo: &crate::config::Topology) -> String {
    ec2::vpc_id(topo)
}

/// The face's operations (every API's actions), which fault rules and rate limits may name beside the native
/// API's.
pub fn operation_names() -> Vec<String> {
    let mut names: Vec<String> = Api::ALL.into_iter().flat_map(actions::names).map(str::to_string).collect();
    // Elastic Load Balancing's two versions share names (`DescribeLoadBalancers`).
    names.sort();
    names.dedup();
    names
}

/// Whether `authorization` is a SigV4 header naming `key_id`, the access key ID of a cloud
/// (`Keys::access_key_id_of` its tokens, derived once): where the server routes an AWS call (the face then
/// verifies its signature).
pub fn names_cloud(authorization: Option<&str>, key_id: &str) -> bool {
    authorization.and_then(sigv4::key_id).is_some_and(|id| id == key_id)
}

/// What the audit entry learns of a call as it is answered: the action, if one the face knows, whether the
/// caller proved to be the cloud's user, and the fault that shaped the answer.
#[derive(Default)]
struct Learned {
    action: Option<&'static str>,
    /// Whether the action only reads (`actions::reads`).
    reads: bool,
    signed: bool,
    /// The fault that shaped the answer, if one did.
    fault: Option<String>,
}

async fn answer(State(face): State<Face>, req: Request) -> Response {
    // Any action may change state: one that does writes its entry with its change, as a native write does.
    let (mut recorder, req) = Recorder::open(&face.st, req, None, "Unknown".into(), Some(200), answer_error);
    let request_id = recorder.request_id().to_string();
    let mut learned = Learned::default();
    let resp = recorder
        .run(async {
            let mut style = Style::Ec2;
            match call(&face, req, &request_id, &mut learned, &mut style).await {
                Ok(resp) => resp,
                Err(e) => xml::error(style, &e, &request_id),
            }
        })
        .await;
    if let Some(action) = learned.action {
        recorder.entry.operation = action.to_string();
    }
    if learned.signed {
        recorder.entry.role = Role::User.as_str();
    }
    if learned.reads {
        recorder.only_read();
    }
    recorder.close(&face.st, resp, None, learned.fault).await
}

/// Answer `req`; a refusal is written in `style`, the dialect of the API it was to once that is known.
async fn call(
    face: &Face,
    req: Request,
    request_id: &str,
    learned: &mut Learned,
    style: &mut Style,
) -> Result<Response, AwsError> {
    let (parts, body) = req.into_parts();
    // Within the native API's bound; a body cut off by its deadline is answered by the recorder (408).
    let declared = parts.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    let body = axum::body::to_bytes(body, MAX_BODY_BYTES).await.map_err(|e| match declared {
        Some(n) if n > MAX_BODY_BYTES => AwsError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            format!("the request body of {n} bytes is over the limit of {MAX_BODY_BYTES}"),
        ),
        _ => AwsError::client("MalformedQueryString", format!("the request body could not be read: {e}")),
    })?;
    let query = parts.uri.query().unwrap_or("");
    let form: &[u8] = if parts.method == Method::POST { &body } else { b"" };
    if !form.is_empty() && !is_form(parts.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok())) {
        return Err(AwsError::invalid_value("The request body must be application/x-www-form-urlencoded"));
    }
    // Parsed before the signature is checked only so that a refusal is in the dialect of the API the call is to
    // and the audit log names its action; the signature then proves the scope these are read from.
    let params = Params::parse(query, form);
    let api = parts
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(sigv4::service)
        .and_then(|service| Api::of(service, params.as_ref().ok().and_then(|p| p.peek("Version"))));
    if let Some(api) = api {
        *style = api.style();
    }
    let named = api.zip(params.as_ref().ok().and_then(|p| p.peek("Action")));
    learned.action = named.and_then(|(api, a)| actions::action(api, a));
    learned.reads = api.zip(learned.action).is_some_and(|(api, a)| actions::reads(api, a));
    let signed = sigv4::Signed {
        method: parts.method.as_str(),
        path: parts.uri.path(),
        query,
        headers: &parts.headers,
        body: &body,
    };
    let st = &face.st;
    sigv4::verify(&signed, &face.keys, &st.cfg.topology.region, &Api::services(), jiff::Timestamp::now())?;
    learned.signed = true;
    // A verified signature is scoped to one of the services the APIs sign as.
    let api = api.ok_or_else(|| AwsError::internal("a verified signature names no API the face answers"))?;
    let mut params = params?;
    let action = params
        .take("Action")
        .ok_or_else(|| AwsError::client("MissingAction", "The request must contain the parameter Action"))?;
    let known = actions::action(api, &action).ok_or_else(|| invalid_action(&action))?;
    crate::call::learned(known, Role::User.as_str());
    match params.take("Version") {
        None => return Err(AwsError::client("MissingParameter", "The request must contain the parameter Version")),
        Some(v) if v != api.version() => {
            let answered: Vec<&str> =
                Api::ALL.iter().filter(|a| a.service() == api.service()).map(|a| a.version()).collect();
            return Err(AwsError::client(
                "InvalidAction",
                format!(
                    "The action {action} is not valid for version {v}; this endpoint answers {} version {}",
                    api.service(),
                    answered.join(" and ")
                ),
            ));
        }
        Some(_) => {}
    }
    // Boxed: its future is some 18 KB (the fault engine's and every operation's states), which each layer around
    // this call (the recorder's scope, axum's handler) would otherwise copy whole on every call.
    Ok(Box::pin(judged(face, api, known, params, request_id, learned)).await)
}

fn invalid_action(action: &str) -> AwsError {
    AwsError::client("InvalidAction", format!("The action {action} is not valid for this web service."))
}

/// The fault engine's verdict on a call to `action`, carried out around its answer: judged as a native call of the
/// user's (the same rules, rate limits and their buckets, outages), by the action's name and by the native
/// operation it stands for, and refused in `api`'s words.
async fn judged(
    face: &Face,
    api: Api,
    action: &'static str,
    params: Params,
    request_id: &str,
    learned: &mut Learned,
) -> Response {
    let st = &face.st;
    let faults = st.faults();
    // Faults set through another replica on the same database hold here too.
    faults.sync().await;
    let method = if actions::reads(api, action) { Method::GET } else { Method::POST };
    // What the call is about costs a look-up for some APIs (a classic ELB's name): found only when a fault needs it.
    let wants_subject = faults.wants_subject().await;
    let about = if wants_subject || faults.wants_resource().await {
        about::of(st, &face.keys, api, action, &params, wants_subject).await
    } else {
        About::default()
    };
    let call = Call {
        operation: action,
        stands_for: actions::native(api, action),
        method: &method,
        resource_id: about.resource_id.as_deref(),
        role: Role::User,
        admin_only: false,
        token: &st.tokens.user,
        subject: about.subject.as_ref(),
    };
    let (verdict, remaining) = faults.judge(&call).await;
    let verdict = match verdict {
        // The limit's own status and code are the native API's: here it is the API's own throttling.
        Verdict::Throttle { error, fault } => {
            Verdict::Refuse { error: ApiError { kind: Kind::Throttled, ..error }, fault }
        }
        verdict => verdict,
    };
    let run = async {
        let answer = match api {
            Api::Ec2 => ec2::call(st, &face.keys, action, params).await,
            Api::Elb => elb::call(st, &face.keys, action, params).await,
            Api::Elbv2 => elbv2::call(st, &face.keys, action, params).await,
        };
        let mut resp = answer
            .and_then(|a| xml::response(api.style(), api.xmlns(), action, request_id, a))
            .unwrap_or_else(|e| xml::error(api.style(), &e, request_id));
        // What its changes wrote, which an AWS answer does not name in one place: what eventual consistency hides.
        let written = crate::call::written();
        if !written.is_empty() {
            resp.extensions_mut().insert(Written(written));
        }
        resp
    };
    let refuse = |mut e: ApiError| {
        // A fault's headers (an outage's Retry-After, a rule's own) as the native answer has them.
        let headers = std::mem::take(&mut e.headers);
        let mut resp = xml::error(api.style(), &AwsError::of(e, api), request_id);
        effects::put_headers(&mut resp, headers);
        resp
    };
    let changed = about.resource_id.as_deref();
    let mut resp = effects::apply(verdict, run, refuse, faults, &st.db, &st.cfg, changed, &mut learned.fault).await;
    effects::put_headers(&mut resp, remaining);
    resp
}

/// An error of the call's record (a body too late), before its API is known: in EC2's shape.
fn answer_error(e: ApiError) -> Response {
    xml::error(Style::Ec2, &AwsError::from(e), &crate::call::request_id())
}

/// `application/x-www-form-urlencoded`, with or without parameters (`; charset=utf-8`, as botocore sends).
fn is_form(content_type: Option<&str>) -> bool {
    content_type
        .and_then(|c| c.split(';').next())
        .is_some_and(|c| c.trim().eq_ignore_ascii_case("application/x-www-form-urlencoded"))
}

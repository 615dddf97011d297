//! The AWS face (issue #49): the cloud as AWS's SDKs and CLI see it, beside the native REST API (`crate::http`)
//! on the same store. A call is the Query protocol (`POST /` with a form body, or `GET /?Action=…`), signed
//! with SigV4 by the cloud's own key pair ([`credentials`]); its answer is XML in EC2's shape. Each call is
//! recorded as the native API's are (`http::Recorder`: request ID, audit entry named by its action, metrics).
//!
//! - [`credentials`]: each cloud's key pair, derived from its user token.
//! - [`sigv4`]: the signature, verified. [`query`]: the request's parameters. [`xml`]: the answers.
//! - `error`: AWS's codes, for the face's refusals and the cloud's errors alike.
//! - `ec2`: EC2's operations.

pub mod credentials;
mod ec2;
mod error;
mod query;
pub mod sigv4;
mod xml;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::Response;
use axum::routing::get;

use self::credentials::Keys;
use self::error::AwsError;
use self::query::Params;
use crate::auth::{Role, Tokens};
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

/// Whether `authorization` is a SigV4 header naming the key of the cloud whose tokens are `tokens`: where the
/// server routes an AWS call (the face then verifies its signature).
pub fn names_cloud(authorization: Option<&str>, tokens: &Tokens) -> bool {
    authorization.and_then(sigv4::key_id).is_some_and(|id| id == Keys::access_key_id_of(tokens))
}

/// What the audit entry learns of a call as it is answered: the action, if one the face knows, and whether
/// the caller proved to be the cloud's user.
#[derive(Default)]
struct Learned {
    action: Option<&'static str>,
    signed: bool,
}

async fn answer(State(face): State<Face>, req: Request) -> Response {
    // Any action may change state: one that does writes its entry with its change, as a native write does.
    let (mut recorder, req) = Recorder::open(&face.st, req, None, "Unknown".into(), Some(200), answer_error);
    let request_id = recorder.request_id().to_string();
    let mut learned = Learned::default();
    let resp = recorder
        .run(async {
            match call(&face, req, &request_id, &mut learned).await {
                Ok(resp) => resp,
                Err(e) => xml::error(&e, &request_id),
            }
        })
        .await;
    if let Some(action) = learned.action {
        recorder.entry.operation = action.to_string();
    }
    if learned.signed {
        recorder.entry.role = Role::User.as_str();
    }
    recorder.close(&face.st, resp, None, None).await
}

async fn call(face: &Face, req: Request, request_id: &str, learned: &mut Learned) -> Result<Response, AwsError> {
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
    // Parsed before the signature is checked only so that the audit log names the action of a refused call.
    let params = Params::parse(query, form);
    learned.action = params.as_ref().ok().and_then(|p| p.peek("Action")).and_then(ec2::action);
    let signed = sigv4::Signed {
        method: parts.method.as_str(),
        path: parts.uri.path(),
        query,
        headers: &parts.headers,
        body: &body,
    };
    let st = &face.st;
    sigv4::verify(&signed, &face.keys, &st.cfg.topology.region, &[ec2::SERVICE], jiff::Timestamp::now())?;
    learned.signed = true;
    let mut params = params?;
    let action = params
        .take("Action")
        .ok_or_else(|| AwsError::client("MissingAction", "The request must contain the parameter Action"))?;
    let known = ec2::action(&action).ok_or_else(|| ec2::invalid_action(&action))?;
    crate::call::learned(known, Role::User.as_str());
    match params.take("Version") {
        None => return Err(AwsError::client("MissingParameter", "The request must contain the parameter Version")),
        Some(v) if v != ec2::VERSION => {
            return Err(AwsError::client(
                "InvalidAction",
                format!("The action {action} is not valid for version {v}; this endpoint answers EC2 {}", ec2::VERSION),
            ));
        }
        Some(_) => {}
    }
    let answer = ec2::call(st, &face.keys, known, params).await?;
    xml::response(known, ec2::XMLNS, request_id, answer)
}

/// An error of the call's record (a body too late), in EC2's shape.
fn answer_error(e: crate::error::ApiError) -> Response {
    xml::error(&AwsError::from(e), &crate::call::request_id())
}

/// `application/x-www-form-urlencoded`, with or without parameters (`; charset=utf-8`, as botocore sends).
fn is_form(content_type: Option<&str>) -> bool {
    content_type
        .and_then(|c| c.split(';').next())
        .is_some_and(|c| c.trim().eq_ignore_ascii_case("application/x-www-form-urlencoded"))
}

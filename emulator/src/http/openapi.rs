//! The OpenAPI document as served: what utoipa derives from the handlers and the API types, completed with
//! what it cannot see there — the responses every operation shares (authentication, bodies, IDs in the path,
//! idempotent replays, faults) and the bounds the API enforces, written from the same constants and rules as
//! the checks that enforce them (`fakecloud_api::limits`, `validate`).

use fakecloud_api::limits::*;
use fakecloud_api::{IDEMPOTENCY_KEY_HEADER, InstanceState, REPLAYED_HEADER, REQUEST_ID_HEADER};
use serde_json::{Map, Value, json};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::config::Config;
use crate::validate::{self, Text};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "fakecloud",
        description = "A local cloud emulator: instances, networks and route tables, load balancers, quotas and an audit log. \
                       Every call needs `Authorization: Bearer <token>`; admin calls need the admin token. Every error \
                       has the body `ErrorBody`; a method a path does not have is answered as \
                       `components.responses.MethodNotAllowed` (405, with `Allow`)."
    ),
    modifiers(&BearerTokens),
    components(schemas(fakecloud_api::ErrorBody))
)]
pub(super) struct ApiDoc;

struct BearerTokens;

impl Modify for BearerTokens {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        for name in ["user", "admin"] {
            components.add_security_scheme(
                name,
                SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
            );
        }
    }
}

const ERROR: &str = "#/components/schemas/ErrorBody";

/// Where in the document a bound goes.
#[derive(Debug)]
enum At {
    /// A property of a component schema, through nested properties.
    Property(&'static str, &'static [&'static str]),
    /// One variant of a tagged enum (`FaultAction`), by its tag.
    Tagged(&'static str, &'static str),
    /// A property of one variant of a tagged enum, by its tag.
    Variant(&'static str, &'static str, &'static str),
    /// A parameter of an operation (path, method, name).
    Parameter(&'static str, &'static str, &'static str),
}

/// Every bound the API enforces on a field, as JSON Schema keywords. `operations` are the API's operation
/// names.
fn bounds(cfg: &Config, operations: &[String]) -> Vec<(At, Value)> {
    use At::*;
    // Optional fields are `["string", "null"]`: an enum of them lists null too.
    let one_of = |names: Vec<&str>| {
        let mut values: Vec<Value> = names.into_iter().map(Value::from).collect();
        values.push(Value::Null);
        json!({ "enum": values })
    };
    let zones = one_of(cfg.topology.zone_names());
    let types = one_of(cfg.topology.instance_types.iter().map(|t| t.name.as_str()).collect());
    let text = |t: &Text| t.schema();
    // Where the bound replaces the whole schema (items, map values), it must keep saying "a string".
    let string = |t: &Text| {
        let mut s = t.schema();
        s["type"] = "string".into();
        s
    };
    let states = json!({"enum": InstanceState::ALL.iter().map(|s| s.as_str()).collect::<Vec<_>>()});
    let count = json!({"minimum": 0, "maximum": FAULT_COUNT_MAX});
    let time = json!({"format": "date-time"});
    let port = json!({"minimum": PORT_MIN, "maximum": u16::MAX});
    let page_size = json!({"minimum": PAGE_SIZE_MIN, "maximum": PAGE_SIZE_MAX, "default": PAGE_SIZE_DEFAULT});
    let error_status = json!({"minimum": 400, "maximum": 599});
    let latency = json!({"minimum": 0, "maximum": LATENCY_MAX_MS});
    let fault_seconds = json!({"minimum": 0, "maximum": FAULT_SECONDS_MAX});
    let window = json!({"exclusiveMinimum": 0, "maximum": WINDOW_SECONDS_MAX});
    let notice = json!({"minimum": 0, "maximum": NOTICE_SECONDS_MAX});
    // A u32 is not an int32: utoipa's format would cap quotas at 2147483647.
    let quota = json!({"format": "int64", "minimum": 0, "maximum": u32::MAX});
    let tags = json!({
        "maxProperties": TAGS_MAX,
        "propertyNames": text(&validate::TAG_KEY),
        "additionalProperties": string(&validate::TAG_VALUE),
    });
    let listeners = json!({"minItems": LISTENERS_MIN});
    let closed = json!({"additionalProperties": false});
    let lease_ttl = json!({"minimum": LEASE_TTL_SECONDS_MIN, "maximum": LEASE_TTL_SECONDS_MAX});
    vec![
        (Property("CreateInstanceRequest", &["name"]), text(&validate::INSTANCE_NAME)),
        (Property("CreateInstanceRequest", &["tags"]), tags),
        (Property("CreateInstanceRequest", &["zone"]), zones.clone()),
        (Property("CreateInstanceRequest", &["instance_type"]), types),
        (Property("StartOutageRequest", &["zone"]), zones),
        (Property("SetRateLimitRequest", &["operation"]), one_of(operations.iter().map(String::as_str).collect())),
        (Property("SetRateLimitRequest", &["operations"]), json!({ "items": {"type": "string", "enum": operations} })),
        (Property("ReclaimRequest", &["tag"]), text(&validate::TAG_PAIR)),
        (Property("StartHangRequest", &["tag"]), text(&validate::TAG_PAIR)),
        (Property("CreateAccountRequest", &["id"]), text(&validate::ACCOUNT_ID)),
        (Property("LeaseRequest", &["account"]), text(&validate::ACCOUNT_ID)),
        (Property("LeaseRequest", &["holder"]), text(&validate::NAME)),
        (Property("LeaseRequest", &["ttl_seconds"]), lease_ttl.clone()),
        (Property("RenewLeaseRequest", &["holder"]), text(&validate::NAME)),
        (Property("RenewLeaseRequest", &["ttl_seconds"]), lease_ttl),
        (Property("CreateRouteTableRequest", &["name"]), text(&validate::NAME)),
        (Property("CreateRouteRequest", &["name"]), text(&validate::ROUTE_NAME)),
        (Property("CreateLoadBalancerRequest", &["name"]), text(&validate::NAME)),
        (Property("SetLbProvisioningRequest", &["load_balancer"]), text(&validate::NAME)),
        (Parameter("/v1/load-balancer-provisioning", "delete", "load_balancer"), text(&validate::NAME)),
        (
            Property("SetLbProvisioningRequest", &["seconds"]),
            json!({"minimum": 0, "maximum": LB_PROVISION_SECONDS_MAX}),
        ),
        (Property("CreateLoadBalancerRequest", &["listeners"]), listeners.clone()),
        (Property("UpdateLoadBalancerRequest", &["listeners"]), listeners),
        (Property("Listener", &["port"]), port.clone()),
        (Property("Listener", &["backend_port"]), port.clone()),
        (Property("HealthCheck", &["port"]), port),
        (Property("HealthCheck", &["path"]), text(&validate::HEALTH_CHECK_PATH)),
        (
            Property("HealthCheck", &["interval_seconds"]),
            json!({"minimum": HEALTH_INTERVAL_MIN, "maximum": HEALTH_INTERVAL_MAX}),
        ),
        (Property("SetQuotaRequest", &["limit"]), quota.clone()),
        (Property("Quota", &["limit"]), quota.clone()),
        (Property("Quota", &["usage"]), quota),
        (Property("SnapshotRequest", &["name"]), text(&validate::SNAPSHOT_NAME)),
        (
            Property("SetRateLimitRequest", &["capacity"]),
            json!({"minimum": RATE_LIMIT_CAPACITY_MIN, "maximum": RATE_LIMIT_CAPACITY_MAX}),
        ),
        (
            Property("SetRateLimitRequest", &["refill_per_second"]),
            json!({"minimum": REFILL_PER_SECOND_MIN, "maximum": REFILL_PER_SECOND_MAX}),
        ),
        (
            Property("SetRateLimitRequest", &["window_seconds"]),
            json!({"minimum": RATE_LIMIT_WINDOW_SECONDS_MIN, "maximum": RATE_LIMIT_WINDOW_SECONDS_MAX}),
        ),
        (Property("SetRateLimitRequest", &["status"]), json!({"enum": [400, 403, 429, 503]})),
        (Property("SetRateLimitRequest", &["code"]), text(&validate::FAULT_CODE)),
        (
            Property("SetRateLimitRequest", &["message"]),
            json!({"minLength": 1, "maxLength": RATE_LIMIT_MESSAGE_MAX_CHARS}),
        ),
        (
            Property("SetRateLimitRequest", &["remaining_format"]),
            json!({"minLength": 1, "maxLength": RATE_LIMIT_FORMAT_MAX_CHARS}),
        ),
        (Property("CreateFaultRuleRequest", &["id"]), text(&validate::NAME)),
        (Property("FaultMatch", &["methods"]), json!({"items": {"enum": ["GET", "POST", "PUT", "PATCH", "DELETE"]}})),
        (Property("FaultMatch", &["roles"]), json!({"items": {"enum": ["user", "admin"]}})),
        (Property("FaultMatch", &["tags"]), json!({ "items": string(&validate::TAG_FILTER) })),
        (Property("FaultTrigger", &["probability"]), json!({"minimum": 0, "maximum": 1})),
        (Property("FaultTrigger", &["duration_seconds"]), window.clone()),
        (Property("FaultTrigger", &["skip"]), count.clone()),
        (Property("FaultTrigger", &["times"]), count.clone()),
        (Property("FaultTrigger", &["from"]), time.clone()),
        (Property("FaultTrigger", &["until"]), time.clone()),
        (Property("CreateFaultRuleRequest", &["position"]), count),
        // serde's deny_unknown_fields, which utoipa writes for structs but not for an enum's variants.
        (Tagged("FaultAction", "error"), closed.clone()),
        (Tagged("FaultAction", "apply-then-fail"), closed.clone()),
        (Tagged("FaultAction", "latency"), closed.clone()),
        (Tagged("FaultAction", "no-response"), closed.clone()),
        (Tagged("FaultAction", "eventual-consistency"), closed.clone()),
        (Variant("FaultAction", "error", "status"), error_status.clone()),
        (Variant("FaultAction", "error", "code"), text(&validate::FAULT_CODE)),
        (Variant("FaultAction", "apply-then-fail", "status"), error_status),
        (Variant("FaultAction", "apply-then-fail", "code"), text(&validate::FAULT_CODE)),
        (Variant("FaultAction", "latency", "ms"), latency.clone()),
        (Variant("FaultAction", "latency", "jitter_ms"), latency.clone()),
        (Variant("FaultAction", "no-response", "hang_seconds"), fault_seconds.clone()),
        (Variant("FaultAction", "eventual-consistency", "seconds"), fault_seconds),
        (Property("CreateLbFaultRuleRequest", &["id"]), text(&validate::NAME)),
        (Property("LbFaultMatch", &["load_balancers"]), json!({ "items": string(&validate::NAME) })),
        (Property("LbFaultMatch", &["backends"]), json!({ "items": string(&validate::NAME) })),
        (
            Property("LbFaultMatch", &["ports"]),
            json!({"items": {"type": "integer", "minimum": PORT_MIN, "maximum": u16::MAX}}),
        ),
        (Tagged("LbFaultAction", "reset"), closed.clone()),
        (Tagged("LbFaultAction", "latency"), closed.clone()),
        (Tagged("LbFaultAction", "black-hole"), closed),
        (Variant("LbFaultAction", "reset", "after_ms"), json!({"minimum": 0, "maximum": LB_RESET_AFTER_MAX_MS})),
        (Variant("LbFaultAction", "latency", "ms"), latency.clone()),
        (Variant("LbFaultAction", "latency", "jitter_ms"), latency),
        (Property("StartOutageRequest", &["duration_seconds"]), window.clone()),
        (Property("ReclaimRequest", &["notice_seconds"]), notice.clone()),
        (
            Property("SpotRandomRequest", &["rate_per_minute"]),
            json!({"minimum": 0, "maximum": SPOT_RATE_PER_MINUTE_MAX}),
        ),
        (Property("SpotRandomRequest", &["notice_seconds"]), notice),
        (Property("SpotRandomRequest", &["duration_seconds"]), window),
        (Parameter("/v1/instances", "get", "page_size"), page_size.clone()),
        (Parameter("/v1/instances", "get", "page_token"), text(&validate::PAGE_TOKEN)),
        (Parameter("/v1/instances", "get", "tag"), text(&validate::TAG_FILTER)),
        (Parameter("/v1/instances", "get", "state"), states),
        (Parameter("/v1/audit", "get", "since"), time),
        (
            Parameter("/v1/audit/stream", "get", "max_seconds"),
            json!({"minimum": AUDIT_STREAM_SECONDS_MIN, "maximum": AUDIT_STREAM_SECONDS_MAX, "default": AUDIT_STREAM_SECONDS_DEFAULT}),
        ),
        // A u16 is not an int32.
        (Parameter("/v1/audit", "get", "status"), json!({"minimum": 0, "maximum": u16::MAX})),
        (Parameter("/v1/load-balancers", "get", "page_size"), page_size),
        (Parameter("/v1/load-balancers", "get", "page_token"), text(&validate::PAGE_TOKEN)),
        (
            Parameter("/v1/audit", "get", "limit"),
            json!({"minimum": AUDIT_LIMIT_MIN, "maximum": AUDIT_LIMIT_MAX, "default": AUDIT_LIMIT_DEFAULT}),
        ),
        (Parameter("/v1/instances", "post", IDEMPOTENCY_KEY_HEADER), text(&validate::IDEMPOTENCY_KEY)),
        (Parameter("/v1/load-balancers", "post", IDEMPOTENCY_KEY_HEADER), text(&validate::IDEMPOTENCY_KEY)),
        (Parameter("/v1/route-tables/{id}/routes", "post", IDEMPOTENCY_KEY_HEADER), text(&validate::IDEMPOTENCY_KEY)),
    ]
}

/// The schema object a bound applies to.
fn find<'d>(doc: &'d mut Value, at: &At) -> Option<&'d mut Value> {
    match at {
        At::Property(schema, path) => {
            let mut node = doc.pointer_mut(&format!("/components/schemas/{schema}"))?;
            for p in *path {
                node = node.get_mut("properties")?.get_mut(*p)?;
            }
            Some(node)
        }
        At::Tagged(schema, tag) => variant(doc, schema, tag),
        At::Variant(schema, tag, prop) => variant(doc, schema, tag)?.get_mut("properties")?.get_mut(*prop),
        At::Parameter(path, method, name) => doc
            .get_mut("paths")?
            .get_mut(*path)?
            .get_mut(*method)?
            .get_mut("parameters")?
            .as_array_mut()?
            .iter_mut()
            .find(|p| p.get("name").and_then(Value::as_str) == Some(name))?
            .get_mut("schema"),
    }
}

/// The variant of the tagged enum `schema` whose tag is `tag`.
fn variant<'d>(doc: &'d mut Value, schema: &str, tag: &str) -> Option<&'d mut Value> {
    doc.pointer_mut(&format!("/components/schemas/{schema}/oneOf"))?
        .as_array_mut()?
        .iter_mut()
        .find(|v| v.pointer("/properties/type/enum/0").and_then(Value::as_str) == Some(tag))
}

/// Write the bounds into `doc`; returns those whose field it does not have (a unit test keeps this empty).
fn apply_bounds(doc: &mut Value, cfg: &Config, operations: &[String]) -> Vec<String> {
    let mut missing = Vec::new();
    for (at, keywords) in bounds(cfg, operations) {
        match find(doc, &at).and_then(Value::as_object_mut) {
            Some(schema) => {
                if let Value::Object(k) = keywords {
                    schema.extend(k);
                }
            }
            None => missing.push(format!("{at:?}")),
        }
    }
    missing
}

fn error(description: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": {"$ref": ERROR}}}})
}

fn header(description: &str) -> Value {
    json!({"description": description, "schema": {"type": "string"}})
}

/// Add a response unless the operation documents that status itself.
fn add(responses: &mut Map<String, Value>, status: &str, response: Value) {
    responses.entry(status).or_insert(response);
}

/// The responses utoipa cannot know an operation has: the gatekeeper's, the JSON extractor's, and the store's
/// for IDs in the path and idempotency keys.
fn complete_responses(path: &str, op: &mut Value) {
    let admin = op.get("security").is_some_and(|s| s.to_string().contains("\"admin\""));
    let has_body = op.get("requestBody").is_some();
    let params = op.get("parameters").and_then(Value::as_array).cloned().unwrap_or_default();
    let param_in = |place: &str| params.iter().any(|p| p.get("in").and_then(Value::as_str) == Some(place));
    let idempotent = params.iter().any(|p| p.get("name").and_then(Value::as_str) == Some(IDEMPOTENCY_KEY_HEADER));
    // The gatekeeper's bound on IDs in the path (`validate::PATH_ID`).
    for p in op.get_mut("parameters").and_then(Value::as_array_mut).into_iter().flatten() {
        if p.get("in").and_then(Value::as_str) == Some("path")
            && let Some(schema) = p.get_mut("schema").and_then(Value::as_object_mut)
            && let Value::Object(bound) = validate::PATH_ID.schema()
        {
            schema.extend(bound);
        }
    }
    let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) else { return };
    if idempotent && let Some(created) = responses.get("201").cloned() {
        let mut replay = created;
        replay["description"] = "An idempotent replay: the resource the first request with this Idempotency-Key \
                                 created, unchanged."
            .into();
        replay["headers"] = json!({ REPLAYED_HEADER: header("`true`") });
        add(responses, "200", replay);
        add(responses, "409", error("IdempotencyKeyReused: the key was used for a different request, or a conflict"));
    }
    if has_body || param_in("query") || param_in("header") {
        add(responses, "400", error("The body, a query parameter or a header is invalid; the message names it"));
    }
    let mut unauthorized = error("Unauthorized: no valid `Authorization: Bearer <token>`");
    unauthorized["headers"] = json!({"WWW-Authenticate": header("`Bearer`")});
    add(responses, "401", unauthorized);
    if admin {
        add(responses, "403", error("Forbidden: the operation needs the admin token"));
    }
    if param_in("path") {
        let what = path.trim_start_matches("/v1/").split('/').next().unwrap_or("resource");
        add(responses, "404", error(&format!("An ID in the path names no {what} (e.g. RouteTableNotFound)")));
        add(responses, "400", error("An ID in the path is longer than any this API hands out, or a header is invalid"));
    }
    if has_body {
        add(
            responses,
            "413",
            error(&format!("PayloadTooLarge: the body is over {} bytes", super::extract::MAX_BODY_BYTES)),
        );
        add(responses, "415", error("UnsupportedMediaType: the body must be sent as application/json"));
    }
    let mut unavailable =
        error("ServiceUnavailable: an outage, or the database momentarily busy; retry after Retry-After");
    unavailable["headers"] = json!({"Retry-After": header("Seconds to wait")});
    add(responses, "503", unavailable);
    add(responses, "default", error("Any other error, e.g. one a fault rule (POST /v1/faults) answers with"));
    for (status, response) in responses.iter_mut() {
        if response.get("description").is_none() {
            response["description"] = status_description(status).into();
        }
        if let Some(r) = response.as_object_mut() {
            let headers = r.entry("headers").or_insert_with(|| json!({}));
            headers[REQUEST_ID_HEADER] = header("The call's ID, as in its audit entry and any error body");
        }
    }
}

fn status_description(status: &str) -> String {
    status
        .parse::<u16>()
        .ok()
        .and_then(|s| axum::http::StatusCode::from_u16(s).ok())
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Response")
        .to_string()
}

/// The document served at `/openapi.json`, for this emulator's zones and instance types.
pub fn document(spec: &utoipa::openapi::OpenApi, cfg: &Config, operations: &[String]) -> Value {
    let mut doc = serde_json::to_value(spec).unwrap_or_default();
    for missing in apply_bounds(&mut doc, cfg, operations) {
        tracing::error!(%missing, "a bound has no field in the OpenAPI document");
    }
    if let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) {
        for (path, item) in paths.iter_mut() {
            for op in item.as_object_mut().into_iter().flat_map(|i| i.values_mut()) {
                complete_responses(path, op);
            }
        }
    }
    let mut not_allowed = error("MethodNotAllowed: the path has no such method; Allow lists those it has");
    not_allowed["headers"] = json!({"Allow": header("The methods the path has")});
    doc["components"]["responses"] = json!({ "MethodNotAllowed": not_allowed });
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bound_finds_its_field() {
        let spec = super::super::api_routes().split_for_parts().1;
        let operations = super::super::Operations::from_spec(&spec).names();
        let mut doc = serde_json::to_value(spec).unwrap_or_default();
        assert_eq!(apply_bounds(&mut doc, &Config::default(), &operations), Vec::<String>::new());
    }
}

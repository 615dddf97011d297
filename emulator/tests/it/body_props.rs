//! Every operation that takes a request body, fed arbitrary JSON over real HTTP: values shaped by the
//! operation's own schema in the served OpenAPI document (so most cases get past the parser and reach the
//! checks and the store), mixed with values that break it — wrong types, huge, negative and fractional
//! numbers, nested junk, missing and extra fields, non-objects and bytes that are not JSON at all. Whatever
//! arrives, the emulator answers: never a 5xx, never a dropped connection, and every refusal is the error
//! envelope.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU32, Ordering};

use crate::common::{ADMIN, Emu};
use fakecloud_api::{
    CreateLoadBalancerRequest, CreateRouteTableRequest, ErrorBody, Listener, Protocol, QuotaName, REQUEST_ID_HEADER,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use serde_json::{Map, Value, json};

/// Cases per operation: with about fifteen operations, a few thousand calls in all.
const CASES_PER_OPERATION: u32 = 256;

/// Numbers that have broken servers: the edges of every integer type a field might be, fractions, integral
/// floats, exponents, negative zero.
fn awkward_number() -> BoxedStrategy<Value> {
    prop_oneof![
        Just(json!(0)),
        Just(json!(-1)),
        Just(json!(1)),
        Just(json!(5.0)),
        Just(json!(0.5)),
        Just(json!(-0.0)),
        Just(json!(1e-11)),
        Just(json!(1e308)),
        Just(json!(-1e308)),
        Just(json!(65535)),
        Just(json!(65536)),
        Just(json!(i64::from(u32::MAX))),
        Just(json!(i64::from(u32::MAX) + 1)),
        Just(json!(i64::MAX)),
        Just(json!(i64::MIN)),
        Just(json!(u64::MAX)),
        Just(json!(9_007_199_254_740_993_u64)),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter("JSON has no NaN or infinity", |f| f.is_finite()).prop_map(Value::from),
        (-1000i64..100_000).prop_map(Value::from),
    ]
    .boxed()
}

/// Strings: plausible values of this API's fields, and text no field expects.
fn awkward_string() -> BoxedStrategy<Value> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "", "node-1", "a", "local-1a", "local-1b", "TCP", "UDP", "HTTP", "spot", "on-demand", "internal",
            "internet-facing", "api", "zone", "service", "compute", "10.244.1.0/24", "fd00::/64", "FD00:0::/64",
            "010.0.0.0/8", "10.0.0.5", "0.0.0.0", "255.255.255.255", "::1", "i-0", "lb-0", "/healthz", "..",
            "../../etc/passwd", "/tmp/x", "a\u{0}b", "é", "CreateInstance", "Create*", "[", "user", "admin",
            "GET", "close", "hang", "error", "latency", "2026-11-22T10:00:00Z", "9999-12-31T23:59:59Z", "k=v",
        ]).prop_map(Value::from),
        1 => ".{0,40}".prop_map(Value::from),
        1 => Just(Value::from("x".repeat(300))),
    ]
    .boxed()
}

/// Any JSON value, nested a few levels.
fn junk() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![Just(Value::Null), any::<bool>().prop_map(Value::from), awkward_number(), awkward_string()];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-z_]{1,12}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
    .boxed()
}

/// The schema `s` with its `$ref` followed.
fn resolve<'d>(doc: &'d Value, s: &'d Value) -> &'d Value {
    match s.get("$ref").and_then(Value::as_str) {
        Some(r) => doc.pointer(r.trim_start_matches('#')).unwrap_or(&Value::Null),
        None => s,
    }
}

/// Values that a field of this name takes, beyond what its schema says (names are free text in the schema, but
/// a route needs a network and an instance that exist): they get bodies past the checks to the store.
#[derive(Debug, Clone)]
struct Hints {
    instance: String,
}

impl Hints {
    fn for_field(&self, name: &str) -> Option<BoxedStrategy<Value>> {
        let instance = self.instance.clone();
        Some(match name {
            "name" | "id" => "[a-z][a-z0-9-]{0,20}".prop_map(Value::from).boxed(),
            "destination" => prop_oneof![
                (0u8..=255, 0u8..=255).prop_map(|(a, b)| Value::from(format!("10.{a}.{b}.0/24"))),
                any::<u16>().prop_map(|x| Value::from(format!("fd00:{x:x}::/64"))),
            ]
            .boxed(),
            "target_instance" => Just(Value::from(instance)).boxed(),
            "backends" => prop::collection::vec(Just(Value::from(instance)), 0..2).prop_map(Value::from).boxed(),
            "private_ip" | "requested_ip" => {
                (0u8..=255, 1u8..=254).prop_map(|(a, b)| Value::from(format!("10.0.{a}.{b}"))).boxed()
            }
            "source_ranges" => prop::sample::subsequence(vec!["0.0.0.0/0", "10.0.0.0/8", "fd00::/8"], 0..3)
                .prop_map(|v| Value::from(v.into_iter().map(Value::from).collect::<Vec<_>>()))
                .boxed(),
            "path" => Just(Value::from("/healthz")).boxed(),
            "from" | "until" => {
                prop::sample::select(vec!["2026-01-01T00:00:00Z", "2099-01-01T00:00:00Z"]).prop_map(Value::from).boxed()
            }
            _ => return None,
        })
    }
}

/// Values shaped by `schema`, now and then replaced by junk at any depth.
fn shaped(doc: &Value, schema: &Value, hints: &Hints, depth: u32) -> BoxedStrategy<Value> {
    let fits = fits(doc, resolve(doc, schema), hints, depth);
    prop_oneof![12 => fits, 1 => junk()].boxed()
}

fn fits(doc: &Value, s: &Value, hints: &Hints, depth: u32) -> BoxedStrategy<Value> {
    if depth > 6 {
        return junk();
    }
    for key in ["oneOf", "anyOf", "allOf"] {
        if let Some(variants) = s.get(key).and_then(Value::as_array).filter(|v| !v.is_empty()) {
            let choices: Vec<BoxedStrategy<Value>> =
                variants.iter().map(|v| shaped(doc, v, hints, depth + 1)).collect();
            return proptest::strategy::Union::new(choices).boxed();
        }
    }
    if let Some(values) = s.get("enum").and_then(Value::as_array).filter(|v| !v.is_empty()) {
        return prop::sample::select(values.clone()).boxed();
    }
    let types: Vec<&str> = match s.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ if s.get("properties").is_some() => vec!["object"],
        _ => return junk(),
    };
    let choices: Vec<BoxedStrategy<Value>> = types.into_iter().map(|t| of_type(doc, s, t, hints, depth)).collect();
    proptest::strategy::Union::new(choices).boxed()
}

fn of_type(doc: &Value, s: &Value, t: &str, hints: &Hints, depth: u32) -> BoxedStrategy<Value> {
    match t {
        "null" => Just(Value::Null).boxed(),
        "boolean" => any::<bool>().prop_map(Value::from).boxed(),
        "integer" | "number" => {
            let min = s.get("minimum").and_then(Value::as_i64).unwrap_or(0);
            let max = s.get("maximum").and_then(Value::as_i64).unwrap_or(1000).max(min);
            prop_oneof![4 => (min..=max).prop_map(Value::from), 1 => awkward_number()].boxed()
        }
        "string" => awkward_string(),
        "array" => {
            let items = s.get("items").cloned().unwrap_or(Value::Null);
            prop::collection::vec(shaped(doc, &items, hints, depth + 1), 0..4).prop_map(Value::from).boxed()
        }
        "object" => object(doc, s, hints, depth),
        _ => junk(),
    }
}

/// An object with each of the schema's properties present or missing, and now and then one it does not have.
fn object(doc: &Value, s: &Value, hints: &Hints, depth: u32) -> BoxedStrategy<Value> {
    let properties: Vec<(String, Value)> = s
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    let required: Vec<String> = s
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).map(String::from).collect())
        .unwrap_or_default();
    let fields: Vec<BoxedStrategy<Option<(String, Value)>>> = properties
        .into_iter()
        .map(|(name, schema)| {
            // Required fields are usually there, optional ones half the time.
            let present = if required.contains(&name) { 0.9 } else { 0.5 };
            let value = match hints.for_field(&name) {
                Some(hint) => prop_oneof![3 => hint, 1 => shaped(doc, &schema, hints, depth + 1)].boxed(),
                None => shaped(doc, &schema, hints, depth + 1),
            };
            prop::option::weighted(present, value.prop_map(move |v| (name.clone(), v))).boxed()
        })
        .collect();
    let extra = prop::option::weighted(0.1, ("[a-z_]{1,10}", junk()));
    (fields, extra)
        .prop_map(|(fields, extra)| {
            let mut m: Map<String, Value> = fields.into_iter().flatten().collect();
            if let Some((k, v)) = extra {
                m.insert(k, v);
            }
            Value::Object(m)
        })
        .boxed()
}

/// The bytes sent: the value as JSON, or that text damaged.
fn body(doc: &Value, schema: &Value, hints: &Hints) -> impl Strategy<Value = Vec<u8>> {
    let value = prop_oneof![8 => shaped(doc, schema, hints, 0), 2 => junk()];
    let damage = prop_oneof![
        12 => Just(None),
        1 => Just(Some(b" x".to_vec())),
        1 => Just(Some(b" {}".to_vec())),
        1 => Just(Some(vec![0xff, 0xfe])),
        1 => Just(Some(b"cut".to_vec())),
    ];
    (value, damage).prop_map(|(v, damage)| {
        let mut text = serde_json::to_vec(&v).unwrap();
        match damage.as_deref() {
            None => {}
            // Cut off mid-document.
            Some(b"cut") => text.truncate(text.len() / 2),
            Some(tail) => text.extend_from_slice(tail),
        }
        text
    })
}

/// Every operation with a request body, from the served document, with its body schema.
fn operations_with_bodies(doc: &Value) -> Vec<(reqwest::Method, String, Value)> {
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            if let Some(schema) = op.pointer("/requestBody/content/application~1json/schema") {
                let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
                ops.push((method, path.clone(), schema.clone()));
            }
        }
    }
    ops
}

/// `path` with its parameters filled from resources made for the test; a parameter it does not know fails
/// the test, so that a new operation is not left out silently.
fn fill(path: &str, table: &str, lb: &str) -> String {
    let filled = match path {
        "/v1/route-tables/{id}/routes" => path.replace("{id}", table),
        "/v1/load-balancers/{id}" => path.replace("{id}", lb),
        "/v1/rate-limits/{id}" => path.replace("{id}", "props"),
        // No such account: the body is read and judged before the account is looked up.
        "/v1/leases/{account}" => path.replace("{account}", "props"),
        // Not `instances`: a limit of 0 there would turn every later create into a refusal.
        "/v1/quotas/{name}" => path.replace("{name}", QuotaName::PublicIps.as_str()),
        _ => path.to_string(),
    };
    assert!(!filled.contains('{'), "body_props does not know how to fill the parameters of {path}");
    filled
}

/// Send `body` to `method path`; fail on a 5xx, a dropped connection, or a refusal that is not the envelope.
async fn check(
    http: &reqwest::Client,
    url: &str,
    method: &reqwest::Method,
    path: &str,
    body: Vec<u8>,
) -> Result<u16, TestCaseError> {
    let resp = http
        .request(method.clone(), format!("{url}{path}"))
        .bearer_auth(ADMIN)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| TestCaseError::fail(format!("no answer (connection dropped?): {e}")))?;
    let status = resp.status().as_u16();
    let request_id = resp.headers().get(REQUEST_ID_HEADER).and_then(|v| v.to_str().ok()).map(String::from);
    let text = resp.text().await.map_err(|e| TestCaseError::fail(format!("the answer was cut off: {e}")))?;
    prop_assert!(status < 500, "{status}: {text}");
    if !(200..300).contains(&status) {
        let envelope: ErrorBody = serde_json::from_str(&text)
            .map_err(|e| TestCaseError::fail(format!("{status} is not the error envelope ({e}): {text}")))?;
        prop_assert_eq!(Some(envelope.error.request_id), request_id);
        prop_assert!(!envelope.error.code.is_empty() && !envelope.error.message.is_empty(), "{text}");
    }
    Ok(status)
}

/// After a fault, rate limit, outage or random reclamation is accepted, remove it: it could make the next
/// calls fail on purpose (an injected 500, an outage's 503) or hang.
async fn clear_faults(http: &reqwest::Client, url: &str) {
    for path in ["/v1/faults", "/v1/spot/random"] {
        let resp = http.delete(format!("{url}{path}")).bearer_auth(ADMIN).send().await.unwrap();
        assert!(resp.status().is_success(), "DELETE {path}: {}", resp.status());
    }
}

#[test]
fn every_request_body_gets_an_answer_and_every_refusal_is_the_envelope() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let emu = rt.block_on(Emu::start());
    let url = emu.url();
    let http = reqwest::Client::builder().timeout(crate::common::HANG).build().unwrap();
    let doc: Value = rt.block_on(async { http.get(format!("{url}/openapi.json")).send().await?.json().await }).unwrap();
    let (table, lb, instance) = rt.block_on(async {
        let table = emu.admin.create_route_table(&CreateRouteTableRequest { name: "props".into() }).await.unwrap();
        let listener = Listener { protocol: Protocol::Tcp, port: 80, backend_port: 30080 };
        let lb = CreateLoadBalancerRequest { name: "props".into(), listeners: vec![listener], ..Default::default() };
        let lb = emu.admin.create_load_balancer(&lb, None).await.unwrap().id;
        (table.id, lb, emu.instance("props").await.id)
    });
    let hints = Hints { instance };

    let ops = operations_with_bodies(&doc);
    let names: Vec<String> = ops.iter().map(|(m, p, _)| format!("{m} {p}")).collect();
    for expected in [
        "POST /v1/instances",
        "POST /v1/route-tables",
        "POST /v1/route-tables/{id}/routes",
        "POST /v1/load-balancers",
        "PATCH /v1/load-balancers/{id}",
        "PUT /v1/quotas/{name}",
        "POST /v1/faults",
        "PUT /v1/rate-limits/{id}",
        "POST /v1/outages",
        "POST /v1/spot/reclaim",
        "PUT /v1/spot/random",
        "POST /v1/admin/snapshot",
    ] {
        assert!(names.iter().any(|n| n == expected), "{expected} is not among the operations with a body: {names:?}");
    }

    let accepted = AtomicU32::new(0);
    for (method, path, schema) in &ops {
        let target = fill(path, &table, &lb);
        let fault_api =
            ["/v1/faults", "/v1/rate-limits", "/v1/outages", "/v1/spot/random"].iter().any(|p| path.starts_with(p));
        let config = Config { cases: CASES_PER_OPERATION, failure_persistence: None, ..Config::default() };
        let mut runner = TestRunner::new_with_rng(
            config,
            proptest::test_runner::TestRng::deterministic_rng(proptest::test_runner::RngAlgorithm::ChaCha),
        );
        let result = runner.run(&body(&doc, schema, &hints), |body| {
            rt.block_on(async {
                let status = check(&http, &url, method, &target, body).await?;
                if (200..300).contains(&status) {
                    accepted.fetch_add(1, Ordering::Relaxed);
                    if fault_api {
                        clear_faults(&http, &url).await;
                    }
                }
                Ok(())
            })
        });
        match result {
            Ok(()) => {}
            Err(TestError::Fail(why, body)) => {
                panic!("{method} {path} with {}: {why}", String::from_utf8_lossy(&body))
            }
            Err(e) => panic!("{method} {path}: {e}"),
        }
    }
    // The generator is only useful if some bodies get all the way through the checks.
    let accepted = accepted.into_inner();
    assert!(accepted > 50, "only {accepted} bodies were accepted: the generated values miss the schemas");
    rt.block_on(async { emu.server.unwrap().shutdown().await });
}

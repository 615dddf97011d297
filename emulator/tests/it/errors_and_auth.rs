//! Every class of bad input gets its 4xx, its code and a message naming the field; auth roles hold.
#![allow(clippy::unwrap_used)]

use crate::common::{ADMIN, Emu, USER};
use fakecloud_api::{QuotaName, codes};
use reqwest::Method;

const JSON: &str = "application/json";

/// method, path, body (content type, text), expected status, expected code, a word the message must contain.
type Case<'a> = (Method, &'a str, Option<(&'a str, &'a str)>, u16, &'a str, &'a str);

#[tokio::test]
async fn bad_input_gets_a_clear_4xx() {
    let emu = Emu::start().await;
    let cases: &[Case<'_>] = &[
        (Method::POST, "/v1/instances", Some((JSON, "{\"name\":")), 400, codes::INVALID_JSON, "malformed JSON"),
        (Method::POST, "/v1/instances", Some((JSON, "\"hello\"")), 400, codes::INVALID_PARAMETER, "body"),
        (
            Method::POST,
            "/v1/instances",
            Some((JSON, r#"{"name":"a","colour":"red"}"#)),
            400,
            codes::INVALID_PARAMETER,
            "unknown field `colour`",
        ),
        (
            Method::POST,
            "/v1/instances",
            Some((JSON, r#"{"name":"a","market":"cheap"}"#)),
            400,
            codes::INVALID_PARAMETER,
            "market",
        ),
        (
            Method::POST,
            "/v1/instances",
            Some((JSON, r#"{"name":"a","private_ip":"10.0.0.999"}"#)),
            400,
            codes::INVALID_PARAMETER,
            "private_ip",
        ),
        (Method::POST, "/v1/instances", Some((JSON, r#"{"name":7}"#)), 400, codes::INVALID_PARAMETER, "name"),
        (
            Method::POST,
            "/v1/instances",
            Some(("text/plain", r#"{"name":"a"}"#)),
            415,
            codes::UNSUPPORTED_MEDIA_TYPE,
            "application/json",
        ),
        (Method::POST, "/v1/instances", None, 415, codes::UNSUPPORTED_MEDIA_TYPE, "application/json"),
        (
            Method::POST,
            "/v1/load-balancers",
            Some((JSON, r#"{"name":"a","listeners":[{"protocol":"TCP","port":70000,"backend_port":1}]}"#)),
            400,
            codes::INVALID_PARAMETER,
            "listeners[0].port",
        ),
        (
            Method::POST,
            "/v1/load-balancers",
            Some((JSON, r#"{"name":"a","listeners":[{"protocol":"SCTP","port":80,"backend_port":1}]}"#)),
            400,
            codes::INVALID_PARAMETER,
            "listeners[0].protocol",
        ),
        (
            Method::POST,
            "/v1/route-tables/main/routes",
            Some((JSON, r#"{"name":"r","destination":"nope","target_instance":"i-1"}"#)),
            400,
            codes::INVALID_CIDR,
            "destination",
        ),
        (Method::GET, "/v1/instances?page_size=0", None, 400, codes::INVALID_PARAMETER, "page_size"),
        (Method::GET, "/v1/instances?page_size=99999999999", None, 400, codes::INVALID_PARAMETER, "page_size"),
        (Method::GET, "/v1/instances?state=dancing", None, 400, codes::INVALID_PARAMETER, "state"),
        (Method::GET, "/v1/instances?colour=red", None, 400, codes::INVALID_PARAMETER, "colour"),
        (Method::GET, "/v1/instances?page_token=zzz", None, 400, codes::INVALID_PAGE_TOKEN, "page_token"),
        (Method::GET, "/v1/instances?tag=bad%20key", None, 400, codes::INVALID_PARAMETER, "tag"),
        (Method::GET, "/v1/instances/i-0", None, 404, codes::INSTANCE_NOT_FOUND, "i-0"),
        (Method::GET, "/v1/load-balancers/lb-0", None, 404, codes::LOAD_BALANCER_NOT_FOUND, "lb-0"),
        (Method::GET, "/v1/quotas/bananas", None, 404, codes::QUOTA_NOT_FOUND, "routes-per-route-table"),
        (Method::GET, "/v1/nothing-here", None, 404, codes::NOT_FOUND, "openapi"),
        (Method::DELETE, "/v1/instances", None, 405, codes::METHOD_NOT_ALLOWED, "DELETE"),
    ];
    for (method, path, body, status, code, needle) in cases {
        let (got, body_json) = emu.raw(method.clone(), path, Some(USER), *body).await;
        let err = &body_json["error"];
        assert_eq!((got, err["code"].as_str().unwrap_or("")), (*status, *code), "{method} {path}: {body_json}");
        let message = err["message"].as_str().unwrap();
        assert!(message.contains(needle), "{method} {path}: {needle:?} not in {message:?}");
        assert_eq!(err["request_id"].as_str().unwrap().len(), 32);
    }
}

#[tokio::test]
async fn tokens_and_roles() {
    let emu = Emu::start().await;
    let (s, b) = emu.raw(Method::GET, "/v1/instances", None, None).await;
    assert_eq!((s, b["error"]["code"].as_str().unwrap()), (401, codes::UNAUTHORIZED));
    let (s, _) = emu.raw(Method::GET, "/v1/instances", Some("wrong-token"), None).await;
    assert_eq!(s, 401);
    let (s, _) = emu.raw(Method::GET, "/v1/instances", Some(USER), None).await;
    assert_eq!(s, 200);
    let (s, _) = emu.raw(Method::GET, "/v1/instances", Some(ADMIN), None).await;
    assert_eq!(s, 200, "admin may do what a user may");
    // Admin-only calls.
    for (method, path, body) in [
        (Method::PUT, "/v1/quotas/instances", Some((JSON, r#"{"limit":5}"#))),
        (Method::GET, "/v1/audit", None),
        (Method::POST, "/v1/admin/reset", None),
        (Method::POST, "/v1/admin/snapshot", Some((JSON, r#"{"path":"/tmp/x"}"#))),
    ] {
        let (s, b) = emu.raw(method.clone(), path, Some(USER), body).await;
        assert_eq!((s, b["error"]["code"].as_str().unwrap()), (403, codes::FORBIDDEN), "{method} {path}");
    }
    assert_eq!(emu.user.get_quota(QuotaName::Instances).await.unwrap().limit, 1000, "users may read quotas");
    assert_eq!(emu.admin.set_quota(QuotaName::Instances, 5).await.unwrap().limit, 5);
    // Health, metrics and the spec need no token.
    for path in ["/healthz", "/metrics", "/openapi.json"] {
        assert_eq!(emu.raw(Method::GET, path, None, None).await.0, 200, "{path}");
    }
}

#[tokio::test]
async fn quota_values_are_validated() {
    let emu = Emu::start().await;
    let (s, b) = emu.raw(Method::PUT, "/v1/quotas/instances", Some(ADMIN), Some((JSON, r#"{"limit":-1}"#))).await;
    assert_eq!(s, 400);
    assert!(b["error"]["message"].as_str().unwrap().starts_with("limit:"), "{b}");
}

/// A body is exactly one JSON object: not an array (which serde would read as a struct's fields in order), not
/// a scalar, and nothing after the object. Checked in the one JSON extractor, so every operation with a body
/// gets it.
#[tokio::test]
async fn bodies_are_exactly_one_json_object() {
    let emu = Emu::start().await;
    let node = emu.instance("node-1").await;
    let route = format!(r#"{{"name":"r","destination":"10.244.0.0/24","target_instance":"{}"}}"#, node.id);
    let bodies: &[(Method, &str, &str)] = &[
        (Method::POST, "/v1/instances", r#"{"name":"node-2"}"#),
        (Method::POST, "/v1/route-tables", r#"{"name":"pods"}"#),
        (Method::POST, "/v1/route-tables/main/routes", &route),
        (Method::PUT, "/v1/quotas/instances", r#"{"limit":5}"#),
        (Method::PUT, "/v1/rate-limits/x", r#"{"capacity":5,"refill_per_second":1}"#),
    ];
    for (method, path, good) in bodies {
        for (body, code, needle) in [
            ("[7]".to_string(), codes::INVALID_PARAMETER, "body: must be a JSON object"),
            (r#"["x"]"#.to_string(), codes::INVALID_PARAMETER, "got an array"),
            ("7".to_string(), codes::INVALID_PARAMETER, "got a number"),
            ("null".to_string(), codes::INVALID_PARAMETER, "got null"),
            (format!("{good} garbage"), codes::INVALID_JSON, "trailing"),
            (format!("{good}{good}"), codes::INVALID_JSON, "trailing"),
            (format!("{good},"), codes::INVALID_JSON, "trailing"),
        ] {
            let (status, reply) = emu.raw(method.clone(), path, Some(ADMIN), Some((JSON, &body))).await;
            let err = &reply["error"];
            assert_eq!((status, err["code"].as_str().unwrap_or("")), (400, code), "{method} {path} {body}: {reply}");
            assert!(err["message"].as_str().unwrap().contains(needle), "{method} {path} {body}: {reply}");
        }
        let (status, reply) = emu.raw(method.clone(), path, Some(ADMIN), Some((JSON, &format!(" {good} \n")))).await;
        assert!(status < 300, "{method} {path}: whitespace around the object is fine: {reply}");
    }
    // Nothing was created by the refused bodies.
    assert_eq!(emu.user.list_route_tables().await.unwrap().items.len(), 2, "main and pods");
}

/// JSON has one kind of number, and JSON Schema's `integer` is any number without a fraction: `5.0` is 5
/// wherever an integer is expected (schemathesis sends such numbers); `5.5` is not.
#[tokio::test]
async fn integral_numbers_are_integers() {
    let emu = Emu::start().await;
    let (status, reply) =
        emu.raw(Method::PUT, "/v1/quotas/instances", Some(ADMIN), Some((JSON, r#"{"limit":5.0}"#))).await;
    assert_eq!((status, reply["limit"].as_u64()), (200, Some(5)), "{reply}");
    let (status, reply) =
        emu.raw(Method::PUT, "/v1/quotas/instances", Some(ADMIN), Some((JSON, r#"{"limit":4294967295e0}"#))).await;
    assert_eq!((status, reply["limit"].as_u64()), (200, Some(4_294_967_295)), "{reply}");
    let limit = r#"{"capacity":5.0,"refill_per_second":1,"status":503.0}"#;
    let (status, reply) = emu.raw(Method::PUT, "/v1/rate-limits/x", Some(ADMIN), Some((JSON, limit))).await;
    assert_eq!((status, reply["limit"]["status"].as_u64()), (200, Some(503)), "{reply}");
    for (body, needle) in [
        (r#"{"limit":5.5}"#, "limit: invalid type: floating point `5.5`"),
        (r#"{"limit":-1.0}"#, "limit: invalid value: integer `-1`"),
        (r#"{"limit":4294967296.0}"#, "limit: invalid value: integer `4294967296`"),
        (r#"{"limit":1e300}"#, "limit: invalid type: floating point"),
    ] {
        let (status, reply) = emu.raw(Method::PUT, "/v1/quotas/instances", Some(ADMIN), Some((JSON, body))).await;
        let err = &reply["error"];
        assert_eq!((status, err["code"].as_str()), (400, Some(codes::INVALID_PARAMETER)), "{body}: {reply}");
        assert!(err["message"].as_str().unwrap().contains(needle), "{body}: {reply}");
    }
}

/// What used to escape the envelope: a path ID that is not UTF-8, a method the ops endpoints do not have, a
/// body over the limit (and HEAD, which was refused instead of served).
#[tokio::test]
async fn every_answer_is_the_envelope_and_head_is_served() {
    let emu = Emu::start().await;
    let http = reqwest::Client::new();
    let call = |method: Method, path: &str| {
        http.request(method, format!("{}{path}", emu.url())).bearer_auth(USER).header("content-type", JSON)
    };
    let envelope = |resp: reqwest::Response| async move {
        let allow = resp.headers().get("allow").map(|v| v.to_str().unwrap().to_string());
        let status = resp.status().as_u16();
        let body: serde_json::Value = resp.json().await.expect("a JSON body");
        let code = body["error"]["code"].as_str().expect("the envelope").to_string();
        assert_eq!(body["error"]["request_id"].as_str().map(str::len), Some(32), "{body}");
        (status, code, allow)
    };

    let (status, code, _) = envelope(call(Method::GET, "/v1/instances/%FF%FE").send().await.unwrap()).await;
    assert_eq!((status, code.as_str()), (400, codes::INVALID_PARAMETER));
    for path in ["/healthz", "/metrics", "/openapi.json"] {
        for method in [Method::POST, Method::PUT, Method::DELETE, Method::PATCH] {
            let (status, code, allow) = envelope(call(method.clone(), path).send().await.unwrap()).await;
            assert_eq!(
                (status, code.as_str(), allow.as_deref()),
                (405, codes::METHOD_NOT_ALLOWED, Some("GET, HEAD")),
                "{method} {path}"
            );
        }
    }
    let (status, _, allow) = envelope(call(Method::DELETE, "/v1/instances").send().await.unwrap()).await;
    assert_eq!((status, allow.as_deref()), (405, Some("GET, HEAD, POST")));
    let big = format!(r#"{{"name":"{}"}}"#, "x".repeat(3 * 1024 * 1024));
    let (status, code, _) = envelope(call(Method::POST, "/v1/instances").body(big.clone()).send().await.unwrap()).await;
    assert_eq!((status, code.as_str()), (413, codes::PAYLOAD_TOO_LARGE));
    // Also when a fault rule that matches on zones has the gatekeeper read the body first.
    let by_zone = fakecloud_api::FaultMatch { zones: vec!["local-1c".into()], ..Default::default() };
    let action = fakecloud_api::FaultAction::Latency { ms: 1, jitter_ms: 0 };
    let rule = fakecloud_api::CreateFaultRuleRequest {
        id: None,
        matcher: by_zone,
        action,
        trigger: Default::default(),
        position: None,
    };
    emu.admin.add_fault(&rule).await.unwrap();
    let (status, code, _) = envelope(call(Method::POST, "/v1/instances").body(big).send().await.unwrap()).await;
    assert_eq!((status, code.as_str()), (413, codes::PAYLOAD_TOO_LARGE));
    emu.admin.clear_faults().await.unwrap();

    for (path, want) in
        [("/v1/instances", 200), ("/v1/instances/i-missing", 404), ("/healthz", 200), ("/v1/region", 200)]
    {
        let resp = call(Method::HEAD, path).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), want, "HEAD {path}");
        assert!(resp.bytes().await.unwrap().is_empty(), "HEAD {path} has no body");
    }
    let audit = emu
        .admin
        .audit(&fakecloud_api::AuditQuery { operation: Some("GetRegion".into()), ..Default::default() })
        .await
        .unwrap();
    assert_eq!((audit.items[0].method.as_str(), audit.items[0].status), ("HEAD", 200));
}

/// The auth scheme is case-insensitive and may be followed by more than one space (RFC 7235).
#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive() {
    let emu = Emu::start().await;
    for value in [format!("bearer {USER}"), format!("BEARER {USER}"), format!("Bearer   {USER}")] {
        let resp = reqwest::Client::new()
            .get(format!("{}/v1/instances", emu.url()))
            .header("authorization", &value)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{value}");
    }
    for value in [format!("Basic {USER}"), format!("Bearer{USER}"), USER.to_string()] {
        let resp = reqwest::Client::new()
            .get(format!("{}/v1/instances", emu.url()))
            .header("authorization", &value)
            .send()
            .await;
        assert_eq!(resp.unwrap().status().as_u16(), 401, "{value}");
    }
}

/// What a client sends is bounded before it is used, repeated or written down: an ID in the path far longer
/// than any this API hands out, and an idempotency key longer than the API takes, are refused with a message
/// that does not send them back whole — on every call, not only the creates that read the key.
#[tokio::test]
async fn long_ids_and_keys_are_refused_without_being_echoed() {
    let emu = Emu::start().await;
    // As long as a URL may make it (the http crate's limit is 64 KiB).
    let id = "i-".to_string() + &"a".repeat(60_000);
    let (status, body) = emu.raw(reqwest::Method::GET, &format!("/v1/instances/{id}"), Some(USER), None).await;
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.len() < 300 && message.contains("60002 characters"), "{}", &message[..message.len().min(300)]);
    let key = "k".repeat(60_000);
    for (method, path, body) in [
        (reqwest::Method::POST, "/v1/instances", r#"{"name":"a"}"#),
        (reqwest::Method::POST, "/v1/route-tables", r#"{"name":"rt"}"#),
        (reqwest::Method::GET, "/v1/instances", ""),
    ] {
        let mut req = reqwest::Client::new()
            .request(method.clone(), format!("{}{path}", emu.url()))
            .bearer_auth(USER)
            .header("Idempotency-Key", &key);
        if !body.is_empty() {
            req = req.header("content-type", "application/json").body(body);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 400, "{method} {path}");
        let text = resp.text().await.unwrap();
        assert!(
            text.len() < 400 && text.contains("Idempotency-Key"),
            "{method} {path}: {}",
            &text[..text.len().min(400)]
        );
    }
    // Nothing was made, and the audit log holds neither whole.
    assert!(emu.user.list_instances(&Default::default()).await.unwrap().items.is_empty());
    let audit = emu.admin.audit(&Default::default()).await.unwrap().items;
    assert!(audit.iter().all(|e| e.path.len() <= 1024 && e.resource_id.as_ref().is_none_or(|r| r.len() <= 128)));
}

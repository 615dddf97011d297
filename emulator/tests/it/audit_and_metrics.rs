//! The audit log records every call; metrics and the OpenAPI document describe the API.
#![allow(clippy::unwrap_used)]

use crate::common::{Emu, USER};
use fakecloud_api::{AuditQuery, CreateLoadBalancerRequest, Listener, Protocol};
use fakecloud_emulator::config::{Config, Timings};

#[tokio::test]
async fn every_call_is_audited_with_what_a_test_needs() {
    let emu = Emu::start().await;
    let node = emu.instance("node-1").await;
    emu.user.get_instance(&node.id).await.unwrap();
    let _ = emu.user.get_instance("i-missing").await;
    let _ = emu.raw(reqwest::Method::GET, "/v1/instances", None, None).await;
    emu.user.list_instances(&Default::default()).await.unwrap();
    let lb = CreateLoadBalancerRequest {
        name: "web".into(),
        listeners: vec![Listener { protocol: Protocol::Tcp, port: 80, backend_port: 1 }],
        ..Default::default()
    };
    let lb = emu.user.create_load_balancer(&lb, Some("k")).await.unwrap();

    let all = emu.admin.audit(&AuditQuery::default()).await.unwrap().items;
    let ops: Vec<(&str, u16)> = all.iter().map(|e| (e.operation.as_str(), e.status)).collect();
    assert_eq!(
        ops,
        [
            ("CreateInstance", 201),
            ("GetInstance", 200),
            ("GetInstance", 404),
            ("ListInstances", 401),
            ("ListInstances", 200),
            ("CreateLoadBalancer", 201)
        ]
    );
    assert_eq!(all[4].resource_id, None, "a listing is about no one resource");
    assert_eq!(all[0].resource_id.as_deref(), Some(node.id.as_str()));
    assert_eq!(
        (all[2].resource_id.as_deref(), all[2].error_code.as_deref()),
        (Some("i-missing"), Some("InstanceNotFound"))
    );
    assert_eq!((all[3].role.as_str(), all[0].role.as_str()), ("anonymous", "user"));
    assert!(all.windows(2).all(|w| w[0].seq < w[1].seq));

    let creates = emu
        .admin
        .audit(&AuditQuery { operation: Some("CreateLoadBalancer".into()), ..Default::default() })
        .await
        .unwrap()
        .items;
    assert_eq!(creates.len(), 1);
    assert_eq!(creates[0].resource_id.as_deref(), Some(lb.id.as_str()));
    let by_resource =
        emu.admin.audit(&AuditQuery { resource: Some(node.id.clone()), ..Default::default() }).await.unwrap().items;
    assert_eq!(by_resource.len(), 2);
    let errors = emu.admin.audit(&AuditQuery { status: Some(404), ..Default::default() }).await.unwrap().items;
    assert_eq!(errors.len(), 1);
    let after = emu.admin.audit(&AuditQuery { after: Some(all[4].seq), ..Default::default() }).await.unwrap().items;
    assert_eq!(after[0].operation, "CreateLoadBalancer");
    let future = emu
        .admin
        .audit(&AuditQuery { since: Some("2999-01-01T00:00:00Z".into()), ..Default::default() })
        .await
        .unwrap()
        .items;
    assert!(future.is_empty());
    let err = emu.admin.audit(&AuditQuery { since: Some("yesterday".into()), ..Default::default() }).await.unwrap_err();
    assert!(err.to_string().contains("since"));
}

#[tokio::test]
async fn the_audit_log_keeps_only_the_newest_entries() {
    let emu =
        Emu::with_config(Config { timings: Timings::instant(), audit_max_entries: 10, ..Config::default() }).await;
    for _ in 0..30 {
        emu.user.region().await.unwrap();
    }
    let audit = emu.admin.audit(&AuditQuery::default()).await.unwrap().items;
    assert!(audit.len() <= 10 + 1, "bounded to about 10, got {}", audit.len());
    assert!(audit.len() >= 10, "keeps the newest 10, got {}", audit.len());
}

#[tokio::test]
async fn metrics_count_calls_and_resources() {
    let emu = Emu::start().await;
    emu.instance("node-1").await;
    let _ = emu.user.get_instance("i-nope").await;
    let (status, body) = emu.raw(reqwest::Method::GET, "/metrics", None, None).await;
    assert_eq!(status, 200);
    let text = body.as_str().unwrap();
    assert!(text.contains(r#"fakecloud_requests_total{operation="CreateInstance",status="201"} 1"#), "{text}");
    assert!(text.contains(r#"fakecloud_requests_total{operation="GetInstance",status="404"} 1"#), "{text}");
    assert!(text.contains(r#"fakecloud_resources{kind="instance",state="running"} 1"#), "{text}");
    assert!(text.contains("fakecloud_request_duration_seconds_bucket"), "{text}");
}

#[tokio::test]
async fn the_openapi_document_lists_every_operation_with_its_role() {
    let emu = Emu::start().await;
    let (status, spec) = emu.raw(reqwest::Method::GET, "/openapi.json", Some(USER), None).await;
    assert_eq!(status, 200);
    let mut ops = Vec::new();
    for (_, item) in spec["paths"].as_object().unwrap() {
        for (_, op) in item.as_object().unwrap() {
            if let Some(id) = op.get("operationId") {
                ops.push(id.as_str().unwrap().to_string());
            }
        }
    }
    ops.sort();
    for expected in [
        "CreateInstance",
        "CreateLoadBalancer",
        "CreateRoute",
        "DeleteRoute",
        "ListAudit",
        "SetQuota",
        "Snapshot",
        "UpdateLoadBalancer",
    ] {
        assert!(ops.iter().any(|o| o == expected), "{expected} missing from {ops:?}");
    }
    assert_eq!(spec["paths"]["/v1/quotas/{name}"]["put"]["security"][0]["admin"], serde_json::json!([]));
    assert!(spec["components"]["schemas"]["CreateInstanceRequest"].is_object());
}

/// The document states every status an operation can answer (auth, the JSON extractor's, IDs in the path,
/// idempotent replays, faults) and the bounds the checks enforce, from the constants that enforce them.
#[tokio::test]
async fn the_openapi_document_states_responses_and_bounds_as_enforced() {
    use fakecloud_api::limits::*;
    use fakecloud_emulator::validate;

    let emu = Emu::start().await;
    let (_, spec) = emu.raw(reqwest::Method::GET, "/openapi.json", None, None).await;
    let mut ops = 0;
    for (path, item) in spec["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            ops += 1;
            let responses = op["responses"].as_object().unwrap();
            let has = |s: &str| responses.contains_key(s);
            let name = format!("{method} {path}");
            assert!(has("401") && has("503") && has("default"), "{name}: {:?}", responses.keys());
            if op["security"][0].get("admin").is_some() {
                assert!(has("403"), "{name}");
            }
            if path.contains('{') {
                assert!(has("404"), "{name}");
            }
            if op.get("requestBody").is_some() {
                assert!(has("400") && has("413") && has("415"), "{name}");
            }
            for (status, r) in responses {
                assert!(r["description"].is_string(), "{name} {status} has no description");
                assert!(r["headers"]["X-Request-Id"].is_object(), "{name} {status}");
            }
        }
    }
    assert!(ops > 30, "{ops} operations");
    let create_route = &spec["paths"]["/v1/route-tables/{id}/routes"]["post"]["responses"];
    for status in ["200", "201", "404", "409", "422"] {
        assert!(create_route[status].is_object(), "CreateRoute documents {status}");
    }
    assert!(create_route["200"]["headers"]["Idempotent-Replayed"].is_object(), "the replay's 200");
    assert!(spec["components"]["responses"]["MethodNotAllowed"]["headers"]["Allow"].is_object());

    let schemas = &spec["components"]["schemas"];
    let param = |path: &str, name: &str| {
        spec["paths"][path]["get"]["parameters"].as_array().unwrap().iter().find(|p| p["name"] == name).unwrap()
            ["schema"]
            .clone()
    };
    for path in ["/v1/instances", "/v1/load-balancers"] {
        let page_size = param(path, "page_size");
        assert_eq!((page_size["minimum"].as_u64(), page_size["maximum"].as_u64()), (Some(1), Some(1000)));
        assert_eq!(page_size["maximum"].as_u64(), Some(u64::from(PAGE_SIZE_MAX)));
    }
    let limit = param("/v1/audit", "limit");
    assert_eq!((limit["minimum"].as_u64(), limit["maximum"].as_u64()), (Some(1), Some(u64::from(AUDIT_LIMIT_MAX))));
    assert_eq!(schemas["CreateLoadBalancerRequest"]["properties"]["listeners"]["minItems"], 1);
    for quota in [&schemas["SetQuotaRequest"]["properties"]["limit"], &schemas["Quota"]["properties"]["limit"]] {
        assert_eq!((quota["maximum"].as_u64(), quota["format"].as_str()), (Some(4_294_967_295), Some("int64")));
    }
    let name_pattern = |schema: &str| schemas[schema]["properties"]["name"]["pattern"].as_str().map(str::to_string);
    assert_eq!(name_pattern("CreateInstanceRequest").as_deref(), validate::INSTANCE_NAME.pattern);
    assert_eq!(name_pattern("CreateRouteTableRequest").as_deref(), validate::NAME.pattern);
    assert_eq!(name_pattern("CreateLoadBalancerRequest").as_deref(), validate::NAME.pattern);
    let refill = &schemas["SetRateLimitRequest"]["properties"]["refill_per_second"];
    assert_eq!(refill["minimum"].as_f64(), Some(REFILL_PER_SECOND_MIN));
    let latency = schemas["FaultAction"]["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["properties"]["type"]["enum"][0] == "latency")
        .unwrap();
    assert_eq!(latency["properties"]["ms"]["maximum"].as_u64(), Some(LATENCY_MAX_MS));
    assert_eq!(
        schemas["CreateInstanceRequest"]["properties"]["zone"]["enum"],
        serde_json::json!(["local-1a", "local-1b", "local-1c", null])
    );

    // What schemathesis found the document leaving out.
    let trigger = &schemas["FaultTrigger"]["properties"];
    for count in [&trigger["skip"], &trigger["times"], &schemas["CreateFaultRuleRequest"]["properties"]["position"]] {
        assert_eq!((count["minimum"].as_u64(), count["maximum"].as_u64()), (Some(0), Some(FAULT_COUNT_MAX)), "{count}");
    }
    for time in [&trigger["from"], &trigger["until"], &param("/v1/audit", "since")] {
        assert_eq!(time["format"], "date-time", "{time}");
    }
    for variant in schemas["FaultAction"]["oneOf"].as_array().unwrap() {
        assert_eq!(variant["additionalProperties"], false, "serde refuses unknown fields: {variant}");
    }
    // A bound that replaces a whole schema keeps its type: `{"tags": {"k": {}}}` is not a string.
    assert_eq!(schemas["CreateInstanceRequest"]["properties"]["tags"]["additionalProperties"]["type"], "string");
    assert_eq!(schemas["FaultMatch"]["properties"]["tags"]["items"]["type"], "string");
    assert_eq!(param("/v1/instances", "state")["enum"].as_array().map(Vec::len), Some(6));
    assert_eq!(param("/v1/audit", "status")["maximum"].as_u64(), Some(u64::from(u16::MAX)));
}

/// Each open audit stream polls the log: a token may hold only a few at once, so a thousand cannot take the
/// database's readers from every other call. The one past the cap is refused (429, counted), and a stream that
/// ends gives its place back.
#[tokio::test]
async fn audit_streams_are_bounded_per_token() {
    let emu = Emu::start().await;
    let open = |seconds: u32| {
        reqwest::Client::new()
            .get(format!("{}/v1/audit/stream?max_seconds={seconds}", emu.url()))
            .bearer_auth(crate::common::ADMIN)
            .send()
    };
    let cap = fakecloud_api::limits::AUDIT_STREAMS_PER_TOKEN;
    let mut streams = Vec::new();
    for _ in 0..cap {
        let s = open(60).await.unwrap();
        assert_eq!(s.status(), 200);
        streams.push(s);
    }
    let refused = open(60).await.unwrap();
    assert_eq!(refused.status(), 429);
    assert!(refused.headers().contains_key("retry-after"));
    let body: fakecloud_api::ErrorBody = refused.json().await.unwrap();
    assert_eq!(body.error.code, fakecloud_api::codes::TOO_MANY_STREAMS, "{}", body.error.message);
    // The other calls are answered meanwhile.
    emu.user.list_instances(&Default::default()).await.unwrap();
    let metrics = reqwest::get(format!("{}/metrics", emu.url())).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("fakecloud_audit_streams_refused_total 1"), "{metrics}");
    // A stream closed by its client gives its place back.
    drop(streams.pop());
    crate::common::eventually(crate::common::HANG, "a place for a new stream", || async {
        let s = open(1).await.unwrap();
        (s.status() == 200).then_some(())
    })
    .await;
}

//! The audit log records every call; metrics and the OpenAPI document describe the API.
#![allow(clippy::unwrap_used)]

mod common;

use common::{Emu, USER};
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

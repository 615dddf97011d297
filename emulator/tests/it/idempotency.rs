//! Idempotency keys: a retried create returns the original and never makes a second resource.
#![allow(clippy::unwrap_used)]

use crate::common::Emu;
use fakecloud_api::{
    CreateInstanceRequest, CreateLoadBalancerRequest, CreateRouteRequest, ListInstancesQuery, Listener, Protocol, codes,
};

fn lb(name: &str) -> CreateLoadBalancerRequest {
    CreateLoadBalancerRequest {
        name: name.into(),
        listeners: vec![Listener { protocol: Protocol::Tcp, port: 80, backend_port: 30080 }],
        ..Default::default()
    }
}

#[tokio::test]
async fn a_retry_with_the_same_key_returns_the_original() {
    let emu = Emu::start().await;
    let a = emu.user.create_load_balancer(&lb("svc-a"), Some("uid-1")).await.unwrap();
    let b = emu.user.create_load_balancer(&lb("svc-a"), Some("uid-1")).await.unwrap();
    assert_eq!(a.id, b.id);
    assert_eq!(emu.user.list_all_load_balancers().await.unwrap().len(), 1);

    let req = CreateInstanceRequest { name: "n1".into(), ..Default::default() };
    let i1 = emu.user.create_instance(&req, Some("k-1")).await.unwrap();
    let i2 = emu.user.create_instance(&req, Some("k-1")).await.unwrap();
    assert_eq!(i1.id, i2.id);

    let route =
        CreateRouteRequest { name: "r".into(), destination: "10.244.0.0/24".into(), target_instance: i1.id.clone() };
    let r1 = emu.user.create_route("main", &route, Some("k-1")).await.unwrap();
    let r2 = emu.user.create_route("main", &route, Some("k-1")).await.unwrap();
    assert_eq!(r1.id, r2.id);

    // The replay is marked on the wire.
    let (status, _) = emu
        .raw(
            reqwest::Method::POST,
            "/v1/instances",
            Some(crate::common::USER),
            Some(("application/json", r#"{"name":"n1"}"#)),
        )
        .await;
    assert_eq!(status, 409, "without the key, the same name is a conflict");
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/instances", emu.url()))
        .bearer_auth(crate::common::USER)
        .header("Idempotency-Key", "k-1")
        .json(&req)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.headers().get("Idempotent-Replayed").unwrap(), "true");
}

#[tokio::test]
async fn the_same_key_with_another_request_is_a_conflict() {
    let emu = Emu::start().await;
    emu.user.create_load_balancer(&lb("svc-a"), Some("uid-1")).await.unwrap();
    let err = emu.user.create_load_balancer(&lb("svc-b"), Some("uid-1")).await.unwrap_err();
    assert_eq!((err.status(), err.code()), (Some(409), Some(codes::IDEMPOTENCY_KEY_REUSED)));
}

#[tokio::test]
async fn concurrent_retries_create_exactly_one() {
    let emu = Emu::start().await;
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let c = emu.user.clone();
            tokio::spawn(async move {
                c.create_instance(
                    &CreateInstanceRequest { name: "solo".into(), ..Default::default() },
                    Some("same-key"),
                )
                .await
                .unwrap()
                .id
            })
        })
        .collect();
    let mut ids = std::collections::HashSet::new();
    for t in tasks {
        ids.insert(t.await.unwrap());
    }
    assert_eq!(ids.len(), 1);
    assert_eq!(emu.user.list_all_instances(&ListInstancesQuery::default()).await.unwrap().len(), 1);
}

#[tokio::test]
async fn bad_keys_are_refused() {
    let emu = Emu::start().await;
    let long = "k".repeat(256);
    let err = emu.user.create_load_balancer(&lb("x"), Some(&long)).await.unwrap_err();
    assert_eq!((err.status(), err.code()), (Some(400), Some(codes::INVALID_PARAMETER)));
    assert!(err.to_string().contains("Idempotency-Key"));
}

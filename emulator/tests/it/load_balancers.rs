//! Load balancers: asynchronous provisioning, updates, deletion, addresses and their quotas.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use crate::common::{Emu, HANG, eventually};
use fakecloud_api::{
    CreateLoadBalancerRequest, HealthCheck, HealthCheckProtocol, Listener, LoadBalancerState, Protocol, QuotaName,
    Scheme, UpdateLoadBalancerRequest, codes,
};
use fakecloud_emulator::config::Timings;

fn lb(name: &str) -> CreateLoadBalancerRequest {
    CreateLoadBalancerRequest {
        name: name.into(),
        listeners: vec![Listener { protocol: Protocol::Tcp, port: 80, backend_port: 30080 }],
        ..Default::default()
    }
}

#[tokio::test]
async fn an_lb_has_no_address_until_it_is_active() {
    // Provisioning and deleting last only their delays: a look that came too late to tell (a busy machine) runs
    // the case again, on a fresh emulator, with both ten times longer.
    for scale in [1, 10, 100] {
        let t = Timings {
            lb_provision_delay: Duration::from_millis(400 * scale),
            lb_delete_delay: Duration::from_millis(300 * scale),
            ..Timings::instant()
        };
        let emu = Emu::with_timings(t.clone()).await;
        let node = emu.instance("node-1").await;
        let asked = Instant::now();
        let created = emu
            .user
            .create_load_balancer(&CreateLoadBalancerRequest { backends: vec![node.id.clone()], ..lb("web") }, None)
            .await
            .unwrap();
        let got = emu.user.get_load_balancer(&created.id).await.unwrap().address;
        if (created.state != LoadBalancerState::Provisioning || got.is_some())
            && asked.elapsed() >= t.lb_provision_delay
        {
            continue;
        }
        assert_eq!(created.state, LoadBalancerState::Provisioning);
        assert_eq!(created.ip_mode, fakecloud_api::IpMode::Vip, "no data plane: nothing proxies");
        assert_eq!((created.address, created.dns_name.as_deref()), (None, None));
        assert_eq!(got, None);

        let active = eventually(HANG, "the LB to be active", || async {
            let lb = emu.user.get_load_balancer(&created.id).await.unwrap();
            (lb.state == LoadBalancerState::Active).then_some(lb)
        })
        .await;
        let vip = active.address.unwrap();
        assert!(vip.to_string().starts_with("203.0.113."), "{vip}");
        assert!(active.dns_name.unwrap().ends_with(".local-1.lb.fakecloud.test"));
        assert_eq!(emu.user.find_load_balancer("web").await.unwrap().unwrap().id, created.id);

        // Changing a listener keeps the address.
        let update = UpdateLoadBalancerRequest {
            listeners: Some(vec![Listener { protocol: Protocol::Tcp, port: 8080, backend_port: 30080 }]),
            ..Default::default()
        };
        let updated = emu.user.update_load_balancer(&created.id, &update).await.unwrap();
        assert_eq!((updated.listeners[0].port, updated.address), (8080, Some(vip)));
        assert_eq!(updated.backends, vec![node.id]);

        let asked = Instant::now();
        let deleting = emu.user.delete_load_balancer(&created.id).await.unwrap();
        let err = emu.user.update_load_balancer(&created.id, &update).await.unwrap_err();
        let refused = err.code() == Some(codes::INCORRECT_LOAD_BALANCER_STATE);
        if (deleting.state != LoadBalancerState::Deleting || !refused) && asked.elapsed() >= t.lb_delete_delay {
            continue;
        }
        assert_eq!((deleting.state, deleting.address), (LoadBalancerState::Deleting, None));
        assert_eq!(err.code(), Some(codes::INCORRECT_LOAD_BALANCER_STATE));
        eventually(HANG, "the LB to be gone", || async { emu.user.get_load_balancer(&created.id).await.err() }).await;
        assert!(emu.user.find_load_balancer("web").await.unwrap().is_none());
        // Its address is free again.
        let again = emu
            .user
            .create_load_balancer(&CreateLoadBalancerRequest { requested_ip: Some(vip), ..lb("web2") }, None)
            .await
            .unwrap();
        assert_eq!(again.requested_ip, Some(vip));
        return;
    }
    panic!("never looked inside the provisioning and the deleting");
}

#[tokio::test]
async fn requested_and_internal_addresses() {
    let emu = Emu::start().await;
    let want = "203.0.113.77".parse().unwrap();
    let a = emu
        .user
        .create_load_balancer(&CreateLoadBalancerRequest { requested_ip: Some(want), ..lb("a") }, None)
        .await
        .unwrap();
    assert_eq!(a.address, Some(want));
    let err = emu
        .user
        .create_load_balancer(&CreateLoadBalancerRequest { requested_ip: Some(want), ..lb("b") }, None)
        .await
        .unwrap_err();
    assert_eq!((err.status(), err.code()), (Some(409), Some(codes::ADDRESS_IN_USE)));
    let outside = CreateLoadBalancerRequest { requested_ip: Some("198.51.100.1".parse().unwrap()), ..lb("c") };
    let err = emu.user.create_load_balancer(&outside, None).await.unwrap_err();
    assert_eq!((err.status(), err.code()), (Some(400), Some(codes::INVALID_ADDRESS)));
    assert!(err.to_string().contains("203.0.113.0/24"), "{err}");
    let internal = emu
        .user
        .create_load_balancer(&CreateLoadBalancerRequest { scheme: Scheme::Internal, ..lb("d") }, None)
        .await
        .unwrap();
    assert!(internal.address.unwrap().to_string().starts_with("10.0.192."), "internal LBs take VPC addresses");
}

#[tokio::test]
async fn lb_quotas_fail_with_their_own_codes() {
    let emu = Emu::start().await;
    emu.admin.set_quota(QuotaName::LoadBalancers, 2).await.unwrap();
    emu.user.create_load_balancer(&lb("a"), None).await.unwrap();
    emu.user
        .create_load_balancer(&CreateLoadBalancerRequest { scheme: Scheme::Internal, ..lb("b") }, None)
        .await
        .unwrap();
    let err = emu.user.create_load_balancer(&lb("c"), None).await.unwrap_err();
    assert_eq!((err.status(), err.code()), (Some(422), Some(codes::LOAD_BALANCER_LIMIT_EXCEEDED)));
    assert!(
        err.to_string().contains("load-balancers (limit 2)") && err.to_string().contains("fakecloud quota set"),
        "{err}"
    );
    emu.admin.set_quota(QuotaName::LoadBalancers, 10).await.unwrap();

    emu.admin.set_quota(QuotaName::PublicIps, 1).await.unwrap();
    let err = emu.user.create_load_balancer(&lb("c"), None).await.unwrap_err();
    assert_eq!(err.code(), Some(codes::ADDRESS_LIMIT_EXCEEDED));
    emu.user
        .create_load_balancer(&CreateLoadBalancerRequest { scheme: Scheme::Internal, ..lb("c") }, None)
        .await
        .unwrap();

    emu.admin.set_quota(QuotaName::ListenersPerLoadBalancer, 1).await.unwrap();
    let two = CreateLoadBalancerRequest {
        scheme: Scheme::Internal,
        listeners: vec![
            Listener { protocol: Protocol::Tcp, port: 80, backend_port: 1 },
            Listener { protocol: Protocol::Udp, port: 80, backend_port: 2 },
        ],
        ..lb("d")
    };
    assert_eq!(
        emu.user.create_load_balancer(&two, None).await.unwrap_err().code(),
        Some(codes::LISTENER_LIMIT_EXCEEDED)
    );

    emu.admin.set_quota(QuotaName::SourceRangesPerLoadBalancer, 1).await.unwrap();
    let ranges = CreateLoadBalancerRequest {
        scheme: Scheme::Internal,
        source_ranges: vec!["10.0.0.0/8".into(), "192.168.0.0/16".into()],
        ..lb("e")
    };
    assert_eq!(
        emu.user.create_load_balancer(&ranges, None).await.unwrap_err().code(),
        Some(codes::SOURCE_RANGE_LIMIT_EXCEEDED)
    );

    emu.admin.set_quota(QuotaName::BackendsPerLoadBalancer, 1).await.unwrap();
    let (n1, n2) = (emu.instance("n1").await, emu.instance("n2").await);
    let b = emu
        .user
        .create_load_balancer(
            &CreateLoadBalancerRequest { scheme: Scheme::Internal, backends: vec![n1.id.clone()], ..lb("f") },
            None,
        )
        .await
        .unwrap();
    let err = emu
        .user
        .update_load_balancer(
            &b.id,
            &UpdateLoadBalancerRequest { backends: Some(vec![n1.id, n2.id]), ..Default::default() },
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(codes::BACKEND_LIMIT_EXCEEDED));
}

#[tokio::test]
async fn lb_input_is_validated_field_by_field() {
    let emu = Emu::start().await;
    let cases: Vec<(CreateLoadBalancerRequest, &str, &str)> = vec![
        (CreateLoadBalancerRequest { listeners: vec![], ..lb("a") }, codes::INVALID_PARAMETER, "listeners"),
        (
            CreateLoadBalancerRequest {
                listeners: vec![Listener { protocol: Protocol::Tcp, port: 0, backend_port: 1 }],
                ..lb("a")
            },
            codes::INVALID_PARAMETER,
            "listeners[0].port",
        ),
        (
            CreateLoadBalancerRequest { backends: vec!["i-missing".into()], ..lb("a") },
            codes::INVALID_BACKEND,
            "backends[0]",
        ),
        (
            CreateLoadBalancerRequest { source_ranges: vec!["everywhere".into()], ..lb("a") },
            codes::INVALID_CIDR,
            "source_ranges[0]",
        ),
        (
            CreateLoadBalancerRequest {
                health_check: Some(HealthCheck {
                    protocol: HealthCheckProtocol::Http,
                    port: 10256,
                    path: None,
                    interval_seconds: 10,
                }),
                ..lb("a")
            },
            codes::INVALID_PARAMETER,
            "health_check.path",
        ),
        (CreateLoadBalancerRequest { name: "no spaces".into(), ..lb("a") }, codes::INVALID_PARAMETER, "name"),
    ];
    for (req, code, field) in cases {
        let err = emu.user.create_load_balancer(&req, None).await.unwrap_err();
        assert_eq!((err.status(), err.code()), (Some(400), Some(code)), "{err}");
        assert!(err.to_string().contains(field), "{field} not named in {err}");
    }
    emu.user.create_load_balancer(&lb("ok"), None).await.unwrap();
    let err = emu.user.create_load_balancer(&lb("ok"), None).await.unwrap_err();
    assert_eq!((err.status(), err.code()), (Some(409), Some(codes::LOAD_BALANCER_ALREADY_EXISTS)));
}

#[tokio::test]
async fn listing_pages_through_load_balancers() {
    let emu = Emu::start().await;
    for n in 0..7 {
        emu.user
            .create_load_balancer(
                &CreateLoadBalancerRequest { scheme: Scheme::Internal, ..lb(&format!("lb{n}")) },
                None,
            )
            .await
            .unwrap();
    }
    let first = emu
        .user
        .list_load_balancers(&fakecloud_api::ListLoadBalancersQuery { page_size: Some(5), ..Default::default() })
        .await
        .unwrap();
    assert_eq!(first.items.len(), 5);
    assert!(first.next_page_token.is_some());
    assert_eq!(emu.user.list_all_load_balancers().await.unwrap().len(), 7);
}

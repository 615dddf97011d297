//! Load balancers: asynchronous provisioning, updates, deletion, addresses and their quotas.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use crate::common::{Emu, HANG, eventually};
use fakecloud_api::{
    CreateLoadBalancerRequest, HealthCheck, HealthCheckProtocol, Listener, LoadBalancerState, Protocol, QuotaName,
    Scheme, SetLbProvisioningRequest, UpdateLoadBalancerRequest, codes,
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
    // ELB's code, which cloud providers match on; the message names the quota and its limit.
    assert_eq!((err.status(), err.code()), (Some(422), Some(codes::TOO_MANY_TARGETS)));
    let msg = err.to_string();
    assert!(msg.contains("backends-per-load-balancer") && msg.contains("limit 1"), "{msg}");
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
            codes::INVALID_TARGET,
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

fn backends(ids: &[&str]) -> UpdateLoadBalancerRequest {
    UpdateLoadBalancerRequest { backends: Some(ids.iter().map(|s| s.to_string()).collect()), ..Default::default() }
}

/// As ELB ("The following targets are not in a running state and cannot be registered", kubernetes#94966): a
/// backend registered by a create or newly added by an update must be a running instance; one registered while
/// it ran stays allowed once it stopped.
#[tokio::test]
async fn only_running_instances_can_be_registered_as_backends() {
    let emu = Emu::start().await;
    let (a, b, c) = (emu.instance("a").await, emu.instance("b").await, emu.instance("c").await);
    emu.user.stop_instance(&c.id).await.unwrap();
    let refused = |err: fakecloud_api::ClientError, index: usize, state: &str| {
        assert_eq!((err.status(), err.code()), (Some(400), Some(codes::INVALID_TARGET)), "{err}");
        let msg = err.to_string();
        assert!(msg.contains(&format!("backends[{index}]")) && msg.contains(&c.id) && msg.contains(state), "{msg}");
    };

    // On create, every backend must run.
    let req = CreateLoadBalancerRequest { backends: vec![a.id.clone(), c.id.clone()], ..lb("web") };
    refused(emu.user.create_load_balancer(&req, None).await.unwrap_err(), 1, "stopped");
    let web = emu
        .user
        .create_load_balancer(
            &CreateLoadBalancerRequest { backends: vec![a.id.clone(), b.id.clone()], ..lb("web") },
            None,
        )
        .await
        .unwrap();

    // On update, a newly added one must.
    refused(emu.user.update_load_balancer(&web.id, &backends(&[&a.id, &b.id, &c.id])).await.unwrap_err(), 2, "stopped");

    // One already registered whose instance stopped since stays, alongside a running newcomer; and it may be
    // dropped.
    emu.user.stop_instance(&b.id).await.unwrap();
    emu.user.start_instance(&c.id).await.unwrap();
    let kept = emu.user.update_load_balancer(&web.id, &backends(&[&a.id, &b.id, &c.id])).await.unwrap();
    assert_eq!(kept.backends, vec![a.id.clone(), b.id.clone(), c.id.clone()]);
    let dropped = emu.user.update_load_balancer(&web.id, &backends(&[&a.id, &c.id])).await.unwrap();
    assert_eq!(dropped.backends, vec![a.id.clone(), c.id.clone()]);
    // Once dropped, it is new again.
    let err = emu.user.update_load_balancer(&web.id, &backends(&[&a.id, &c.id, &b.id])).await.unwrap_err();
    assert_eq!(err.code(), Some(codes::INVALID_TARGET));
    assert!(err.to_string().contains(&format!("backends[2]: instance {} is stopped", b.id)), "{err}");

    // Missing and duplicate instances are refused the same way, naming the index.
    let err = emu.user.update_load_balancer(&web.id, &backends(&[&a.id, "i-missing"])).await.unwrap_err();
    assert_eq!(err.code(), Some(codes::INVALID_TARGET));
    assert!(err.to_string().contains("backends[1]: instance i-missing does not exist"), "{err}");
    let err = emu.user.update_load_balancer(&web.id, &backends(&[&a.id, &a.id])).await.unwrap_err();
    assert_eq!(err.code(), Some(codes::INVALID_TARGET));
    assert!(err.to_string().contains(&format!("backends[1]: {} is listed twice", a.id)), "{err}");
}

/// A booting (pending) instance is not running either.
#[tokio::test]
async fn a_pending_instance_cannot_be_registered() {
    let emu = Emu::with_timings(Timings { boot_delay: Duration::from_secs(3600), ..Timings::instant() }).await;
    let pending = emu.instance("pending").await;
    let req = CreateLoadBalancerRequest { backends: vec![pending.id.clone()], ..lb("web") };
    let err = emu.user.create_load_balancer(&req, None).await.unwrap_err();
    assert_eq!(err.code(), Some(codes::INVALID_TARGET));
    assert!(err.to_string().contains(&format!("backends[0]: instance {} is pending", pending.id)), "{err}");
    let web = emu.user.create_load_balancer(&lb("web"), None).await.unwrap();
    let err = emu.user.update_load_balancer(&web.id, &backends(&[&pending.id])).await.unwrap_err();
    assert_eq!(err.code(), Some(codes::INVALID_TARGET));
}

/// How long a load balancer stays provisioning is scriptable at run time, for every one and per name (which
/// wins), reset to the start flag's, and kept across a restart.
#[tokio::test]
async fn provisioning_time_is_scriptable_per_load_balancer_and_survives_a_restart() {
    let mut emu = Emu::start().await;
    let state = |lb: &fakecloud_api::LoadBalancer| lb.state;
    let shown = emu.admin.lb_provisioning().await.unwrap();
    assert_eq!((shown.default_seconds, shown.seconds, shown.load_balancers.len()), (0.0, None, 0));
    assert_eq!(state(&emu.user.create_load_balancer(&lb("a"), None).await.unwrap()), LoadBalancerState::Active);

    let hour = SetLbProvisioningRequest { seconds: 3600.0, load_balancer: None };
    emu.admin.set_lb_provisioning(&hour).await.unwrap();
    let quick = SetLbProvisioningRequest { seconds: 0.0, load_balancer: Some("quick".into()) };
    let shown = emu.admin.set_lb_provisioning(&quick).await.unwrap();
    assert_eq!((shown.seconds, shown.load_balancers.get("quick")), (Some(3600.0), Some(&0.0)));
    assert_eq!(state(&emu.user.create_load_balancer(&lb("b"), None).await.unwrap()), LoadBalancerState::Provisioning);
    assert_eq!(state(&emu.user.create_load_balancer(&lb("quick"), None).await.unwrap()), LoadBalancerState::Active);

    emu.restart().await;
    assert_eq!(emu.admin.lb_provisioning().await.unwrap(), shown);
    assert_eq!(state(&emu.user.create_load_balancer(&lb("c"), None).await.unwrap()), LoadBalancerState::Provisioning);

    // Reset one name, then everything.
    let after = emu.admin.reset_lb_provisioning(Some("quick")).await.unwrap();
    assert_eq!((after.seconds, after.load_balancers.len()), (Some(3600.0), 0));
    let after = emu.admin.reset_lb_provisioning(None).await.unwrap();
    assert_eq!((after.seconds, after.load_balancers.len()), (None, 0));
    assert_eq!(state(&emu.user.create_load_balancer(&lb("d"), None).await.unwrap()), LoadBalancerState::Active);

    // A user cannot script it.
    assert_eq!(emu.user.lb_provisioning().await.unwrap_err().status(), Some(403));
}

#[tokio::test]
async fn provisioning_settings_are_validated() {
    let emu = Emu::start().await;
    for (seconds, load_balancer, field) in
        [(-1.0, None, "seconds"), (1e9, None, "seconds"), (1.0, Some("no spaces".to_string()), "load_balancer")]
    {
        let err =
            emu.admin.set_lb_provisioning(&SetLbProvisioningRequest { seconds, load_balancer }).await.unwrap_err();
        assert_eq!((err.status(), err.code()), (Some(400), Some(codes::INVALID_PARAMETER)), "{err}");
        assert!(err.to_string().contains(field), "{err}");
    }
    let (status, body) = emu
        .raw(
            reqwest::Method::PUT,
            "/v1/load-balancer-provisioning",
            Some(crate::common::ADMIN),
            Some(("application/json", r#"{"seconds":"soon"}"#)),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(emu.admin.lb_provisioning().await.unwrap().seconds, None);
}

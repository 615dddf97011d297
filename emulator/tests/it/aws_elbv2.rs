//! Elastic Load Balancing v2 on the AWS face: network load balancers made, read, changed and deleted with signed
//! Query calls, as native load balancers (`fakecloud lb list` and the data plane see them), their target groups
//! and listeners mapped onto the native row, every refusal in ELB's words, and live TCP traffic.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::SystemTime;

use fakecloud_api::{Client, ListLoadBalancersQuery, LoadBalancer, LoadBalancerState, Protocol, QuotaName};
use fakecloud_emulator::auth::Tokens;
use fakecloud_emulator::aws::credentials::Keys;

use crate::aws::{all, code, signed_for};
use crate::aws_faults::{error, rule};
use crate::common::{Emu, HANG, USER, eventually};
use crate::dataplane;

/// A call to `service` at `url` in `region` with the user's key: status and body.
async fn call_at(service: &str, url: &str, region: &str, form: &str) -> (u16, String) {
    let keys = Keys::of(&Tokens { user: USER.into(), admin: String::new() });
    let signer = (keys.access_key_id.as_str(), keys.secret_access_key.as_str(), region, SystemTime::now());
    let resp = signed_for(service, url, signer, "POST", "", form).send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// An ELBv2 call (`Version` added).
async fn elb_at(url: &str, region: &str, form: &str) -> (u16, String) {
    call_at("elasticloadbalancing", url, region, &format!("{form}&Version=2015-12-01")).await
}

pub(crate) async fn elb(emu: &Emu, form: &str) -> (u16, String) {
    elb_at(&emu.url(), &emu.cfg.topology.region, form).await
}

/// A call that must succeed: its body.
async fn ok(emu: &Emu, form: &str) -> String {
    let (status, xml) = elb(emu, form).await;
    assert_eq!(status, 200, "{form}: {xml}");
    xml
}

/// A call that must be refused with `want`: nothing it names may have changed (each test checks).
async fn refused(emu: &Emu, form: &str, want: &str) {
    let (status, xml) = elb(emu, form).await;
    assert_eq!((status, code(&xml).as_str()), (400, want), "{form}: {xml}");
}

/// `%`-encoded for a form.
fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

fn one(xml: &str, name: &str) -> String {
    let found = all(xml, name);
    assert_eq!(found.len(), 1, "one <{name}> in {xml}");
    found[0].clone()
}

/// The subnets of the EC2 face, as cloud-provider-aws discovers them.
async fn subnets(emu: &Emu) -> Vec<String> {
    let (status, xml) = crate::aws::ec2(emu, USER, "Action=DescribeSubnets&Version=2016-11-15").await;
    assert_eq!(status, 200, "{xml}");
    all(&xml, "subnetId")
}

pub(crate) async fn create_nlb(emu: &Emu, name: &str) -> String {
    let subnet = &subnets(emu).await[0];
    let xml = ok(
        emu,
        &format!(
            "Action=CreateLoadBalancer&Name={name}&Type=network&SubnetMappings.member.1.SubnetId={subnet}\
             &Tags.member.1.Key=kubernetes.io%2Fservice-name&Tags.member.1.Value=default%2Fweb"
        ),
    )
    .await;
    one(&xml, "LoadBalancerArn")
}

async fn native(c: &Client, name: &str) -> Option<LoadBalancer> {
    let q = ListLoadBalancersQuery { name: Some(name.into()), ..Default::default() };
    c.list_load_balancers(&q).await.unwrap().items.into_iter().next()
}

async fn vpc(emu: &Emu) -> String {
    let (_, xml) = crate::aws::ec2(emu, USER, "Action=DescribeVpcs&Version=2016-11-15").await;
    one(&xml, "vpcId")
}

async fn create_group(emu: &Emu, name: &str, protocol: &str, port: u16) -> String {
    let vpc = vpc(emu).await;
    let xml = ok(
        emu,
        &format!(
            "Action=CreateTargetGroup&Name={name}&Protocol={protocol}&Port={port}&VpcId={vpc}&TargetType=instance\
             &HealthCheckProtocol=TCP&HealthCheckPort=traffic-port&HealthCheckIntervalSeconds=10\
             &HealthyThresholdCount=3&UnhealthyThresholdCount=3"
        ),
    )
    .await;
    one(&xml, "TargetGroupArn")
}

#[tokio::test]
async fn an_nlb_is_a_native_load_balancer_made_described_and_deleted() {
    let emu = Emu::start().await;
    let account = Keys::of(&Tokens { user: USER.into(), admin: String::new() }).account_id;
    let arn = create_nlb(&emu, "web").await;
    let prefix = format!("arn:aws:elasticloadbalancing:local-1:{account}:loadbalancer/net/web/");
    assert!(arn.starts_with(&prefix) && arn.len() == prefix.len() + 16, "{arn}");
    // The native API sees it: no listeners yet, as an NLB starts.
    let lb = native(&emu.user, "web").await.unwrap();
    assert!(lb.listeners.is_empty() && lb.backends.is_empty(), "{lb:?}");

    let xml = ok(&emu, "Action=DescribeLoadBalancers&Names.member.1=web").await;
    assert_eq!(one(&xml, "LoadBalancerArn"), arn);
    assert_eq!(one(&xml, "Type"), "network");
    assert_eq!(one(&xml, "Code"), "active");
    assert_eq!(one(&xml, "VpcId"), vpc(&emu).await);
    let dns = lb.dns_name.clone().unwrap();
    assert_eq!(one(&xml, "DNSName"), dns);
    // AWS's form for an NLB's name, which cloud-provider-aws tells from a classic ELB's.
    assert!(dns.starts_with("web-") && dns.ends_with(".elb.local-1.amazonaws.com"), "{dns}");
    assert_eq!(one(&xml, "SubnetId"), subnets(&emu).await[0]);
    let xml = ok(&emu, &format!("Action=DescribeLoadBalancers&LoadBalancerArns.member.1={}", enc(&arn))).await;
    assert_eq!(one(&xml, "LoadBalancerName"), "web");
    let xml = ok(&emu, &format!("Action=DescribeTags&ResourceArns.member.1={}", enc(&arn))).await;
    assert_eq!((one(&xml, "Key"), one(&xml, "Value")), ("kubernetes.io/service-name".into(), "default/web".into()));

    // Refusals change nothing.
    let subnet = &subnets(&emu).await[0];
    for (form, want) in [
        (
            format!("Action=CreateLoadBalancer&Name=alb&Type=application&Subnets.member.1={subnet}"),
            "InvalidConfigurationRequest",
        ),
        (format!("Action=CreateLoadBalancer&Name=alb&Subnets.member.1={subnet}"), "InvalidConfigurationRequest"),
        (
            format!("Action=CreateLoadBalancer&Name=web&Type=network&Subnets.member.1={subnet}"),
            "DuplicateLoadBalancerName",
        ),
        ("Action=CreateLoadBalancer&Name=nosub&Type=network&Subnets.member.1=subnet-0000".into(), "SubnetNotFound"),
        (
            format!(
                "Action=CreateLoadBalancer&Name=x&Type=network&Subnets.member.1={subnet}&Tags.member.1.Key=a&Tags.member.2.Key=a"
            ),
            "DuplicateTagKeys",
        ),
        (
            format!(
                "Action=CreateLoadBalancer&Name=x&Type=network&Subnets.member.1={subnet}&SecurityGroups.member.1=nope"
            ),
            "InvalidSecurityGroup",
        ),
    ] {
        refused(&emu, &form, want).await;
    }
    let many = (1..=51).map(|i| format!("&Tags.member.{i}.Key=k{i}")).collect::<String>();
    refused(
        &emu,
        &format!("Action=CreateLoadBalancer&Name=x&Type=network&Subnets.member.1={subnet}{many}"),
        "TooManyTags",
    )
    .await;
    assert_eq!(emu.user.list_load_balancers(&Default::default()).await.unwrap().items.len(), 1);
    refused(&emu, "Action=DescribeLoadBalancers&Names.member.1=nope", "LoadBalancerNotFound").await;

    // A load balancer the native API made is not an NLB.
    let req = fakecloud_api::CreateLoadBalancerRequest {
        name: "native".into(),
        listeners: vec![fakecloud_api::Listener { protocol: Protocol::Tcp, port: 80, backend_port: 8080 }],
        ..Default::default()
    };
    emu.user.create_load_balancer(&req, None).await.unwrap();
    let xml = ok(&emu, "Action=DescribeLoadBalancers").await;
    assert_eq!(all(&xml, "LoadBalancerName"), ["web"]);
    // And classic ELB, whose model the native one is, lists it but not the NLB.
    let classic = "Action=DescribeLoadBalancers&Version=2012-06-01";
    let (status, xml) = call_at("elasticloadbalancing", &emu.url(), &emu.cfg.topology.region, classic).await;
    assert_eq!((status, all(&xml, "LoadBalancerName")), (200, vec!["native".to_string()]), "{xml}");

    // Attributes: the CCM's cross-zone and access-log reconciliation; deletion protection takes effect.
    let xml = ok(&emu, &format!("Action=DescribeLoadBalancerAttributes&LoadBalancerArn={}", enc(&arn))).await;
    assert!(xml.contains("<Key>load_balancing.cross_zone.enabled</Key><Value>false</Value>"), "{xml}");
    let set = |k: &str, v: &str| {
        format!(
            "Action=ModifyLoadBalancerAttributes&LoadBalancerArn={}&Attributes.member.1.Key={k}&Attributes.member.1.Value={v}",
            enc(&arn)
        )
    };
    let xml = ok(&emu, &set("load_balancing.cross_zone.enabled", "true")).await;
    assert!(xml.contains("<Key>load_balancing.cross_zone.enabled</Key><Value>true</Value>"), "{xml}");
    refused(&emu, &set("idle_timeout.timeout_seconds", "60"), "InvalidConfigurationRequest").await;
    refused(&emu, &set("access_logs.s3.enabled", "true"), "InvalidConfigurationRequest").await;
    ok(&emu, &set("deletion_protection.enabled", "true")).await;
    refused(&emu, &format!("Action=DeleteLoadBalancer&LoadBalancerArn={}", enc(&arn)), "OperationNotPermitted").await;
    assert!(native(&emu.user, "web").await.is_some());
    ok(&emu, &set("deletion_protection.enabled", "false")).await;

    // Deleted through the native delete; deleting again is done already, as ELB answers.
    ok(&emu, &format!("Action=DeleteLoadBalancer&LoadBalancerArn={}", enc(&arn))).await;
    assert!(native(&emu.user, "web").await.is_none());
    ok(&emu, &format!("Action=DeleteLoadBalancer&LoadBalancerArn={}", enc(&arn))).await;
    refused(&emu, "Action=DescribeLoadBalancers&Names.member.1=web", "LoadBalancerNotFound").await;
    refused(&emu, "Action=DescribeLoadBalancers&LoadBalancerArns.member.1=web", "ValidationError").await;
}

#[tokio::test]
async fn listeners_and_target_groups_make_the_native_listeners_backends_and_health_check() {
    let emu = Emu::start().await;
    let a = emu.instance("node-a").await.id;
    let b = emu.instance("node-b").await.id;
    let lb = create_nlb(&emu, "svc").await;
    let tcp = create_group(&emu, "tg-http", "TCP", 30080).await;
    let dns = create_group(&emu, "tg-dns", "TCP_UDP", 30053).await;
    let vpc = vpc(&emu).await;
    refused(
        &emu,
        &format!("Action=CreateTargetGroup&Name=tg-http&Protocol=TCP&Port=1&VpcId={vpc}"),
        "DuplicateTargetGroupName",
    )
    .await;
    refused(
        &emu,
        &format!("Action=CreateTargetGroup&Name=alb&Protocol=HTTP&Port=1&VpcId={vpc}"),
        "InvalidConfigurationRequest",
    )
    .await;
    refused(
        &emu,
        &format!("Action=CreateTargetGroup&Name=h&Protocol=TCP&Port=1&VpcId={vpc}&HealthCheckProtocol=HTTPS"),
        "InvalidConfigurationRequest",
    )
    .await;
    refused(&emu, "Action=CreateTargetGroup&Name=v&Protocol=TCP&Port=1&VpcId=vpc-0", "ValidationError").await;

    let register = |tg: &str, ids: &[&str]| {
        let targets: String =
            ids.iter().enumerate().map(|(i, id)| format!("&Targets.member.{}.Id={id}", i + 1)).collect();
        format!("Action=RegisterTargets&TargetGroupArn={}{targets}", enc(tg))
    };
    ok(&emu, &register(&tcp, &[&a, &b])).await;
    ok(&emu, &register(&dns, &[&a])).await;
    refused(&emu, &register(&tcp, &["i-00000000000000000"]), "InvalidTarget").await;
    refused(&emu, &format!("{}&Targets.member.1.Port=9", register(&tcp, &[&a])), "InvalidConfigurationRequest").await;

    // A group no listener uses has no native effect, and its targets are unused.
    let health = |tg: &str| format!("Action=DescribeTargetHealth&TargetGroupArn={}", enc(tg));
    let xml = ok(&emu, &health(&tcp)).await;
    assert_eq!(all(&xml, "State"), ["unused", "unused"], "{xml}");
    assert_eq!(all(&xml, "Reason"), ["Target.NotInUse", "Target.NotInUse"]);
    assert!(native(&emu.user, "svc").await.unwrap().listeners.is_empty());

    let listen = |protocol: &str, port: u16, tg: &str| {
        format!(
            "Action=CreateListener&LoadBalancerArn={}&Protocol={protocol}&Port={port}\
             &DefaultActions.member.1.Type=forward&DefaultActions.member.1.TargetGroupArn={}\
             &Tags.member.1.Key=owner&Tags.member.1.Value=ccm",
            enc(&lb),
            enc(tg)
        )
    };
    let xml = ok(&emu, &listen("TCP", 80, &tcp)).await;
    let listener = one(&xml, "ListenerArn");
    assert!(listener.contains(":listener/net/svc/"), "{listener}");
    let n = native(&emu.user, "svc").await.unwrap();
    assert_eq!(n.listeners, [fakecloud_api::Listener { protocol: Protocol::Tcp, port: 80, backend_port: 30080 }]);
    assert_eq!(n.backends, [a.clone(), b.clone()]);
    let hc = n.health_check.unwrap();
    assert_eq!((hc.port, hc.interval_seconds), (30080, 10), "traffic-port is the group's port");

    // A second listener whose group holds only `a`: no listener forwards to an instance its group lacks.
    ok(&emu, &listen("TCP_UDP", 53, &dns)).await;
    let n = native(&emu.user, "svc").await.unwrap();
    let mut ports: Vec<(Protocol, u16, u16)> =
        n.listeners.iter().map(|l| (l.protocol, l.port, l.backend_port)).collect();
    ports.sort();
    assert_eq!(ports, [(Protocol::Tcp, 53, 30053), (Protocol::Tcp, 80, 30080), (Protocol::Udp, 53, 30053)]);
    assert_eq!(n.backends, std::slice::from_ref(&a));
    let xml = ok(&emu, &health(&tcp)).await;
    assert!(all(&xml, "Reason").contains(&"Elb.RegistrationInProgress".to_string()), "{xml}");
    ok(&emu, &register(&dns, &[&b])).await;
    assert_eq!(native(&emu.user, "svc").await.unwrap().backends, [a.clone(), b.clone()]);

    // Listener refusals: nothing changes.
    refused(&emu, &listen("TCP", 80, &tcp), "DuplicateListener").await;
    refused(&emu, &listen("UDP", 81, &tcp), "IncompatibleProtocols").await;
    refused(&emu, &listen("TLS", 443, &tcp), "CertificateNotFound").await;
    refused(&emu, &format!("Action=DeleteTargetGroup&TargetGroupArn={}", enc(&tcp)), "ResourceInUse").await;
    emu.admin.set_quota(QuotaName::ListenersPerLoadBalancer, 3).await.unwrap();
    refused(&emu, &listen("TCP", 8080, &tcp), "TooManyListeners").await;
    emu.admin.set_quota(QuotaName::BackendsPerLoadBalancer, 1).await.unwrap();
    let c = emu.instance("node-c").await.id;
    refused(&emu, &register(&tcp, &[&c]), "TooManyTargets").await;
    assert_eq!(native(&emu.user, "svc").await.unwrap().listeners.len(), 3);
    let xml = ok(&emu, &format!("Action=DescribeTargetGroups&TargetGroupArns.member.1={}", enc(&tcp))).await;
    assert_eq!(one(&xml, "LoadBalancerArns").replace("<member>", "").replace("</member>", ""), lb);

    let xml = ok(&emu, &format!("Action=DescribeListeners&LoadBalancerArn={}", enc(&lb))).await;
    assert_eq!(all(&xml, "Port"), ["53", "80"]);
    let xml = ok(&emu, &format!("Action=DescribeTags&ResourceArns.member.1={}", enc(&listener))).await;
    assert_eq!(one(&xml, "Value"), "ccm");

    // Deregistered: draining (the default delay, 300 s), and no longer a backend.
    ok(&emu, &register(&tcp, &[&b]).replace("RegisterTargets", "DeregisterTargets")).await;
    let xml = ok(&emu, &health(&tcp)).await;
    assert!(xml.contains("<State>draining</State><Reason>Target.DeregistrationInProgress</Reason>"), "{xml}");
    assert_eq!(native(&emu.user, "svc").await.unwrap().backends, std::slice::from_ref(&a));

    // The health check changed, and a listener moved to another group, as the CCM recreates one.
    // The native check is the first listener's (port 53) group's.
    ok(&emu, &format!("Action=ModifyTargetGroup&TargetGroupArn={}&HealthCheckProtocol=HTTP&HealthCheckPath=%2Fhealthz&HealthCheckPort=10256", enc(&dns))).await;
    let hc = native(&emu.user, "svc").await.unwrap().health_check.unwrap();
    assert_eq!((hc.port, hc.path.as_deref()), (10256, Some("/healthz")));
    let moved = create_group(&emu, "tg-http-2", "TCP", 30081).await;
    ok(&emu, &register(&moved, &[&a])).await;
    ok(&emu, &format!("Action=ModifyListener&ListenerArn={}&DefaultActions.member.1.Type=forward&DefaultActions.member.1.TargetGroupArn={}", enc(&listener), enc(&moved))).await;
    ok(&emu, &format!("Action=DeleteTargetGroup&TargetGroupArn={}", enc(&tcp))).await;
    assert!(native(&emu.user, "svc").await.unwrap().listeners.iter().any(|l| l.port == 80 && l.backend_port == 30081));

    // Tags on a group: added, limited, removed.
    let tag = |k: &str| {
        format!("Action=AddTags&ResourceArns.member.1={}&Tags.member.1.Key={k}&Tags.member.1.Value=v", enc(&moved))
    };
    ok(&emu, &tag("team")).await;
    for i in 0..49 {
        ok(&emu, &tag(&format!("k{i}"))).await;
    }
    refused(&emu, &tag("one-too-many"), "TooManyTags").await;
    ok(&emu, &format!("Action=RemoveTags&ResourceArns.member.1={}&TagKeys.member.1=team", enc(&moved))).await;
    let xml = ok(&emu, &format!("Action=DescribeTags&ResourceArns.member.1={}", enc(&moved))).await;
    assert_eq!(all(&xml, "Key").len(), 49);

    // The last listener gone: the native row has none, and the load balancer's delete frees its groups.
    let xml = ok(&emu, &format!("Action=DescribeListeners&LoadBalancerArn={}", enc(&lb))).await;
    for l in all(&xml, "ListenerArn") {
        ok(&emu, &format!("Action=DeleteListener&ListenerArn={}", enc(&l))).await;
    }
    assert!(native(&emu.user, "svc").await.unwrap().listeners.is_empty());
    ok(&emu, &listen("TCP", 80, &moved)).await;
    ok(&emu, &format!("Action=DeleteLoadBalancer&LoadBalancerArn={}", enc(&lb))).await;
    ok(&emu, &format!("Action=DeleteTargetGroup&TargetGroupArn={}", enc(&moved))).await;
    refused(
        &emu,
        &format!("Action=DescribeTargetGroups&TargetGroupArns.member.1={}", enc(&moved)),
        "TargetGroupNotFound",
    )
    .await;
}

#[tokio::test]
async fn faults_refuse_elbv2_calls_in_elbs_words() {
    let emu = Emu::start().await;
    let rule = |op: &str, status: u16, code: &str| rule(op, error(status, code), Some(1));
    // A rule on the native operation holds the action that stands for it: throttling is ELB's `Throttling`.
    emu.admin.add_fault(&rule("ListLoadBalancers", 429, "TooManyRequests")).await.unwrap();
    refused(&emu, "Action=DescribeLoadBalancers", "Throttling").await;
    ok(&emu, "Action=DescribeLoadBalancers").await;
    emu.admin.add_fault(&rule("CreateLoadBalancer", 503, "ServiceUnavailable")).await.unwrap();
    let subnet = &subnets(&emu).await[0];
    let (status, xml) =
        elb(&emu, &format!("Action=CreateLoadBalancer&Name=x&Type=network&Subnets.member.1={subnet}")).await;
    assert_eq!((status, code(&xml).as_str()), (503, "ServiceUnavailable"), "{xml}");
    assert!(xml.contains("<ErrorResponse><Error><Type>Receiver</Type>"), "{xml}");
    assert!(native(&emu.user, "x").await.is_none(), "a refused create makes nothing");
}

/// An NLB made through the face carries real TCP traffic from its listener to an instance's port through its
/// target group, and DescribeTargetHealth reads the data plane's checks.
#[tokio::test]
async fn an_nlb_forwards_tcp_from_its_listener_to_its_targets_and_reports_their_health() {
    let dir = tempfile::tempdir().unwrap();
    let (_child, c, _log) = dataplane::emulator(&dir.path().join("fc.db"), 40).await;
    let url = c.endpoint().to_string();
    let call = async |form: String| {
        let (status, xml) = elb_at(&url, "local-1", &form).await;
        assert_eq!(status, 200, "{form}: {xml}");
        xml
    };
    let bs = dataplane::backends(&c, 40, &["b1"]).await;
    let subnets =
        all(&call_at("ec2", &url, "local-1", "Action=DescribeSubnets&Version=2016-11-15").await.1, "subnetId");
    let vpc = one(&call_at("ec2", &url, "local-1", "Action=DescribeVpcs&Version=2016-11-15").await.1, "vpcId");
    let lb = one(
        &call(format!("Action=CreateLoadBalancer&Name=live&Type=network&Subnets.member.1={}", subnets[0])).await,
        "LoadBalancerArn",
    );
    let tg = one(
        &call(format!(
            "Action=CreateTargetGroup&Name=live-tg&Protocol=TCP&Port={}&VpcId={vpc}&HealthCheckIntervalSeconds=5",
            bs.port
        ))
        .await,
        "TargetGroupArn",
    );
    call(format!("Action=RegisterTargets&TargetGroupArn={}&Targets.member.1.Id={}", enc(&tg), bs.instances[0])).await;
    call(format!(
        "Action=CreateListener&LoadBalancerArn={}&Protocol=TCP&Port=18040&DefaultActions.member.1.Type=forward\
         &DefaultActions.member.1.TargetGroupArn={}",
        enc(&lb),
        enc(&tg)
    ))
    .await;
    let vip = eventually(HANG, "the NLB to be active", || async {
        let n = native(&c, "live").await?;
        (n.state == LoadBalancerState::Active).then_some(n.address?)
    })
    .await;
    dataplane::answers(SocketAddr::new(vip, 18040), &["b1"]).await;
    eventually(HANG, "the target to be healthy", || async {
        let xml = call(format!("Action=DescribeTargetHealth&TargetGroupArn={}", enc(&tg))).await;
        (all(&xml, "State") == ["healthy"]).then_some(())
    })
    .await;
    // The target's server goes away: the data plane's checks fail, and so does the target's health.
    drop(bs);
    eventually(HANG, "the target to be unhealthy", || async {
        let xml = call(format!("Action=DescribeTargetHealth&TargetGroupArn={}", enc(&tg))).await;
        (all(&xml, "State") == ["unhealthy"] && xml.contains("Target.FailedHealthChecks")).then_some(())
    })
    .await;
    assert!(dataplane::hello(SocketAddr::new(vip, 18040)).await.is_none());
}

//! Classic Elastic Load Balancing on the AWS face (issue #50): calls signed for `elasticloadbalancing` with
//! Version 2012-06-01, as cloud-provider-aws makes them, answered from the native load balancers' table; every
//! refusal in ELB's words with nothing written; faults refusing as ELB throttles; and a load balancer made here
//! carrying real TCP traffic through the data plane, its instances' health read from the data plane's checks.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use fakecloud_api::{
    AuditQuery, Client, CreateFaultRuleRequest, CreateInstanceRequest, CreateLoadBalancerRequest, FaultAction,
    FaultMatch, FaultTrigger, HealthCheckProtocol, LoadBalancerState, Protocol, QuotaName, RateLimitPreset, Scheme,
};
use fakecloud_emulator::auth::Tokens;
use fakecloud_emulator::aws::credentials::Keys;

use crate::aws::{all, code, ec2, signed_for};
use crate::common::{Emu, USER, eventually, spawn_emulator_with};
use crate::dataplane;

const V: &str = "Version=2012-06-01";

/// An ELB call to the emulator at `url` with the key of the cloud whose user token is `user`, in `region`.
async fn call_at(url: &str, region: &str, form: &str) -> (u16, String) {
    let keys = Keys::of(&Tokens { user: USER.into(), admin: String::new() });
    let signer = (keys.access_key_id.as_str(), keys.secret_access_key.as_str(), region, SystemTime::now());
    let resp = signed_for("elasticloadbalancing", url, signer, "POST", "", form).send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// A security group made through EC2, as the CCM makes one for a Service: its ID.
async fn group(emu: &Emu, name: &str) -> String {
    let form = format!("Action=CreateSecurityGroup&Version=2016-11-15&GroupName={name}&GroupDescription=for+{name}");
    let (status, xml) = ec2(emu, USER, &form).await;
    assert_eq!(status, 200, "{xml}");
    all(&xml, "groupId").remove(0)
}

pub(crate) async fn call(emu: &Emu, form: &str) -> (u16, String) {
    call_at(&emu.url(), &emu.cfg.topology.region, &format!("{V}&{form}")).await
}

/// A call that must succeed: its answer.
async fn ok(emu: &Emu, form: &str) -> String {
    let (status, xml) = call(emu, form).await;
    assert_eq!(status, 200, "{form}: {xml}");
    xml
}

/// A call that must be refused: its status and code.
async fn refused(emu: &Emu, form: &str) -> (u16, String) {
    let (status, xml) = call(emu, form).await;
    assert!(xml.contains("<ErrorResponse>") && xml.contains("<Type>"), "{form}: {xml}");
    (status, code(&xml))
}

/// Each zone's subnet, in the zones' order, as EC2's DescribeSubnets gives them (cloud-provider-aws finds them
/// there).
pub(crate) async fn subnets(emu: &Emu) -> Vec<String> {
    let (_, xml) = crate::aws::ec2(emu, USER, "Action=DescribeSubnets&Version=2016-11-15").await;
    let by_zone: Vec<(String, String)> = all(&xml, "availabilityZone").into_iter().zip(all(&xml, "subnetId")).collect();
    emu.cfg.topology.zones.iter().map(|(z, _)| by_zone.iter().find(|(bz, _)| bz == z).unwrap().1.clone()).collect()
}

/// CreateLoadBalancer's form for `name` with a TCP listener `port` → `instance_port` in `subnet`.
pub(crate) fn create_form(subnet: &str, name: &str, port: u16, instance_port: u16) -> String {
    format!(
        "Action=CreateLoadBalancer&LoadBalancerName={name}&Listeners.member.1.Protocol=TCP\
         &Listeners.member.1.LoadBalancerPort={port}&Listeners.member.1.InstanceProtocol=TCP\
         &Listeners.member.1.InstancePort={instance_port}&Subnets.member.1={subnet}"
    )
}

async fn native_count(c: &Client) -> usize {
    c.list_all_load_balancers().await.unwrap().len()
}

async fn instance(c: &Client, name: &str) -> String {
    c.create_instance(&CreateInstanceRequest { name: name.into(), ..Default::default() }, None).await.unwrap().id
}

#[tokio::test]
async fn a_classic_load_balancer_is_a_native_row_there_at_once_and_described_as_aws_does() {
    // Native load balancers wait a minute to be active; classic ELB's answer at once.
    let timings = fakecloud_emulator::config::Timings {
        lb_provision_delay: Duration::from_secs(60),
        ..fakecloud_emulator::config::Timings::instant()
    };
    let emu = Emu::with_timings(timings).await;
    let subnets = subnets(&emu).await;
    let sg = group(&emu, "k8s-elb-a1b2c3").await;
    let form = format!(
        "{}&Listeners.member.2.Protocol=http&Listeners.member.2.LoadBalancerPort=80&Listeners.member.2.InstancePort=30080\
         &Scheme=internal&SecurityGroups.member.1={sg}\
         &Tags.member.1.Key=kubernetes.io%2Fservice-name&Tags.member.1.Value=default%2Fweb",
        create_form(&subnets[0], "a1b2c3", 8443, 30443)
    );
    let xml = ok(&emu, &form).await;
    let lb = emu.user.find_load_balancer("a1b2c3").await.unwrap().unwrap();
    assert_eq!(lb.state, LoadBalancerState::Active, "no provisioning state");
    assert_eq!(all(&xml, "DNSName"), [lb.dns_name.clone().unwrap()]);
    // Named as AWS names an internal classic ELB: cloud-provider-aws tells a classic ELB by the zone.
    let dns = lb.dns_name.clone().unwrap();
    assert!(dns.starts_with("internal-a1b2c3-") && dns.ends_with(".local-1.elb.amazonaws.com"), "{dns}");
    assert_eq!(lb.scheme, Scheme::Internal);
    let natives: Vec<(Protocol, u16, u16)> =
        lb.listeners.iter().map(|l| (l.protocol, l.port, l.backend_port)).collect();
    assert_eq!(natives, [(Protocol::Tcp, 8443, 30443), (Protocol::Tcp, 80, 30080)], "HTTP is native TCP");
    let hc = lb.health_check.clone().unwrap();
    assert_eq!((hc.protocol, hc.port, hc.interval_seconds), (HealthCheckProtocol::Tcp, 30443, 30), "AWS's default");

    // A load balancer made natively is classic's too.
    let native = CreateLoadBalancerRequest {
        name: "native-one".into(),
        listeners: vec![fakecloud_api::Listener { protocol: Protocol::Tcp, port: 9000, backend_port: 31000 }],
        ..Default::default()
    };
    emu.user.create_load_balancer(&native, None).await.unwrap();
    let xml = ok(&emu, "Action=DescribeLoadBalancers").await;
    assert_eq!(all(&xml, "LoadBalancerName"), ["a1b2c3", "native-one"]);

    let xml = ok(&emu, "Action=DescribeLoadBalancers&LoadBalancerNames.member.1=a1b2c3").await;
    assert_eq!(all(&xml, "LoadBalancerName"), ["a1b2c3"]);
    assert_eq!(all(&xml, "Protocol"), ["TCP", "HTTP"]);
    assert_eq!(all(&xml, "InstancePort"), ["30443", "30080"]);
    assert_eq!(all(&xml, "Target"), ["TCP:30443"]);
    assert_eq!(
        (all(&xml, "Interval"), all(&xml, "Timeout"), all(&xml, "HealthyThreshold"), all(&xml, "UnhealthyThreshold")),
        (vec!["30".to_string()], vec!["5".to_string()], vec!["10".to_string()], vec!["2".to_string()])
    );
    assert_eq!(all(&xml, "Scheme"), ["internal"]);
    assert!(xml.contains(&format!("<Subnets><member>{}</member></Subnets>", subnets[0])), "{xml}");
    let zone = &emu.cfg.topology.zones[0].0;
    assert!(xml.contains(&format!("<AvailabilityZones><member>{zone}</member></AvailabilityZones>")), "{xml}");
    assert!(xml.contains(&format!("<SecurityGroups><member>{sg}</member></SecurityGroups>")), "{xml}");
    assert_eq!(all(&xml, "VPCId").len(), 1);
    assert_eq!(all(&xml, "CanonicalHostedZoneNameID")[0].len(), 14);
    assert!(all(&xml, "CanonicalHostedZoneName").is_empty(), "an internal load balancer has none");
    assert_eq!(all(&xml, "CreatedTime"), std::slice::from_ref(&lb.created_at));
    assert_eq!(all(&xml, "GroupName"), [sg]);
    let tags = ok(&emu, "Action=DescribeTags&LoadBalancerNames.member.1=a1b2c3").await;
    assert_eq!(
        (all(&tags, "Key"), all(&tags, "Value")),
        (vec!["kubernetes.io/service-name".into()], vec!["default/web".into()])
    );

    // Paging: a marker past the first page, then the end.
    let page = ok(&emu, "Action=DescribeLoadBalancers&PageSize=1").await;
    let marker = all(&page, "NextMarker");
    assert_eq!((all(&page, "LoadBalancerName"), marker.len()), (vec!["a1b2c3".to_string()], 1));
    let page = ok(&emu, &format!("Action=DescribeLoadBalancers&PageSize=1&Marker={}", marker[0])).await;
    assert_eq!((all(&page, "LoadBalancerName"), all(&page, "NextMarker").len()), (vec!["native-one".to_string()], 0));

    // The audit log names the action, the native API's name the operation it stands for does not.
    let query = AuditQuery { operation: Some("CreateLoadBalancer".into()), ..Default::default() };
    assert_eq!(emu.admin.audit(&query).await.unwrap().items.len(), 2, "the classic create and the native one");

    // Deleted: gone from classic's answers at once, and deleting again succeeds, as AWS's does; its tags go too.
    ok(&emu, "Action=DeleteLoadBalancer&LoadBalancerName=a1b2c3").await;
    ok(&emu, "Action=DeleteLoadBalancer&LoadBalancerName=a1b2c3").await;
    assert_eq!(
        refused(&emu, "Action=DescribeLoadBalancers&LoadBalancerNames.member.1=a1b2c3").await,
        (400, "LoadBalancerNotFound".into())
    );
    ok(&emu, &create_form(&subnets[0], "a1b2c3", 8443, 30443)).await;
    let tags = ok(&emu, "Action=DescribeTags&LoadBalancerNames.member.1=a1b2c3").await;
    assert!(all(&tags, "Key").is_empty(), "a new load balancer of the name has no old tags: {tags}");
}

#[tokio::test]
async fn refusals_are_elbs_codes_and_write_nothing() {
    let emu = Emu::start().await;
    let subnets = subnets(&emu).await;
    ok(&emu, &create_form(&subnets[0], "web", 80, 30080)).await;
    let before = native_count(&emu.user).await;
    let cases = [
        (create_form(&subnets[0], "web", 80, 30080), (400, "DuplicateLoadBalancerName")),
        (create_form(&subnets[0], "-bad", 80, 30080), (400, "ValidationError")),
        (create_form(&subnets[0], &"a".repeat(33), 80, 30080), (400, "ValidationError")),
        (create_form(&subnets[0], "under_score", 80, 30080), (400, "ValidationError")),
        (
            format!("{}&Listeners.member.2.Protocol=HTTPS&Listeners.member.2.LoadBalancerPort=443&Listeners.member.2.InstancePort=30443", create_form(&subnets[0], "tls", 80, 30080)),
            (400, "CertificateNotFound"),
        ),
        (format!("{}&Scheme=private", create_form(&subnets[0], "s", 80, 30080)), (400, "InvalidScheme")),
        (format!("{}&SecurityGroups.member.1=default", create_form(&subnets[0], "g", 80, 30080)), (400, "InvalidSecurityGroup")),
        (format!("{}&Tags.member.1.Key=a&Tags.member.2.Key=a", create_form(&subnets[0], "t", 80, 30080)), (400, "DuplicateTagKeys")),
        (create_form(&subnets[0], "p", 22, 30080), (400, "ValidationError")),
        (
            "Action=CreateLoadBalancer&LoadBalancerName=n&Listeners.member.1.Protocol=TCP&Listeners.member.1.LoadBalancerPort=80&Listeners.member.1.InstancePort=1&Subnets.member.1=subnet-0123456789abcdef0".into(),
            (400, "SubnetNotFound"),
        ),
        ("Action=DescribeLoadBalancers&LoadBalancerNames.member.1=nope".into(), (400, "LoadBalancerNotFound")),
        ("Action=DescribeLoadBalancerAttributes&LoadBalancerName=nope".into(), (400, "LoadBalancerNotFound")),
        ("Action=RegisterInstancesWithLoadBalancer&LoadBalancerName=web&Instances.member.1.InstanceId=i-0123456789abcdef0".into(), (400, "InvalidInstance")),
        ("Action=DeregisterInstancesFromLoadBalancer&LoadBalancerName=web&Instances.member.1.InstanceId=i-0123456789abcdef0".into(), (400, "InvalidInstance")),
        ("Action=DescribeInstanceHealth&LoadBalancerName=web&Instances.member.1.InstanceId=i-0123456789abcdef0".into(), (400, "InvalidInstance")),
        ("Action=CreateLoadBalancerListeners&LoadBalancerName=web&Listeners.member.1.Protocol=TCP&Listeners.member.1.LoadBalancerPort=80&Listeners.member.1.InstancePort=30081".into(), (400, "DuplicateListener")),
        ("Action=ConfigureHealthCheck&LoadBalancerName=web&HealthCheck.Target=HTTPS%3A443%2F&HealthCheck.Interval=10&HealthCheck.Timeout=5&HealthCheck.UnhealthyThreshold=2&HealthCheck.HealthyThreshold=2".into(), (400, "ValidationError")),
        ("Action=ConfigureHealthCheck&LoadBalancerName=web&HealthCheck.Target=TCP%3A80&HealthCheck.Interval=5&HealthCheck.Timeout=5&HealthCheck.UnhealthyThreshold=2&HealthCheck.HealthyThreshold=2".into(), (400, "ValidationError")),
        ("Action=ApplySecurityGroupsToLoadBalancer&LoadBalancerName=web&SecurityGroups.member.1=sg-x".into(), (400, "InvalidSecurityGroup")),
        ("Action=AttachLoadBalancerToSubnets&LoadBalancerName=web&Subnets.member.1=subnet-0123456789abcdef0".into(), (400, "SubnetNotFound")),
        ("Action=ModifyLoadBalancerAttributes&LoadBalancerName=web&LoadBalancerAttributes.AccessLog.Enabled=true".into(), (409, "InvalidConfigurationRequest")),
        ("Action=CreateLoadBalancerPolicy&LoadBalancerName=web&PolicyName=p&PolicyTypeName=Nonsense".into(), (400, "PolicyTypeNotFound")),
        ("Action=SetLoadBalancerPoliciesForBackendServer&LoadBalancerName=web&InstancePort=30080&PolicyNames.member.1=nope".into(), (400, "PolicyNotFound")),
        ("Action=SetLoadBalancerPoliciesOfListener&LoadBalancerName=web&LoadBalancerPort=81&PolicyNames=".into(), (400, "ListenerNotFound")),
        ("Action=AddTags&LoadBalancerNames.member.1=nope&Tags.member.1.Key=a".into(), (400, "LoadBalancerNotFound")),
        ("Action=DescribeLoadBalancers&Bogus=1".into(), (400, "UnknownParameter")),
    ];
    for (form, (status, c)) in cases {
        assert_eq!(refused(&emu, &form).await, (status, c.to_string()), "{form}");
    }
    assert_eq!(native_count(&emu.user).await, before, "nothing made");
    let xml = ok(&emu, "Action=DescribeLoadBalancers&LoadBalancerNames.member.1=web").await;
    assert_eq!(all(&xml, "LoadBalancerPort"), ["80"], "no listener added");
    assert_eq!(all(&xml, "Target"), ["TCP:30080"], "the check unchanged");
    let attrs = ok(&emu, "Action=DescribeLoadBalancerAttributes&LoadBalancerName=web").await;
    assert!(attrs.contains("<AccessLog><Enabled>false</Enabled></AccessLog>"), "{attrs}");

    // Tags past 50 are refused whole.
    let fifty = (1..=50).map(|i| format!("Tags.member.{i}.Key=k{i}")).collect::<Vec<_>>().join("&");
    ok(&emu, &format!("Action=AddTags&LoadBalancerNames.member.1=web&{fifty}")).await;
    let (status, c) = refused(&emu, "Action=AddTags&LoadBalancerNames.member.1=web&Tags.member.1.Key=one-more").await;
    assert_eq!((status, c.as_str()), (400, "TooManyTags"));
    let tags = ok(&emu, "Action=DescribeTags&LoadBalancerNames.member.1=web").await;
    assert_eq!(all(&tags, "Key").len(), 50);

    // The native quota, in ELB's words.
    emu.admin.set_quota(QuotaName::LoadBalancers, 1).await.unwrap();
    assert_eq!(
        refused(&emu, &create_form(&subnets[0], "second", 80, 30080)).await,
        (400, "TooManyLoadBalancers".into())
    );
    emu.admin.set_quota(QuotaName::ListenersPerLoadBalancer, 1).await.unwrap();
    let more = "Action=CreateLoadBalancerListeners&LoadBalancerName=web&Listeners.member.1.Protocol=TCP&Listeners.member.1.LoadBalancerPort=8080&Listeners.member.1.InstancePort=30081";
    assert_eq!(refused(&emu, more).await, (400, "TooManyListeners".into()));
    assert_eq!(native_count(&emu.user).await, before);
}

#[tokio::test]
async fn listeners_checks_instances_attributes_and_policies_change_the_load_balancer_as_the_ccm_asks() {
    let emu = Emu::start().await;
    let subnets = subnets(&emu).await;
    ok(&emu, &create_form(&subnets[0], "svc", 80, 30080)).await;
    let id = emu.user.find_load_balancer("svc").await.unwrap().unwrap().id;

    // Listeners: the same one again changes nothing; the last may go, and a new one comes.
    let same = "Action=CreateLoadBalancerListeners&LoadBalancerName=svc&Listeners.member.1.Protocol=TCP&Listeners.member.1.LoadBalancerPort=80&Listeners.member.1.InstancePort=30080";
    ok(&emu, same).await;
    ok(&emu, "Action=DeleteLoadBalancerListeners&LoadBalancerName=svc&LoadBalancerPorts.member.1=80").await;
    assert!(emu.user.get_load_balancer(&id).await.unwrap().listeners.is_empty());
    ok(&emu, "Action=CreateLoadBalancerListeners&LoadBalancerName=svc&Listeners.member.1.Protocol=HTTP&Listeners.member.1.LoadBalancerPort=8080&Listeners.member.1.InstancePort=30090").await;
    let lb = emu.user.get_load_balancer(&id).await.unwrap();
    assert_eq!(lb.listeners.iter().map(|l| (l.port, l.backend_port)).collect::<Vec<_>>(), [(8080, 30090)]);

    // The health check: the native one, with the rest kept beside it.
    let hc = "Action=ConfigureHealthCheck&LoadBalancerName=svc&HealthCheck.Target=HTTP%3A10256%2Fhealthz&HealthCheck.Interval=10&HealthCheck.Timeout=5&HealthCheck.UnhealthyThreshold=6&HealthCheck.HealthyThreshold=2";
    let xml = ok(&emu, hc).await;
    assert_eq!(all(&xml, "Target"), ["HTTP:10256/healthz"]);
    let native = emu.user.get_load_balancer(&id).await.unwrap().health_check.unwrap();
    assert_eq!(
        (native.protocol, native.port, native.path.as_deref(), native.interval_seconds),
        (HealthCheckProtocol::Http, 10256, Some("/healthz"), 10)
    );
    let xml = ok(&emu, "Action=DescribeLoadBalancers&LoadBalancerNames.member.1=svc").await;
    assert_eq!((all(&xml, "UnhealthyThreshold"), all(&xml, "HealthyThreshold")), (vec!["6".into()], vec!["2".into()]));

    // Instances: native backends; without a data plane their health is not checked.
    let (a, b) = (instance(&emu.user, "node-a").await, instance(&emu.user, "node-b").await);
    let xml = ok(&emu, &format!("Action=RegisterInstancesWithLoadBalancer&LoadBalancerName=svc&Instances.member.1.InstanceId={a}&Instances.member.2.InstanceId={b}")).await;
    assert_eq!(all(&xml, "InstanceId"), [a.clone(), b.clone()]);
    assert_eq!(emu.user.get_load_balancer(&id).await.unwrap().backends, [a.clone(), b.clone()]);
    let health = ok(&emu, "Action=DescribeInstanceHealth&LoadBalancerName=svc").await;
    assert_eq!(all(&health, "State"), ["Unknown", "Unknown"]);
    let xml = ok(
        &emu,
        &format!("Action=DeregisterInstancesFromLoadBalancer&LoadBalancerName=svc&Instances.member.1.InstanceId={a}"),
    )
    .await;
    assert_eq!(all(&xml, "InstanceId"), std::slice::from_ref(&b));

    // Subnets and security groups.
    let xml =
        ok(&emu, &format!("Action=AttachLoadBalancerToSubnets&LoadBalancerName=svc&Subnets.member.1={}", subnets[1]))
            .await;
    assert_eq!(all(&xml, "member"), [subnets[0].clone(), subnets[1].clone()]);
    let xml =
        ok(&emu, &format!("Action=DetachLoadBalancerFromSubnets&LoadBalancerName=svc&Subnets.member.1={}", subnets[0]))
            .await;
    assert_eq!(all(&xml, "member"), [subnets[1].clone()]);
    let sg = group(&emu, "k8s-elb-svc").await;
    let xml = ok(
        &emu,
        &format!("Action=ApplySecurityGroupsToLoadBalancer&LoadBalancerName=svc&SecurityGroups.member.1={sg}"),
    )
    .await;
    assert_eq!(all(&xml, "member"), [sg]);

    // Attributes: AWS's defaults, then each structure as last given, which the CCM then finds equal.
    let xml = ok(&emu, "Action=DescribeLoadBalancerAttributes&LoadBalancerName=svc").await;
    assert!(
        xml.contains("<ConnectionDraining><Enabled>false</Enabled><Timeout>300</Timeout></ConnectionDraining>"),
        "{xml}"
    );
    assert!(xml.contains("<ConnectionSettings><IdleTimeout>60</IdleTimeout></ConnectionSettings>"), "{xml}");
    assert!(!xml.contains("AdditionalAttributes"), "{xml}");
    let modify = "Action=ModifyLoadBalancerAttributes&LoadBalancerName=svc&LoadBalancerAttributes.ConnectionDraining.Enabled=false\
                  &LoadBalancerAttributes.ConnectionSettings.IdleTimeout=120&LoadBalancerAttributes.CrossZoneLoadBalancing.Enabled=true\
                  &LoadBalancerAttributes.AdditionalAttributes.member.1.Key=elb.http.desyncmitigationmode\
                  &LoadBalancerAttributes.AdditionalAttributes.member.1.Value=strictest";
    ok(&emu, modify).await;
    let xml = ok(&emu, "Action=DescribeLoadBalancerAttributes&LoadBalancerName=svc").await;
    assert!(xml.contains("<ConnectionDraining><Enabled>false</Enabled></ConnectionDraining>"), "{xml}");
    assert!(xml.contains("<CrossZoneLoadBalancing><Enabled>true</Enabled></CrossZoneLoadBalancing>"), "{xml}");
    assert_eq!((all(&xml, "IdleTimeout"), all(&xml, "Value")), (vec!["120".into()], vec!["strictest".into()]));

    // The proxy-protocol policy, made again on every sync as the CCM does, set on the instance port.
    let policy = "Action=CreateLoadBalancerPolicy&LoadBalancerName=svc&PolicyName=k8s-proxyprotocol-enabled\
                  &PolicyTypeName=ProxyProtocolPolicyType&PolicyAttributes.member.1.AttributeName=ProxyProtocol\
                  &PolicyAttributes.member.1.AttributeValue=true";
    ok(&emu, policy).await;
    ok(&emu, policy).await;
    let other = policy.replace("AttributeValue=true", "AttributeValue=false");
    assert_eq!(refused(&emu, &other).await, (400, "DuplicatePolicyName".into()));
    ok(&emu, "Action=SetLoadBalancerPoliciesForBackendServer&LoadBalancerName=svc&InstancePort=30090&PolicyNames.member.1=k8s-proxyprotocol-enabled").await;
    let xml = ok(&emu, "Action=DescribeLoadBalancers&LoadBalancerNames.member.1=svc").await;
    assert!(xml.contains("<BackendServerDescriptions><member><InstancePort>30090</InstancePort><PolicyNames><member>k8s-proxyprotocol-enabled</member></PolicyNames></member></BackendServerDescriptions>"), "{xml}");
    assert!(xml.contains("<OtherPolicies><member>k8s-proxyprotocol-enabled</member></OtherPolicies>"), "{xml}");
    let xml = ok(
        &emu,
        "Action=DescribeLoadBalancerPolicies&LoadBalancerName=svc&PolicyNames.member.1=k8s-proxyprotocol-enabled",
    )
    .await;
    assert_eq!(
        (all(&xml, "PolicyTypeName"), all(&xml, "AttributeValue")),
        (vec!["ProxyProtocolPolicyType".into()], vec!["true".into()])
    );
    let delete = "Action=DeleteLoadBalancerPolicy&LoadBalancerName=svc&PolicyName=k8s-proxyprotocol-enabled";
    assert_eq!(refused(&emu, delete).await, (409, "InvalidConfigurationRequest".into()), "in use");
    ok(&emu, "Action=SetLoadBalancerPoliciesForBackendServer&LoadBalancerName=svc&InstancePort=30090&PolicyNames=")
        .await;
    ok(&emu, delete).await;
    let (status, c) = refused(
        &emu,
        "Action=DescribeLoadBalancerPolicies&LoadBalancerName=svc&PolicyNames.member.1=k8s-proxyprotocol-enabled",
    )
    .await;
    assert_eq!((status, c.as_str()), (400, "PolicyNotFound"));

    // Tags added and removed.
    ok(&emu, "Action=AddTags&LoadBalancerNames.member.1=svc&Tags.member.1.Key=team&Tags.member.1.Value=web").await;
    ok(&emu, "Action=RemoveTags&LoadBalancerNames.member.1=svc&Tags.member.1.Key=team").await;
    let tags = ok(&emu, "Action=DescribeTags&LoadBalancerNames.member.1=svc").await;
    assert!(all(&tags, "Key").is_empty(), "{tags}");
}

fn rule(op: &str, status: u16, code: &str) -> CreateFaultRuleRequest {
    CreateFaultRuleRequest {
        id: None,
        matcher: FaultMatch { operations: vec![op.into()], ..Default::default() },
        action: FaultAction::Error { status, code: code.into(), message: None, headers: Default::default() },
        trigger: FaultTrigger { times: Some(1), ..Default::default() },
        position: None,
    }
}

#[tokio::test]
async fn faults_refuse_classic_calls_as_elb_throttles() {
    let emu = Emu::start().await;
    let subnets = subnets(&emu).await;
    ok(&emu, &create_form(&subnets[0], "web", 80, 30080)).await;
    let node = instance(&emu.user, "node").await;
    let register =
        format!("Action=RegisterInstancesWithLoadBalancer&LoadBalancerName=web&Instances.member.1.InstanceId={node}");
    // A rule on the native operation the action stands for refuses it; a native throttle is ELB's 400 Throttling.
    emu.admin.add_fault(&rule("UpdateLoadBalancer", 429, "TooManyRequests")).await.unwrap();
    assert_eq!(refused(&emu, &register).await, (400, "Throttling".into()));
    assert!(
        emu.user
            .get_load_balancer(&emu.user.find_load_balancer("web").await.unwrap().unwrap().id)
            .await
            .unwrap()
            .backends
            .is_empty()
    );
    // By the action's own name; an outage's 503 is ServiceUnavailable.
    emu.admin.add_fault(&rule("DescribeLoadBalancerAttributes", 503, "ServiceUnavailable")).await.unwrap();
    assert_eq!(
        refused(&emu, "Action=DescribeLoadBalancerAttributes&LoadBalancerName=web").await,
        (503, "ServiceUnavailable".into())
    );
    ok(&emu, &register).await;

    // The aws-elb preset: its describe bucket (40, refilled 10/s) counts DescribeLoadBalancers, then refuses with
    // Throttling. Called until it does (bounded by count): how many calls that takes depends on how fast this
    // machine makes them, not on the bucket alone.
    emu.admin.install_rate_limit_preset(RateLimitPreset::AwsElb).await.unwrap();
    let mut answered = 0;
    let refused = loop {
        match call(&emu, "Action=DescribeLoadBalancers").await {
            (200, _) if answered < 5000 => answered += 1,
            (status, xml) => break (status, code(&xml)),
        }
    };
    assert_eq!(refused, (400, "Throttling".into()), "after {answered} calls");
    assert!(answered >= 40, "the bucket holds 40: refused after {answered}");
    let query = AuditQuery { operation: Some("DescribeLoadBalancers".into()), ..Default::default() };
    let audited = emu.admin.audit(&query).await.unwrap().items;
    assert!(audited.iter().any(|e| e.error_code.as_deref() == Some("Throttling")));
}

/// A load balancer made through classic ELB carries real TCP traffic from its listener to an instance's port on
/// loopback, and DescribeInstanceHealth reads the data plane's checks: InService, then OutOfService once the
/// instance stops answering.
#[tokio::test]
async fn a_classic_load_balancer_forwards_traffic_and_reads_its_instances_health_from_the_data_plane() {
    let dir = tempfile::tempdir().unwrap();
    // As the data-plane tests serve it (`dataplane::emulator`), with its URL for signed calls.
    let flags = [
        "--serve-load-balancers",
        "--loopback-instances",
        "--public-pool",
        "127.77.50.0/24",
        "--lb-delete-delay",
        "0s",
    ];
    let (_emu, url, _log) = spawn_emulator_with(dir.path().join("fc.db"), &flags, None).await;
    let c = Client::new(&url, USER).unwrap();
    let region = "local-1";
    let bs = dataplane::backends(&c, 50, &["b1"]).await;
    let at = |form: String| {
        let url = url.clone();
        async move { call_at(&url, region, &format!("{V}&{form}")).await }
    };
    let (status, xml) = at(format!(
        "Action=CreateLoadBalancer&LoadBalancerName=web&Listeners.member.1.Protocol=TCP&Listeners.member.1.LoadBalancerPort=18050\
         &Listeners.member.1.InstancePort={}&AvailabilityZones.member.1=local-1a",
        bs.port
    ))
    .await;
    assert_eq!(status, 200, "{xml}");
    let (status, xml) = at(format!(
        "Action=RegisterInstancesWithLoadBalancer&LoadBalancerName=web&Instances.member.1.InstanceId={}",
        bs.instances[0]
    ))
    .await;
    assert_eq!(status, 200, "{xml}");
    let hc = format!(
        "Action=ConfigureHealthCheck&LoadBalancerName=web&HealthCheck.Target=HTTP%3A{}%2Fhealthz&HealthCheck.Interval=5\
         &HealthCheck.Timeout=2&HealthCheck.UnhealthyThreshold=2&HealthCheck.HealthyThreshold=2",
        bs.health_port
    );
    assert_eq!(at(hc).await.0, 200);
    let lb = c.find_load_balancer("web").await.unwrap().unwrap();
    let vip = SocketAddr::new(lb.address.unwrap(), 18050);
    dataplane::answers(vip, &["b1"]).await;
    let health = || at("Action=DescribeInstanceHealth&LoadBalancerName=web".into());
    eventually(dataplane::FOLLOW, "the instance to be InService", || async {
        let (_, xml) = health().await;
        (all(&xml, "State") == ["InService"]).then_some(())
    })
    .await;
    // The instance stops answering: the data plane's checks fail, and so does the traffic.
    bs.servers[0].stop();
    let (_, xml) = eventually(dataplane::FOLLOW, "the instance to be OutOfService", || async {
        let (status, xml) = health().await;
        (all(&xml, "State") == ["OutOfService"]).then_some((status, xml))
    })
    .await;
    assert_eq!(all(&xml, "ReasonCode"), ["Instance"], "{xml}");
    assert!(dataplane::hello(vip).await.is_none());
    // Deleted through classic ELB: the data plane stops serving it.
    assert_eq!(at("Action=DeleteLoadBalancer&LoadBalancerName=web".into()).await.0, 200);
    assert!(c.find_load_balancer("web").await.unwrap().is_none_or(|lb| lb.state == LoadBalancerState::Deleting));
}

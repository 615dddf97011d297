//! Faults on the AWS face (issue #49): rules named by an EC2 action or by the native operation it stands for,
//! or by what a call is about (the resource it names, its zone, name or tags), rate limits and their buckets
//! shared with native calls, outages, hangs, zone outages and eventual consistency, each answered in the API's
//! words. Faults are set through the native API with the admin token.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant, SystemTime};

use fakecloud_api::{
    AuditQuery, CreateFaultRuleRequest, CreateInstanceRequest, FaultAction, FaultMatch, FaultTrigger, NoResponseMode,
    OutageScope, RateLimitPreset, RateLimitScope, Service, SetRateLimitRequest, StartOutageRequest,
};
use fakecloud_emulator::auth::Tokens;
use fakecloud_emulator::aws::credentials::Keys;

use crate::aws::{all, code, ec2, signed};
use crate::common::{Emu, HANG, USER};

const DESCRIBE_INSTANCES: &str = "Action=DescribeInstances&Version=2016-11-15";
const DESCRIBE_VPCS: &str = "Action=DescribeVpcs&Version=2016-11-15";

pub(crate) fn rule(op: &str, action: FaultAction, times: Option<u64>) -> CreateFaultRuleRequest {
    CreateFaultRuleRequest {
        id: None,
        matcher: FaultMatch { operations: vec![op.into()], ..Default::default() },
        action,
        trigger: FaultTrigger { times, ..Default::default() },
        position: None,
    }
}

pub(crate) fn error(status: u16, code: &str) -> FaultAction {
    FaultAction::Error { status, code: code.into(), message: None, headers: Default::default() }
}

/// Start an outage of `zone`.
async fn darken(emu: &Emu, zone: &str) {
    let zone =
        StartOutageRequest { scope: OutageScope::Zone, service: None, zone: Some(zone.into()), duration_seconds: None };
    emu.admin.start_outage(&zone).await.unwrap();
}

/// The status and EC2 error code of a DescribeInstances call (the code empty when it succeeds).
async fn describe(emu: &Emu) -> (u16, String) {
    let (status, xml) = ec2(emu, USER, DESCRIBE_INSTANCES).await;
    (status, code(&xml))
}

/// The audit log's `(status, error code, fault)` of every call to `operation`, oldest first.
async fn audited(emu: &Emu, operation: &str) -> Vec<(u16, Option<String>, Option<String>)> {
    let query = AuditQuery { operation: Some(operation.into()), ..Default::default() };
    let mut entries = emu.admin.audit(&query).await.unwrap().items;
    entries.sort_by_key(|e| e.seq);
    entries.into_iter().map(|e| (e.status, e.error_code, e.fault)).collect()
}

#[tokio::test]
async fn a_rule_naming_the_action_or_its_native_operation_refuses_in_ec2s_words() {
    let emu = Emu::start().await;
    // By the action's name: the AWS call only, once; the native list it stands for is not named.
    let by_action = emu.admin.add_fault(&rule("DescribeInstances", error(503, "ServiceUnavailable"), Some(1))).await;
    let by_action = by_action.unwrap().id;
    assert_eq!(describe(&emu).await, (503, "Unavailable".into()));
    emu.user.list_all_instances(&Default::default()).await.unwrap();
    assert_eq!(describe(&emu).await, (200, String::new()));

    // By the native operation: the native call and the AWS call that stands for it, each in its own words.
    let by_native = emu.admin.add_fault(&rule("ListInstances", error(500, "InternalError"), Some(2))).await;
    let by_native = by_native.unwrap().id;
    assert_eq!(emu.user.list_all_instances(&Default::default()).await.unwrap_err().status(), Some(500));
    assert_eq!(describe(&emu).await, (500, "InternalError".into()));
    assert_eq!(describe(&emu).await, (200, String::new()));

    // A native throttle (429, or the native throttling code at any status) is EC2's: RequestLimitExceeded, 503.
    // DescribeVpcs stands for GetRegion; a glob over the actions' names hits them too.
    emu.admin.add_fault(&rule("GetRegion", error(429, "TooManyRequests"), Some(1))).await.unwrap();
    let (status, xml) = ec2(&emu, USER, DESCRIBE_VPCS).await;
    assert_eq!((status, code(&xml).as_str()), (503, "RequestLimitExceeded"), "{xml}");
    emu.admin.add_fault(&rule("Describe*", error(400, "RequestLimitExceeded"), Some(1))).await.unwrap();
    let (status, xml) = ec2(&emu, USER, DESCRIBE_VPCS).await;
    assert_eq!((status, code(&xml).as_str()), (503, "RequestLimitExceeded"), "{xml}");
    // Another client error is EC2's 400 with the rule's own code; another server error keeps its status.
    emu.admin.add_fault(&rule("DescribeVpcs", error(404, "InvalidVpcID.NotFound"), Some(1))).await.unwrap();
    let (status, xml) = ec2(&emu, USER, DESCRIBE_VPCS).await;
    assert_eq!((status, code(&xml).as_str()), (400, "InvalidVpcID.NotFound"), "{xml}");
    emu.admin.add_fault(&rule("DescribeVpcs", error(502, "BadGateway"), Some(1))).await.unwrap();
    let (status, xml) = ec2(&emu, USER, DESCRIBE_VPCS).await;
    assert_eq!((status, code(&xml).as_str()), (502, "InternalError"), "{xml}");
    assert_eq!(ec2(&emu, USER, DESCRIBE_VPCS).await.0, 200);

    // The audit log names the action, EC2's code and the rule that fired.
    let fired = |status: u16, code: &str, rule: &str| (status, Some(code.to_string()), Some(rule.to_string()));
    assert_eq!(
        audited(&emu, "DescribeInstances").await,
        [
            fired(503, "Unavailable", &by_action),
            (200, None, None),
            fired(500, "InternalError", &by_native),
            (200, None, None)
        ]
    );
    // A name that is no operation of either face is refused, as before.
    let err = emu.admin.add_fault(&rule("DescribeNothing", error(500, "X"), None)).await.unwrap_err();
    assert_eq!(err.status(), Some(400), "{err}");
}

#[tokio::test]
async fn a_rate_limit_throttles_aws_calls_as_ec2_does_from_the_native_calls_bucket() {
    let emu = Emu::start().await;
    // Three reads, shared by both faces (one bucket of the user's): a refusal is the limit's own natively and
    // EC2's throttling on the AWS face, whatever the limit's status and code.
    let reads = SetRateLimitRequest {
        scope: RateLimitScope::Reads,
        per_token: true,
        capacity: 3,
        refill_per_second: Some(0.001),
        status: 429,
        code: Some("SlowDownPlease".into()),
        ..Default::default()
    };
    emu.admin.set_rate_limit("reads", &reads).await.unwrap();
    emu.user.list_all_instances(&Default::default()).await.unwrap();
    assert_eq!(describe(&emu).await, (200, String::new()));
    assert_eq!(ec2(&emu, USER, DESCRIBE_VPCS).await.0, 200);
    assert_eq!(describe(&emu).await, (503, "RequestLimitExceeded".into()));
    let err = emu.user.list_all_instances(&Default::default()).await.unwrap_err();
    assert_eq!((err.status(), err.code()), (Some(429), Some("SlowDownPlease")));
    // The admin's bucket is its own.
    emu.admin.list_all_instances(&Default::default()).await.unwrap();
    assert_eq!(
        audited(&emu, "DescribeInstances").await[1],
        (503, Some("RequestLimitExceeded".into()), Some("reads".into()))
    );
    emu.admin.delete_rate_limit("reads").await.unwrap();

    // A limit on one operation, named natively, holds its AWS action too.
    let one = SetRateLimitRequest {
        scope: RateLimitScope::Operation,
        operation: Some("ListInstances".into()),
        refill_per_second: Some(0.001),
        ..Default::default()
    };
    emu.admin.set_rate_limit("list", &one).await.unwrap();
    assert_eq!(describe(&emu).await, (200, String::new()));
    assert_eq!(describe(&emu).await, (503, "RequestLimitExceeded".into()));
    assert_eq!(ec2(&emu, USER, DESCRIBE_VPCS).await.0, 200, "GetRegion's calls are not ListInstances'");
    emu.admin.delete_rate_limit("list").await.unwrap();

    // The aws-ec2 preset's limits count the AWS face's calls: its non-mutating bucket holds 100 reads, refilled
    // 20 a second. Far more calls than that takes to spend: a hang detector.
    emu.admin.install_rate_limit_preset(RateLimitPreset::AwsEc2).await.unwrap();
    let mut answered = 0;
    let refused = loop {
        match describe(&emu).await {
            (200, _) if answered < 5000 => answered += 1,
            other => break other,
        }
    };
    assert_eq!(refused, (503, "RequestLimitExceeded".into()), "after {answered} calls");
    assert!(answered >= 100, "throttled after {answered} calls");
    let query = AuditQuery { operation: Some("DescribeInstances".into()), status: Some(503), ..Default::default() };
    let throttled = emu.admin.audit(&query).await.unwrap().items;
    assert_eq!(throttled.iter().max_by_key(|e| e.seq).unwrap().fault.as_deref(), Some("aws-ec2-non-mutating"));
}

#[tokio::test]
async fn an_outage_answers_unavailable_by_the_service_the_action_stands_for() {
    let emu = Emu::start().await;
    let outage = |scope, service| StartOutageRequest { scope, service, zone: None, duration_seconds: None };
    let lb = emu.admin.start_outage(&outage(OutageScope::Service, Some(Service::LoadBalancing))).await.unwrap();
    assert_eq!(describe(&emu).await, (200, String::new()));
    let compute = emu.admin.start_outage(&outage(OutageScope::Service, Some(Service::Compute))).await.unwrap();
    assert_eq!(describe(&emu).await, (503, "Unavailable".into()));
    // DescribeVpcs is the native region's, a compute call.
    assert_eq!(code(&ec2(&emu, USER, DESCRIBE_VPCS).await.1), "Unavailable");
    emu.admin.stop_outage(&compute.id).await.unwrap();
    emu.admin.stop_outage(&lb.id).await.unwrap();
    assert_eq!(describe(&emu).await, (200, String::new()));
    let api = emu.admin.start_outage(&outage(OutageScope::Api, None)).await.unwrap();
    assert_eq!(describe(&emu).await, (503, "Unavailable".into()));
    assert_eq!(audited(&emu, "DescribeInstances").await.last().unwrap().2.as_deref(), Some(api.id.as_str()));
}

#[tokio::test]
async fn no_response_closes_or_holds_the_aws_call_until_the_client_gives_up() {
    let emu = Emu::start().await;
    let keys = Keys::of(&Tokens { user: USER.into(), admin: String::new() });
    let signer = (keys.access_key_id.as_str(), keys.secret_access_key.as_str(), "local-1", SystemTime::now());
    let close = FaultAction::NoResponse { mode: NoResponseMode::Close, hang_seconds: None };
    emu.admin.add_fault(&rule("DescribeVpcs", close, None)).await.unwrap();
    let err = signed(&emu.url(), signer, "POST", "", DESCRIBE_VPCS).send().await.and_then(|r| r.error_for_status());
    let err = match err {
        Ok(resp) => resp.text().await.unwrap_err(),
        Err(e) => e,
    };
    assert!(err.status().is_none(), "no HTTP answer, got {err}");

    // Held ten times the bound below: an answer after the hang could not pass for the client's own timeout.
    let hang = FaultAction::NoResponse { mode: NoResponseMode::Hang, hang_seconds: Some(600.0) };
    emu.admin.add_fault(&rule("ListInstances", hang, None)).await.unwrap();
    let t = Instant::now();
    let impatient = signed(&emu.url(), signer, "POST", "", DESCRIBE_INSTANCES).timeout(Duration::from_millis(300));
    let err = impatient.send().await.unwrap_err();
    assert!(err.is_timeout() && t.elapsed() < HANG, "{err} after {:?}", t.elapsed());
}

#[tokio::test]
async fn describe_instances_reads_zone_outages_and_lag_as_the_native_list_does() {
    let emu = Emu::start().await;
    let made = |name: &str, zone: &str| CreateInstanceRequest {
        name: name.into(),
        zone: Some(zone.into()),
        ..Default::default()
    };
    let dark = emu.user.create_instance(&made("dark", "local-1a"), None).await.unwrap();
    let stopped_late = emu.user.create_instance(&made("stopped-late", "local-1b"), None).await.unwrap();
    darken(&emu, "local-1a").await;
    // Lags far longer than the reads below take: a read inside them is certain.
    let lag = FaultAction::EventualConsistency { seconds: 300.0 };
    emu.admin.add_fault(&rule("CreateInstance", lag.clone(), None)).await.unwrap();
    emu.admin.add_fault(&rule("StopInstance", lag, None)).await.unwrap();
    let unseen = emu.user.create_instance(&made("unseen", "local-1c"), None).await.unwrap();
    emu.user.stop_instance(&stopped_late.id).await.unwrap();

    let (status, xml) = ec2(&emu, USER, DESCRIBE_INSTANCES).await;
    assert_eq!(status, 200, "{xml}");
    // The new instance is not there yet; the stopped one reads as it was; the dark zone's is stopped.
    assert_eq!(all(&xml, "instanceId"), [dark.id.as_str(), stopped_late.id.as_str()]);
    assert_eq!(all(&xml, "name"), ["stopped", "running"]);
    assert_eq!(all(&xml, "code"), ["80", "Server.ZoneOutage", "16"]);
    let native: Vec<_> = emu.user.list_all_instances(&Default::default()).await.unwrap();
    let native: Vec<_> = native.iter().map(|i| (i.id.as_str(), i.state.as_str())).collect();
    assert_eq!(native, [(dark.id.as_str(), "stopped"), (stopped_late.id.as_str(), "running")]);
    let (status, xml) = ec2(&emu, USER, &format!("{DESCRIBE_INSTANCES}&InstanceId.1={}", unseen.id)).await;
    assert_eq!((status, code(&xml).as_str()), (400, "InvalidInstanceID.NotFound"), "{xml}");
    let (_, xml) =
        ec2(&emu, USER, &format!("{DESCRIBE_INSTANCES}&Filter.1.Name=instance-state-name&Filter.1.Value.1=running"))
            .await;
    assert_eq!(all(&xml, "instanceId"), [stopped_late.id.as_str()]);
}

/// A rule on any call about what `matcher` names, refusing it with a 500.
fn about(matcher: FaultMatch) -> CreateFaultRuleRequest {
    CreateFaultRuleRequest {
        id: None,
        matcher,
        action: error(500, "InternalError"),
        trigger: FaultTrigger::default(),
        position: None,
    }
}

/// The status and code of an EC2 call (the code empty when it succeeds).
async fn status(emu: &Emu, form: &str) -> (u16, String) {
    let (status, xml) = ec2(emu, USER, &format!("Version=2016-11-15&{form}")).await;
    (status, code(&xml))
}

#[tokio::test]
async fn rules_on_what_a_call_is_about_match_the_resource_zone_name_or_tags_an_aws_call_names() {
    let emu = Emu::start().await;
    let made = |name: &str, zone: &str, tags: &[(&str, &str)]| CreateInstanceRequest {
        name: name.into(),
        zone: Some(zone.into()),
        tags: tags.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ..Default::default()
    };
    let a = emu.user.create_instance(&made("a", "local-1a", &[]), None).await.unwrap().id;
    let b = emu.user.create_instance(&made("b", "local-1b", &[("team", "x")]), None).await.unwrap().id;
    let refused = (500, "InternalError".to_string());
    let passed = (200, String::new());

    // By ID: a call naming that instance, whichever action; not one naming another, nor one naming several.
    let rule = about(FaultMatch { resource_ids: vec![a.clone()], ..Default::default() });
    let id = emu.admin.add_fault(&rule).await.unwrap().id;
    assert_eq!(status(&emu, &format!("Action=DescribeInstances&InstanceId.1={a}")).await, refused);
    assert_eq!(status(&emu, &format!("Action=StopInstances&InstanceId.1={a}")).await, refused);
    let modify = format!("Action=ModifyInstanceAttribute&InstanceId={a}&SourceDestCheck.Value=false");
    assert_eq!(status(&emu, &modify).await, refused);
    assert_eq!(status(&emu, &format!("Action=DescribeInstances&InstanceId.1={b}")).await, passed);
    assert_eq!(status(&emu, &format!("Action=DescribeInstances&InstanceId.1={a}&InstanceId.2={b}")).await, passed);
    emu.admin.delete_fault(&id).await.unwrap();
    assert_eq!(emu.user.get_instance(&a).await.unwrap().state.as_str(), "running", "the refused stop changed nothing");

    // By zone and by tag: what a launch asks for, and the instance a call names.
    let launch = "Action=RunInstances&MinCount=1&MaxCount=1";
    for (matcher, asked, named) in [
        (
            FaultMatch { zones: vec!["local-1b".into()], ..Default::default() },
            "Placement.AvailabilityZone=local-1b",
            &b,
        ),
        (
            FaultMatch { tags: vec!["team=x".into()], ..Default::default() },
            "TagSpecification.1.ResourceType=instance&TagSpecification.1.Tag.1.Key=team&TagSpecification.1.Tag.1.Value=x",
            &b,
        ),
    ] {
        let id = emu.admin.add_fault(&about(matcher)).await.unwrap().id;
        assert_eq!(status(&emu, &format!("{launch}&{asked}")).await, refused, "{asked}");
        assert_eq!(status(&emu, &format!("{launch}&Placement.AvailabilityZone=local-1a")).await, passed);
        assert_eq!(status(&emu, &format!("Action=DescribeInstances&InstanceId.1={named}")).await, refused);
        assert_eq!(status(&emu, &format!("Action=DescribeInstances&InstanceId.1={a}")).await, passed);
        emu.admin.delete_fault(&id).await.unwrap();
    }

    // By name: a classic ELB and an NLB, on their create and on a call naming the one made.
    let subnet = &crate::aws_elb::subnets(&emu).await[0];
    // ELB's words for the same refusal.
    let refused = (500, "InternalFailure".to_string());
    let code_of = |xml: &str| code(xml);
    let (s, xml) = crate::aws_elb::call(&emu, &crate::aws_elb::create_form(subnet, "web-1", 80, 30080)).await;
    assert_eq!(s, 200, "{xml}");
    crate::aws_elbv2::create_nlb(&emu, "web-2").await;
    let id = emu.admin.add_fault(&about(FaultMatch { names: vec!["web-*".into()], ..Default::default() })).await;
    let id = id.unwrap().id;
    let (s, xml) = crate::aws_elb::call(&emu, &crate::aws_elb::create_form(subnet, "web-3", 80, 30080)).await;
    assert_eq!((s, code_of(&xml)), refused, "{xml}");
    let (s, xml) = crate::aws_elb::call(&emu, "Action=DescribeLoadBalancers&LoadBalancerNames.member.1=web-1").await;
    assert_eq!((s, code_of(&xml)), refused, "{xml}");
    let (s, xml) = crate::aws_elb::call(&emu, &crate::aws_elb::create_form(subnet, "api-1", 80, 30080)).await;
    assert_eq!(s, 200, "{xml}");
    let nlb = format!("Action=CreateLoadBalancer&Name=web-4&Type=network&Subnets.member.1={subnet}");
    let (s, xml) = crate::aws_elbv2::elb(&emu, &nlb).await;
    assert_eq!((s, code_of(&xml)), refused, "{xml}");
    let (s, xml) = crate::aws_elbv2::elb(&emu, "Action=DescribeLoadBalancers&Names.member.1=web-2").await;
    assert_eq!((s, code_of(&xml)), refused, "{xml}");
    emu.admin.delete_fault(&id).await.unwrap();

    // A dark zone: a call about its instance is refused as the native one is; another zone's is not.
    darken(&emu, "local-1a").await;
    assert_eq!(status(&emu, &format!("Action=StopInstances&InstanceId.1={a}")).await, (503, "Unavailable".into()));
    assert_eq!(status(&emu, &format!("{launch}&Placement.AvailabilityZone=local-1a")).await.0, 503);
    assert_eq!(status(&emu, &format!("Action=StopInstances&InstanceId.1={b}")).await, passed);
}

#[tokio::test]
async fn eventual_consistency_hides_what_an_aws_write_made_and_shows_a_change_late() {
    let emu = Emu::start().await;
    // Lags far longer than the reads below take: a read inside them is certain.
    let lag = FaultAction::EventualConsistency { seconds: 300.0 };
    for op in ["RunInstances", "StopInstances", "CreateLoadBalancer"] {
        emu.admin.add_fault(&rule(op, lag.clone(), None)).await.unwrap();
    }
    // A batch: none of its instances is there yet, as EC2's InvalidInstanceID.NotFound after RunInstances.
    let (s, xml) = ec2(&emu, USER, "Action=RunInstances&Version=2016-11-15&MinCount=2&MaxCount=2").await;
    assert_eq!(s, 200, "{xml}");
    let launched = all(&xml, "instanceId");
    assert_eq!(launched.len(), 2, "{xml}");
    for id in &launched {
        let named = status(&emu, &format!("Action=DescribeInstances&InstanceId.1={id}")).await;
        assert_eq!(named, (400, "InvalidInstanceID.NotFound".into()));
    }
    assert!(emu.user.list_all_instances(&Default::default()).await.unwrap().is_empty());

    // A change to one instance: it reads as it was.
    let r = CreateInstanceRequest { name: "r".into(), ..Default::default() };
    let running = emu.user.create_instance(&r, None).await.unwrap().id;
    assert_eq!(status(&emu, &format!("Action=StopInstances&InstanceId.1={running}")).await.0, 200);
    let (_, xml) = ec2(&emu, USER, &format!("{DESCRIBE_INSTANCES}&InstanceId.1={running}")).await;
    assert_eq!(all(&xml, "name"), ["running"], "{xml}");
    assert_eq!(emu.user.get_instance(&running).await.unwrap().state.as_str(), "running");

    // A classic ELB and an NLB: not found by name yet, on either face.
    let subnet = &crate::aws_elb::subnets(&emu).await[0];
    let (s, xml) = crate::aws_elb::call(&emu, &crate::aws_elb::create_form(subnet, "late", 80, 30080)).await;
    assert_eq!(s, 200, "{xml}");
    let (s, xml) = crate::aws_elb::call(&emu, "Action=DescribeLoadBalancers&LoadBalancerNames.member.1=late").await;
    assert_eq!((s, code(&xml).as_str()), (400, "LoadBalancerNotFound"), "{xml}");
    let (_, xml) = crate::aws_elb::call(&emu, "Action=DescribeLoadBalancers").await;
    assert!(all(&xml, "LoadBalancerName").is_empty(), "{xml}");
    crate::aws_elbv2::create_nlb(&emu, "late-nlb").await;
    let (s, xml) = crate::aws_elbv2::elb(&emu, "Action=DescribeLoadBalancers&Names.member.1=late-nlb").await;
    assert_eq!((s, code(&xml).as_str()), (400, "LoadBalancerNotFound"), "{xml}");
    assert!(emu.user.list_all_load_balancers().await.unwrap().is_empty());
}

//! Security groups through the AWS face (issue #49), signed as an SDK signs: each action, each of EC2's error
//! codes for them, the rules-per-group quota, the dependencies that keep a group from being deleted (an
//! instance, a load balancer, another group's rule), and nothing half-written by a refused request.
#![allow(clippy::unwrap_used)]

use fakecloud_api::{CreateLoadBalancerRequest, Listener, Protocol, QuotaName};
use fakecloud_emulator::db::Db;
use fakecloud_emulator::store::security_groups;

use crate::aws::{all, code, ec2};
use crate::common::{Emu, USER};

const V: &str = "Version=2016-11-15";

/// `form` as the user's EC2 call: its status and body.
async fn call(emu: &Emu, form: &str) -> (u16, String) {
    ec2(emu, USER, &format!("{form}&{V}")).await
}

/// The EC2 code of a call that must be refused with it, and that it was a 400.
async fn refused(emu: &Emu, form: &str) -> String {
    let (status, xml) = call(emu, form).await;
    assert_eq!(status, 400, "{form}: {xml}");
    code(&xml)
}

async fn ok(emu: &Emu, form: &str) -> String {
    let (status, xml) = call(emu, form).await;
    assert_eq!(status, 200, "{form}: {xml}");
    xml
}

/// The IDs of the groups a DescribeSecurityGroups answers (not those its rules name).
fn groups(xml: &str) -> Vec<String> {
    xml.split("</ownerId><groupId>").skip(1).filter_map(|s| s.split_once('<').map(|(id, _)| id.to_string())).collect()
}

/// The names of the groups an instance is in (not its placement group's, which it has none of).
fn group_names(xml: &str) -> Vec<String> {
    all(xml, "groupName").into_iter().filter(|n| !n.is_empty()).collect()
}

async fn create(emu: &Emu, name: &str) -> String {
    let xml = ok(emu, &format!("Action=CreateSecurityGroup&GroupName={name}&GroupDescription=for+{name}")).await;
    all(&xml, "groupId").concat()
}

/// The `ipProtocol/fromPort/toPort/source` of each rule of group `id`, as DescribeSecurityGroups shows them.
async fn rules(emu: &Emu, id: &str) -> Vec<String> {
    let xml = ok(emu, &format!("Action=DescribeSecurityGroups&GroupId.1={id}")).await;
    let ingress = xml.split("<ipPermissionsEgress>").next().unwrap().to_string();
    let mut out = Vec::new();
    for perm in ingress.split("<ipProtocol>").skip(1) {
        let protocol = perm.split('<').next().unwrap();
        let ports = format!("{}-{}", all(perm, "fromPort").concat(), all(perm, "toPort").concat());
        for source in all(perm, "cidrIp").into_iter().chain(all(perm, "cidrIpv6")).chain(all(perm, "groupId")) {
            out.push(format!("{protocol}/{ports}/{source}"));
        }
    }
    out
}

fn tcp(group: &str, port: u16, cidrs: &[&str]) -> String {
    let ranges: String =
        cidrs.iter().enumerate().map(|(i, c)| format!("&IpPermissions.1.IpRanges.{}.CidrIp={c}", i + 1)).collect();
    format!(
        "GroupId={group}&IpPermissions.1.IpProtocol=tcp&IpPermissions.1.FromPort={port}&IpPermissions.1.ToPort={port}{ranges}"
    )
}

#[tokio::test]
async fn groups_are_made_described_authorized_revoked_and_deleted_as_ec2s() {
    let emu = Emu::start().await;
    // Every VPC has its default group, which admits everything from itself.
    let xml = ok(&emu, "Action=DescribeSecurityGroups&Filter.1.Name=group-name&Filter.1.Value.1=default").await;
    let default = groups(&xml).first().cloned().unwrap();
    let vpc = all(&xml, "vpcId").concat();
    assert!(vpc.starts_with("vpc-"), "{xml}");
    assert_eq!(rules(&emu, &default).await, [format!("-1/-/{default}")]);

    let tagged = "Action=CreateSecurityGroup&GroupName=k8s-elb-a1&GroupDescription=Security+group+for+a1\
                  &TagSpecification.1.ResourceType=security-group&TagSpecification.1.Tag.1.Key=kubernetes.io%2Fcluster%2Fc1\
                  &TagSpecification.1.Tag.1.Value=owned";
    let xml = ok(&emu, &format!("{tagged}&VpcId={vpc}")).await;
    let elb = all(&xml, "groupId").concat();
    assert!(elb.starts_with("sg-") && elb.len() == 20 && elb[3..].bytes().all(|b| b.is_ascii_hexdigit()), "{elb}");
    assert_eq!(refused(&emu, tagged).await, "InvalidGroup.Duplicate");
    assert_eq!(
        refused(&emu, "Action=CreateSecurityGroup&GroupName=x&GroupDescription=x&VpcId=vpc-00000000000000000").await,
        "InvalidVpcID.NotFound"
    );
    assert_eq!(refused(&emu, "Action=CreateSecurityGroup&GroupName=x").await, "MissingParameter");
    assert_eq!(
        refused(&emu, "Action=CreateSecurityGroup&GroupName=sg-x&GroupDescription=x").await,
        "InvalidParameterValue"
    );
    let nodes = create(&emu, "nodes").await;

    // Filters, names, IDs, and what is not there.
    for (filter, value, want) in [
        ("group-id", elb.as_str(), vec![elb.clone()]),
        ("vpc-id", vpc.as_str(), vec![default.clone(), elb.clone(), nodes.clone()]),
        ("tag:kubernetes.io/cluster/c1", "owned", vec![elb.clone()]),
        ("tag-key", "kubernetes.io/cluster/*", vec![elb.clone()]),
        ("description", "for*", vec![nodes.clone()]),
        ("group-name", "k8s-elb-*", vec![elb.clone()]),
    ] {
        let form = format!(
            "Action=DescribeSecurityGroups&Filter.1.Name={}&Filter.1.Value.1={}",
            urlencoding(filter),
            urlencoding(value)
        );
        assert_eq!(groups(&ok(&emu, &form).await), want, "{filter}={value}");
    }
    let xml = ok(&emu, "Action=DescribeSecurityGroups&GroupName.1=nodes").await;
    assert_eq!(groups(&xml), [nodes.as_str()]);
    assert_eq!(all(&xml, "groupDescription"), ["for nodes"]);
    assert_eq!(
        refused(&emu, "Action=DescribeSecurityGroups&GroupId.1=sg-00000000000000000").await,
        "InvalidGroup.NotFound"
    );
    assert_eq!(refused(&emu, "Action=DescribeSecurityGroups&GroupName.1=nope").await, "InvalidGroup.NotFound");
    assert_eq!(refused(&emu, "Action=DescribeSecurityGroups&GroupId.1=web").await, "InvalidGroupId.Malformed");
    assert_eq!(
        refused(&emu, "Action=DescribeSecurityGroups&Filter.1.Name=ip-permission.cidr&Filter.1.Value.1=x").await,
        "InvalidParameterValue"
    );

    // What cloud-provider-aws authorizes for a Service: its source ranges, and ICMP for path MTU discovery.
    ok(
        &emu,
        &format!(
            "Action=AuthorizeSecurityGroupIngress&{}&IpPermissions.2.IpProtocol=icmp&IpPermissions.2.FromPort=3\
             &IpPermissions.2.ToPort=4&IpPermissions.2.IpRanges.1.CidrIp=0.0.0.0%2F0",
            tcp(&elb, 80, &["10.0.0.0%2F8", "192.168.0.0%2F16"])
        ),
    )
    .await;
    // ... and the load balancer's group in the nodes' group, by the legacy flat form too.
    ok(
        &emu,
        &format!(
            "Action=AuthorizeSecurityGroupIngress&GroupId={nodes}&IpPermissions.1.IpProtocol=-1\
             &IpPermissions.1.Groups.1.GroupId={elb}"
        ),
    )
    .await;
    ok(&emu, "Action=AuthorizeSecurityGroupIngress&GroupName=nodes&IpProtocol=udp&FromPort=53&ToPort=53&CidrIp=10.1.0.0%2F16")
        .await;
    let want_elb = ["tcp/80-80/10.0.0.0/8", "tcp/80-80/192.168.0.0/16", "icmp/3-4/0.0.0.0/0"];
    assert_eq!(rules(&emu, &elb).await, want_elb);
    assert_eq!(rules(&emu, &nodes).await, ["udp/53-53/10.1.0.0/16".to_string(), format!("-1/-/{elb}")]);

    // Refusals change nothing: a rule it has, a rule twice in one request, a host address for a network, a group
    // that is not there (as the target or the source).
    let again = format!("Action=AuthorizeSecurityGroupIngress&{}", tcp(&elb, 80, &["172.16.0.0%2F12", "10.0.0.0%2F8"]));
    assert_eq!(refused(&emu, &again).await, "InvalidPermission.Duplicate");
    let twice =
        format!("Action=AuthorizeSecurityGroupIngress&{}", tcp(&elb, 81, &["172.16.0.0%2F12", "172.16.0.0%2F12"]));
    assert_eq!(refused(&emu, &twice).await, "InvalidPermission.Duplicate");
    let host = format!("Action=AuthorizeSecurityGroupIngress&{}", tcp(&elb, 82, &["172.16.0.0%2F12", "10.0.0.1%2F8"]));
    assert_eq!(refused(&emu, &host).await, "InvalidPermission.Malformed");
    let bad = format!("Action=AuthorizeSecurityGroupIngress&{}", tcp(&elb, 82, &["10.0.0.0%2F40"]));
    assert_eq!(refused(&emu, &bad).await, "InvalidParameterValue");
    let missing = tcp("sg-00000000000000000", 80, &["10.0.0.0%2F8"]);
    assert_eq!(
        refused(&emu, &format!("Action=AuthorizeSecurityGroupIngress&{missing}")).await,
        "InvalidGroup.NotFound"
    );
    let from_missing = format!(
        "Action=AuthorizeSecurityGroupIngress&GroupId={elb}&IpPermissions.1.IpProtocol=-1\
         &IpPermissions.1.Groups.1.GroupId=sg-00000000000000000"
    );
    assert_eq!(refused(&emu, &from_missing).await, "InvalidGroup.NotFound");
    assert_eq!(rules(&emu, &elb).await, want_elb, "a refused request wrote nothing");

    // Revoking: what it has, once; a rule it does not have is refused and the request changes nothing.
    let revoke = format!("Action=RevokeSecurityGroupIngress&{}", tcp(&elb, 80, &["192.168.0.0%2F16"]));
    ok(&emu, &revoke).await;
    assert_eq!(refused(&emu, &revoke).await, "InvalidPermission.NotFound");
    let partly = format!("Action=RevokeSecurityGroupIngress&{}", tcp(&elb, 80, &["10.0.0.0%2F8", "192.168.0.0%2F16"]));
    assert_eq!(refused(&emu, &partly).await, "InvalidPermission.NotFound");
    assert_eq!(rules(&emu, &elb).await, ["tcp/80-80/10.0.0.0/8", "icmp/3-4/0.0.0.0/0"]);

    // Tags through CreateTags, in DescribeTags.
    ok(&emu, &format!("Action=CreateTags&ResourceId.1={nodes}&Tag.1.Key=role&Tag.1.Value=nodes")).await;
    let xml = ok(&emu, "Action=DescribeTags&Filter.1.Name=resource-type&Filter.1.Value.1=security-group").await;
    let mut tagged = all(&xml, "resourceId");
    tagged.sort();
    let mut want = [elb.clone(), nodes.clone()];
    want.sort();
    assert_eq!(tagged, want);
    assert_eq!(
        refused(&emu, "Action=CreateTags&ResourceId.1=sg-00000000000000000&Tag.1.Key=a").await,
        "InvalidGroup.NotFound"
    );

    // Deleting: never the default; not while another group's rule names it; then by ID or by name.
    assert_eq!(refused(&emu, &format!("Action=DeleteSecurityGroup&GroupId={default}")).await, "CannotDelete");
    assert_eq!(refused(&emu, &format!("Action=DeleteSecurityGroup&GroupId={elb}")).await, "DependencyViolation");
    let xml = ok(&emu, "Action=DeleteSecurityGroup&GroupName=nodes").await;
    assert_eq!(all(&xml, "groupId"), [nodes.as_str()]);
    ok(&emu, &format!("Action=DeleteSecurityGroup&GroupId={elb}")).await;
    assert_eq!(refused(&emu, &format!("Action=DeleteSecurityGroup&GroupId={elb}")).await, "InvalidGroup.NotFound");
    let xml = ok(&emu, "Action=DescribeTags&Filter.1.Name=resource-type&Filter.1.Value.1=security-group").await;
    assert!(all(&xml, "resourceId").is_empty(), "a deleted group's tags go with it: {xml}");
}

fn urlencoding(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

#[tokio::test]
async fn instances_are_in_their_groups_and_keep_them_from_being_deleted() {
    let emu = Emu::start().await;
    let web = create(&emu, "web").await;
    let xml = ok(&emu, &format!("Action=RunInstances&MinCount=1&MaxCount=1&SecurityGroupId.1={web}")).await;
    let launched = all(&xml, "instanceId").concat();
    // In the instance's groupSet, and in its network interface's.
    assert_eq!(group_names(&xml), ["web", "web"], "{xml}");
    // Not there: refused, and nothing launched.
    let before = emu.user.list_instances(&Default::default()).await.unwrap().items.len();
    let xml = call(&emu, "Action=RunInstances&MinCount=1&MaxCount=2&SecurityGroupId.1=sg-00000000000000000").await.1;
    assert_eq!(code(&xml), "InvalidGroup.NotFound", "{xml}");
    assert_eq!(emu.user.list_instances(&Default::default()).await.unwrap().items.len(), before);
    assert_eq!(
        refused(&emu, "Action=RunInstances&MinCount=1&MaxCount=1&SecurityGroupId.1=web").await,
        "InvalidGroupId.Malformed"
    );

    // A native instance is in the default group.
    let native = emu.instance("native-1").await.id;
    let xml = ok(&emu, &format!("Action=DescribeInstances&InstanceId.1={launched}&InstanceId.2={native}")).await;
    assert_eq!(group_names(&xml), ["web", "web", "default", "default"], "{xml}");
    assert_eq!(all(&xml, "groupId")[0], web);

    assert_eq!(refused(&emu, &format!("Action=DeleteSecurityGroup&GroupId={web}")).await, "DependencyViolation");
    ok(&emu, &format!("Action=TerminateInstances&InstanceId.1={launched}")).await;
    ok(&emu, &format!("Action=DeleteSecurityGroup&GroupId={web}")).await;
}

#[tokio::test]
async fn a_load_balancers_groups_are_its_own_until_it_is_gone() {
    let emu = Emu::start().await;
    let guard = create(&emu, "guard").await;
    let lb = emu
        .user
        .create_load_balancer(
            &CreateLoadBalancerRequest {
                name: "web".into(),
                listeners: vec![Listener { protocol: Protocol::Tcp, port: 80, backend_port: 8080 }],
                ..Default::default()
            },
            None,
        )
        .await
        .unwrap();
    // What the ELB faces do, in their own transactions.
    let db = Db::open(&emu.db).await.unwrap();
    let mut tx = db.write().await.unwrap();
    let e = security_groups::attach_load_balancer(&mut tx, &lb.id, &["sg-00000000000000000".into()]).await.unwrap_err();
    assert_eq!(e.code, "SecurityGroupNotFound");
    security_groups::attach_load_balancer(&mut tx, &lb.id, std::slice::from_ref(&guard)).await.unwrap();
    assert_eq!(security_groups::of_load_balancer(&mut tx, &lb.id).await.unwrap(), [guard.as_str()]);
    tx.commit().await.unwrap();

    assert_eq!(refused(&emu, &format!("Action=DeleteSecurityGroup&GroupId={guard}")).await, "DependencyViolation");
    emu.user.delete_load_balancer(&lb.id).await.unwrap();
    // Emu's load balancers are deleted at once: the row, and its links with it.
    ok(&emu, &format!("Action=DeleteSecurityGroup&GroupId={guard}")).await;
    db.close().await;
}

#[tokio::test]
async fn the_rules_per_group_quota_refuses_a_request_past_it_whole() {
    let emu = Emu::start().await;
    let g = create(&emu, "many").await;
    emu.admin.set_quota(QuotaName::RulesPerSecurityGroup, 3).await.unwrap();
    ok(&emu, &format!("Action=AuthorizeSecurityGroupIngress&{}", tcp(&g, 80, &["10.0.0.0%2F8", "10.1.0.0%2F16"])))
        .await;
    let past = format!("Action=AuthorizeSecurityGroupIngress&{}", tcp(&g, 443, &["10.0.0.0%2F8", "10.1.0.0%2F16"]));
    let (status, xml) = call(&emu, &past).await;
    assert_eq!((status, code(&xml).as_str()), (400, "RulesPerSecurityGroupLimitExceeded"), "{xml}");
    assert!(xml.contains("rules-per-security-group"), "the message names the quota: {xml}");
    assert_eq!(rules(&emu, &g).await.len(), 2, "nothing of the refused request was written");
    ok(&emu, &format!("Action=AuthorizeSecurityGroupIngress&{}", tcp(&g, 443, &["10.0.0.0%2F8"]))).await;
    assert_eq!(emu.admin.get_quota(QuotaName::RulesPerSecurityGroup).await.unwrap().limit, 3);
}

#[tokio::test]
async fn describe_pages_follow_next_token() {
    let emu = Emu::start().await;
    let mut made = Vec::new();
    for i in 0..6 {
        made.push(create(&emu, &format!("g{i}")).await);
    }
    let (mut seen, mut token) = (Vec::new(), String::new());
    loop {
        let next = if token.is_empty() { String::new() } else { format!("&NextToken={token}") };
        let xml = ok(&emu, &format!("Action=DescribeSecurityGroups&MaxResults=5{next}")).await;
        seen.extend(groups(&xml));
        match all(&xml, "nextToken").first() {
            Some(t) => token = t.clone(),
            None => break,
        }
    }
    assert_eq!(seen.len(), 7, "the default group and the six made: {seen:?}");
    assert_eq!(seen[1..], made[..]);
}

//! The AWS face over HTTP (issue #49): EC2 calls signed with SigV4 as an AWS SDK signs them (the `aws-sigv4`
//! crate, so the emulator's verifier is checked against AWS's own signer), answered from the store the native
//! API writes, in each cloud's own view.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use fakecloud_api::{AuditQuery, Client, CreateInstanceRequest, CreateRouteRequest, InstanceState, QuotaName};
use fakecloud_emulator::auth::Tokens;
use fakecloud_emulator::aws::credentials::Keys;

use crate::common::{ADMIN, Emu, USER};

const FORM: &str = "application/x-www-form-urlencoded; charset=utf-8";

/// `form` POSTed to `url` signed with `key_id`/`secret` for `region`, `signed_at`: the status, the
/// `x-amzn-RequestId` header and the body.
async fn post_signed(
    url: &str,
    key_id: &str,
    secret: &str,
    region: &str,
    signed_at: SystemTime,
    form: &str,
) -> (u16, String, String) {
    send_signed(url, (key_id, secret, region, signed_at), "POST", "", form).await
}

/// `method /?query` with `form` as its body, signed as `(key ID, secret, region, time)` say.
async fn send_signed(
    url: &str,
    signer: (&str, &str, &str, SystemTime),
    method: &str,
    query: &str,
    form: &str,
) -> (u16, String, String) {
    let resp = signed(url, signer, method, query, form).send().await.unwrap();
    let status = resp.status().as_u16();
    let request_id =
        resp.headers().get("x-amzn-requestid").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    (status, request_id, resp.text().await.unwrap())
}

/// The request [`send_signed`] sends, to EC2.
pub(crate) fn signed(
    url: &str,
    signer: (&str, &str, &str, SystemTime),
    method: &str,
    query: &str,
    form: &str,
) -> reqwest::RequestBuilder {
    signed_for("ec2", url, signer, method, query, form)
}

/// [`signed`], signed for `service` (Elastic Load Balancing's calls are signed for `elasticloadbalancing`).
pub(crate) fn signed_for(
    service: &str,
    url: &str,
    (key_id, secret, region, signed_at): (&str, &str, &str, SystemTime),
    method: &str,
    query: &str,
    form: &str,
) -> reqwest::RequestBuilder {
    let host = url.trim_start_matches("http://");
    let identity = Credentials::new(key_id, secret, None, None, "test").into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(service)
        .time(signed_at)
        .settings(SigningSettings::default())
        .build()
        .unwrap()
        .into();
    let headers = [("host", host), ("content-type", FORM)];
    let endpoint = if query.is_empty() { format!("{url}/") } else { format!("{url}/?{query}") };
    let signable =
        SignableRequest::new(method, &endpoint, headers.into_iter(), SignableBody::Bytes(form.as_bytes())).unwrap();
    let (instructions, _) = sign(signable, &params).unwrap().into_parts();
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut req = reqwest::Client::new().request(method, &endpoint).header("content-type", FORM).body(form.to_string());
    for (k, v) in instructions.headers() {
        req = req.header(k, v);
    }
    req
}

/// An EC2 call with the key of the cloud whose user token is `user`, now, in the emulator's region.
pub(crate) async fn ec2(emu: &Emu, user: &str, form: &str) -> (u16, String) {
    let keys = Keys::of(&Tokens { user: user.into(), admin: String::new() });
    let (status, _, body) = post_signed(
        &emu.url(),
        &keys.access_key_id,
        &keys.secret_access_key,
        &emu.cfg.topology.region,
        SystemTime::now(),
        form,
    )
    .await;
    (status, body)
}

/// The text of each `<name>` in `xml`, in order.
pub(crate) fn all(xml: &str, name: &str) -> Vec<String> {
    let (open, close) = (format!("<{name}>"), format!("</{name}>"));
    xml.split(&open).skip(1).filter_map(|s| s.split_once(&close).map(|(v, _)| v.to_string())).collect()
}

pub(crate) fn code(xml: &str) -> String {
    all(xml, "Code").concat()
}

async fn instance(c: &Client, name: &str, tags: &[(&str, &str)]) -> String {
    let tags: BTreeMap<String, String> = tags.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    c.create_instance(&CreateInstanceRequest { name: name.into(), tags, ..Default::default() }, None).await.unwrap().id
}

#[tokio::test]
async fn aws_describe_calls_answer_from_the_store_and_are_audited() {
    let emu = Emu::start().await;
    let web = instance(&emu.user, "web-1", &[("role", "web")]).await;
    let db = instance(&emu.user, "db-1", &[("role", "db")]).await;

    let (status, xml) = ec2(&emu, USER, "Action=DescribeInstances&Version=2016-11-15").await;
    assert_eq!(status, 200, "{xml}");
    assert!(xml.contains("<DescribeInstancesResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\">"));
    assert_eq!(all(&xml, "instanceId"), [web.clone(), db.clone()]);
    assert_eq!(all(&xml, "code"), ["16", "16"]);
    let (_, xml) = ec2(
        &emu,
        USER,
        "Action=DescribeInstances&Version=2016-11-15&Filter.1.Name=tag%3Arole&Filter.1.Value.1=db\
         &Filter.2.Name=instance-state-name&Filter.2.Value.1=running",
    )
    .await;
    assert_eq!(all(&xml, "instanceId"), [db.as_str()]);
    // The instance's, its network interface's and that interface's one address's (cloud-provider-aws reads a Node's
    // addresses from the interface).
    let ip = all(&xml, "privateIpAddress");
    assert_eq!(ip, [ip[0].clone(), ip[0].clone(), ip[0].clone()], "{xml}");
    let name = format!("ip-{}.local-1.compute.internal", ip[0].replace('.', "-"));
    assert_eq!(all(&xml, "privateDnsName"), [name.clone(), name.clone(), name]);

    let (status, xml) = ec2(&emu, USER, "Action=DescribeAvailabilityZones&Version=2016-11-15").await;
    assert_eq!(status, 200, "{xml}");
    assert_eq!(all(&xml, "zoneName"), ["local-1a", "local-1b", "local-1c"]);
    assert_eq!(all(&xml, "zoneId"), ["local1-az1", "local1-az2", "local1-az3"]);

    let (status, xml) =
        ec2(&emu, USER, "Action=DescribeInstances&Version=2016-11-15&InstanceId.1=i-0000000000000000f").await;
    assert_eq!((status, code(&xml).as_str()), (400, "InvalidInstanceID.NotFound"), "{xml}");
    let (status, xml) = ec2(&emu, USER, "Action=CreateVpc&Version=2016-11-15").await;
    assert_eq!((status, code(&xml).as_str()), (400, "InvalidAction"), "{xml}");
    let (status, xml) = ec2(&emu, USER, "Action=DescribeInstances&Version=2016-11-15&Bogus=1").await;
    assert_eq!((status, code(&xml).as_str()), (400, "UnknownParameter"), "{xml}");

    // The same as a GET with the parameters in the query string (spaces and all, as the signer encodes them).
    let keys = Keys::of(&Tokens { user: USER.into(), admin: String::new() });
    let signer = (keys.access_key_id.as_str(), keys.secret_access_key.as_str(), "local-1", SystemTime::now());
    let query = "Action=DescribeInstances&Version=2016-11-15&Filter.1.Name=tag-value&Filter.1.Value.1=d%20*";
    let (status, _, xml) = send_signed(&emu.url(), signer, "GET", query, "").await;
    assert_eq!(status, 200, "{xml}");
    assert!(all(&xml, "instanceId").is_empty(), "{xml}");
    let query = "Action=DescribeInstances&Version=2016-11-15&Filter.1.Name=tag-value&Filter.1.Value.1=d%2A";
    let (_, _, xml) = send_signed(&emu.url(), signer, "GET", query, "").await;
    assert_eq!(all(&xml, "instanceId"), [db.as_str()]);

    // Each call is in the audit log under its action, as the user's, and counted in the metrics.
    let metrics = reqwest::get(format!("{}/metrics", emu.url())).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("operation=\"DescribeAvailabilityZones\""), "{metrics}");
    let query = AuditQuery { operation: Some("DescribeInstances".into()), ..Default::default() };
    let entries = emu.admin.audit(&query).await.unwrap().items;
    let statuses: Vec<(u16, &str, Option<&str>)> =
        entries.iter().map(|e| (e.status, e.role.as_str(), e.error_code.as_deref())).collect();
    assert!(statuses.contains(&(200, "user", None)), "{statuses:?}");
    assert!(statuses.contains(&(400, "user", Some("InvalidInstanceID.NotFound"))), "{statuses:?}");
}

#[tokio::test]
async fn pages_follow_next_token_to_the_end() {
    let emu = Emu::start().await;
    let mut made = Vec::new();
    for i in 0..7 {
        made.push(instance(&emu.user, &format!("n-{i}"), &[]).await);
    }
    let (_, first) = ec2(&emu, USER, "Action=DescribeInstances&Version=2016-11-15&MaxResults=5").await;
    let token = all(&first, "nextToken").concat();
    assert!(!token.is_empty(), "{first}");
    let (_, second) =
        ec2(&emu, USER, &format!("Action=DescribeInstances&Version=2016-11-15&MaxResults=5&NextToken={token}")).await;
    assert!(all(&second, "nextToken").is_empty(), "{second}");
    assert_eq!([all(&first, "instanceId"), all(&second, "instanceId")].concat(), made);
    let (status, xml) = ec2(&emu, USER, "Action=DescribeInstances&Version=2016-11-15&MaxResults=4").await;
    assert_eq!((status, code(&xml).as_str()), (400, "InvalidParameterValue"), "{xml}");
}

#[tokio::test]
async fn a_bad_signature_an_unknown_key_skew_or_a_bearer_token_is_refused() {
    let emu = Emu::start().await;
    let keys = Keys::of(&Tokens { user: USER.into(), admin: ADMIN.into() });
    let region = emu.cfg.topology.region.clone();
    let form = "Action=DescribeInstances&Version=2016-11-15";
    let now = SystemTime::now();

    let (status, request_id, xml) =
        post_signed(&emu.url(), &keys.access_key_id, "not-the-secret", &region, now, form).await;
    assert_eq!((status, code(&xml).as_str()), (401, "AuthFailure"), "{xml}");
    assert_eq!(all(&xml, "RequestID"), [request_id]);
    let (status, _, xml) =
        post_signed(&emu.url(), "AKIAAAAAAAAAAAAAAAAA", &keys.secret_access_key, &region, now, form).await;
    assert_eq!((status, code(&xml).as_str()), (401, "AuthFailure"), "{xml}");
    let (status, _, xml) =
        post_signed(&emu.url(), &keys.access_key_id, &keys.secret_access_key, "us-west-2", now, form).await;
    assert_eq!((status, code(&xml).as_str()), (401, "AuthFailure"), "{xml}");
    let an_hour_ago = now - Duration::from_secs(3600);
    let (status, _, xml) =
        post_signed(&emu.url(), &keys.access_key_id, &keys.secret_access_key, &region, an_hour_ago, form).await;
    assert_eq!((status, code(&xml).as_str()), (400, "RequestExpired"), "{xml}");

    // The native token does not open the AWS face, nor a SigV4 header the native API.
    let resp = reqwest::Client::new()
        .post(format!("{}/", emu.url()))
        .bearer_auth(USER)
        .header("content-type", FORM)
        .body(form)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    assert_eq!(code(&resp.text().await.unwrap()), "MissingAuthenticationToken");
    let sigv4 = format!(
        "AWS4-HMAC-SHA256 Credential={}/20260101/{region}/ec2/aws4_request, SignedHeaders=host, Signature={}",
        keys.access_key_id,
        "0".repeat(64)
    );
    let resp = reqwest::Client::new()
        .get(format!("{}/v1/instances", emu.url()))
        .header("authorization", sigv4)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
}

#[tokio::test]
async fn an_accounts_key_sees_only_its_own_instances() {
    let emu = Emu::start().await;
    let own = instance(&emu.user, "web-1", &[]).await;
    let acme = emu.admin.create_account("acme").await.unwrap();
    let acme_client = Client::new(&emu.url(), &acme.user_token).unwrap();
    let theirs = instance(&acme_client, "web-1", &[]).await;

    let (status, xml) = ec2(&emu, &acme.user_token, "Action=DescribeInstances&Version=2016-11-15").await;
    assert_eq!(status, 200, "{xml}");
    assert_eq!(all(&xml, "instanceId"), [theirs.as_str()]);
    let (_, xml) = ec2(&emu, USER, "Action=DescribeInstances&Version=2016-11-15").await;
    assert_eq!(all(&xml, "instanceId"), [own.as_str()]);
    // Another cloud's instance is not found, whoever names it.
    let (status, xml) =
        ec2(&emu, &acme.user_token, &format!("Action=DescribeInstances&Version=2016-11-15&InstanceId.1={own}")).await;
    assert_eq!((status, code(&xml).as_str()), (400, "InvalidInstanceID.NotFound"), "{xml}");
    assert_ne!(
        all(&xml, "ownerId"),
        all(&ec2(&emu, USER, "Action=DescribeInstances&Version=2016-11-15").await.1, "ownerId")
    );
}

/// The EC2 ID of the main route table, as DescribeRouteTables names it.
async fn main_table(emu: &Emu) -> String {
    let (_, xml) = ec2(
        emu,
        USER,
        "Action=DescribeRouteTables&Version=2016-11-15&Filter.1.Name=association.main&Filter.1.Value.1=true",
    )
    .await;
    let ids = all(&xml, "routeTableId");
    assert!(!ids.is_empty(), "{xml}");
    ids[0].clone()
}

#[tokio::test]
async fn routes_made_through_either_face_are_one_route_table() {
    let emu = Emu::start().await;
    let node = instance(&emu.user, "node-a", &[]).await;
    let other = instance(&emu.user, "node-b", &[]).await;
    let rtb = main_table(&emu).await;
    assert!(rtb.starts_with("rtb-") && rtb.len() == 21, "{rtb}");

    // The cloud-provider-aws way: tag the table with the cluster, find it by the tag, route a node's pod CIDR.
    let (status, xml) = ec2(
        &emu,
        USER,
        &format!(
            "Action=CreateTags&Version=2016-11-15&ResourceId.1={rtb}&Tag.1.Key=kubernetes.io%2Fcluster%2Fc1&Tag.1.Value=owned"
        ),
    )
    .await;
    assert_eq!(status, 200, "{xml}");
    let (status, xml) = ec2(
        &emu,
        USER,
        &format!(
            "Action=CreateRoute&Version=2016-11-15&RouteTableId={rtb}&DestinationCidrBlock=10.244.1.0%2F24&InstanceId={node}"
        ),
    )
    .await;
    assert_eq!((status, all(&xml, "return").concat().as_str()), (200, "true"), "{xml}");
    let native = emu.user.list_routes("main").await.unwrap().items;
    assert_eq!(
        native.iter().map(|r| (r.destination.as_str(), r.target_instance.as_str())).collect::<Vec<_>>(),
        [("10.244.1.0/24", node.as_str())]
    );
    // And a native route is an EC2 one.
    let req =
        CreateRouteRequest { name: "b".into(), destination: "10.244.2.0/24".into(), target_instance: other.clone() };
    emu.user.create_route("main", &req, None).await.unwrap();
    let (status, xml) = ec2(
        &emu,
        USER,
        "Action=DescribeRouteTables&Version=2016-11-15&Filter.1.Name=tag-key&Filter.1.Value.1=kubernetes.io/cluster/c1",
    )
    .await;
    assert_eq!(status, 200, "{xml}");
    assert_eq!(all(&xml, "routeTableId").first(), Some(&rtb), "{xml}");
    assert_eq!(
        all(&xml, "destinationCidrBlock"),
        ["10.0.0.0/16", "0.0.0.0/0", "10.244.1.0/24", "10.244.2.0/24"],
        "the local route, the internet gateway's, then the cloud's: {xml}"
    );
    assert_eq!(all(&xml, "instanceId"), [node.clone(), other.clone()]);
    assert_eq!(all(&xml, "state").iter().filter(|s| *s == "active").count(), 4, "{xml}");
    assert!(all(&xml, "gatewayId").iter().any(|g| g.starts_with("igw-")), "{xml}");
    assert_eq!(all(&xml, "subnetId").len(), 3, "the zones' subnets use the main table: {xml}");
    let subnet = all(&xml, "subnetId")[1].clone();
    let (_, by_subnet) = ec2(
        &emu,
        USER,
        &format!("Action=DescribeRouteTables&Version=2016-11-15&Filter.1.Name=association.subnet-id&Filter.1.Value.1={subnet}"),
    )
    .await;
    assert_eq!(all(&by_subnet, "routeTableId").first(), Some(&rtb), "{by_subnet}");

    // A destination routed already, whichever face routed it, and the VPC's own.
    for cidr in ["10.244.2.0%2F24", "10.0.0.0%2F16", "0.0.0.0%2F0"] {
        let (status, xml) = ec2(
            &emu,
            USER,
            &format!(
                "Action=CreateRoute&Version=2016-11-15&RouteTableId={rtb}&DestinationCidrBlock={cidr}&InstanceId={node}"
            ),
        )
        .await;
        assert_eq!((status, code(&xml).as_str()), (400, "RouteAlreadyExists"), "{cidr}: {xml}");
    }
    for (form, want) in [
        (
            format!("RouteTableId=rtb-0000000000000000f&DestinationCidrBlock=10.9.0.0%2F24&InstanceId={node}"),
            "InvalidRouteTableID.NotFound",
        ),
        // An unknown table is unknown before its routes are looked at; a native ID is not an EC2 ID.
        (
            format!("RouteTableId=rtb-0000000000000000f&DestinationCidrBlock=10.0.0.0%2F16&InstanceId={node}"),
            "InvalidRouteTableID.NotFound",
        ),
        (
            format!("RouteTableId=rtb-main&DestinationCidrBlock=10.9.0.0%2F24&InstanceId={node}"),
            "InvalidRouteTableID.NotFound",
        ),
        (
            format!("RouteTableId={rtb}&DestinationCidrBlock=10.9.0.0%2F24&InstanceId=i-0000000000000000f"),
            "InvalidInstanceID.NotFound",
        ),
        (format!("RouteTableId={rtb}&DestinationCidrBlock=10.9.0.1%2F24&InstanceId={node}"), "InvalidParameterValue"),
        (format!("RouteTableId={rtb}&DestinationCidrBlock=10.9.0.0%2F24&GatewayId=igw-1"), "InvalidParameterValue"),
        (
            format!("RouteTableId={rtb}&DestinationCidrBlock=10.9.0.0%2F24&InstanceId={node}&Colour=red"),
            "UnknownParameter",
        ),
    ] {
        let (status, xml) = ec2(&emu, USER, &format!("Action=CreateRoute&Version=2016-11-15&{form}")).await;
        assert_eq!((status, code(&xml).as_str()), (400, want), "{form}: {xml}");
        if want == "InvalidRouteTableID.NotFound" {
            assert!(xml.contains("The routeTable ID &apos;rtb-"), "{xml}");
        }
    }
    assert_eq!(emu.user.list_routes("main").await.unwrap().items.len(), 2, "nothing refused was written");

    // The route quota, as EC2 refuses it, and nothing written.
    emu.admin.set_quota(QuotaName::RoutesPerRouteTable, 2).await.unwrap();
    let (status, xml) = ec2(
        &emu,
        USER,
        &format!("Action=CreateRoute&Version=2016-11-15&RouteTableId={rtb}&DestinationCidrBlock=10.244.3.0%2F24&InstanceId={node}"),
    )
    .await;
    assert_eq!((status, code(&xml).as_str()), (400, "RouteLimitExceeded"), "{xml}");
    assert_eq!(emu.user.list_routes("main").await.unwrap().items.len(), 2);

    // A terminated target leaves a blackhole, which the AWS CCM deletes.
    emu.user.terminate_instance(&other).await.unwrap();
    let (_, xml) =
        ec2(&emu, USER, &format!("Action=DescribeRouteTables&Version=2016-11-15&RouteTableId.1={rtb}")).await;
    let states = all(&xml, "state");
    assert_eq!(states.iter().filter(|s| *s == "blackhole").count(), 1, "{xml}");
    assert!(
        xml.contains("<state>blackhole</state><origin>CreateRoute</origin></item></routeSet>"),
        "the last route: {xml}"
    );
    let delete =
        format!("Action=DeleteRoute&Version=2016-11-15&RouteTableId={rtb}&DestinationCidrBlock=10.244.2.0%2F24");
    let (status, xml) = ec2(&emu, USER, &delete).await;
    assert_eq!(status, 200, "{xml}");
    let left = emu.user.list_routes("main").await.unwrap().items;
    assert_eq!(left.iter().map(|r| r.destination.as_str()).collect::<Vec<_>>(), ["10.244.1.0/24"]);
    let (status, xml) = ec2(&emu, USER, &delete).await;
    assert_eq!((status, code(&xml).as_str()), (400, "InvalidRoute.NotFound"), "{xml}");
    let local = format!("Action=DeleteRoute&Version=2016-11-15&RouteTableId={rtb}&DestinationCidrBlock=10.0.0.0%2F16");
    let (status, xml) = ec2(&emu, USER, &local).await;
    assert_eq!((status, code(&xml).as_str()), (400, "InvalidParameterValue"), "{xml}");

    // Each write is audited under its action, as the user's, with its change.
    let query = AuditQuery { operation: Some("CreateRoute".into()), ..Default::default() };
    let entries = emu.admin.audit(&query).await.unwrap().items;
    let seen: Vec<(u16, &str, Option<&str>)> =
        entries.iter().map(|e| (e.status, e.role.as_str(), e.error_code.as_deref())).collect();
    assert!(seen.contains(&(200, "user", None)), "{seen:?}");
    assert!(seen.contains(&(400, "user", Some("RouteLimitExceeded"))), "{seen:?}");
    // Each made route is named by its entry, as a native create's is, though the XML answer names none.
    let made: Vec<Option<&str>> =
        entries.iter().filter(|e| e.status == 200).map(|e| e.resource_id.as_deref()).collect();
    assert!(!made.is_empty() && made.iter().all(|r| r.is_some_and(|id| id.starts_with("r-"))), "{made:?}");
}

/// A subnet moved to a table of its own (an AWS user's private subnet) is in that table's associations, the
/// native table's `zones`, and no longer the main table's; the table cannot go while it has the subnet; every
/// step is kept by the store (on either backend) and audited.
#[tokio::test]
async fn a_subnet_associated_with_a_table_of_its_own_is_that_tables() {
    let emu = Emu::start().await;
    let main = main_table(&emu).await;
    let (_, xml) = ec2(&emu, USER, "Action=DescribeVpcs&Version=2016-11-15").await;
    let vpc = all(&xml, "vpcId").remove(0);
    let (_, xml) = ec2(&emu, USER, "Action=DescribeSubnets&Version=2016-11-15").await;
    let (subnet, zone) = (all(&xml, "subnetId").remove(0), all(&xml, "availabilityZone").remove(0));
    let (status, xml) = ec2(&emu, USER, &format!("Action=CreateRouteTable&Version=2016-11-15&VpcId={vpc}")).await;
    assert_eq!(status, 200, "{xml}");
    let private = all(&xml, "routeTableId").remove(0);
    assert_eq!(all(&xml, "gatewayId"), ["local"], "no way to the internet: {xml}");

    let associate = format!("Action=AssociateRouteTable&Version=2016-11-15&RouteTableId={private}&SubnetId={subnet}");
    let (status, xml) = ec2(&emu, USER, &associate).await;
    assert_eq!(status, 200, "{xml}");
    let association = all(&xml, "associationId").remove(0);
    let by_subnet = format!(
        "Action=DescribeRouteTables&Version=2016-11-15&Filter.1.Name=association.subnet-id&Filter.1.Value.1={subnet}"
    );
    // Each table's ID, then its associations' (which name it too).
    let table_of = async || all(&ec2(&emu, USER, &by_subnet).await.1, "routeTableId").first().cloned();
    assert_eq!(table_of().await, Some(private.clone()));
    let tables = emu.user.list_route_tables().await.unwrap().items;
    let zones = |id: &str| tables.iter().find(|t| t.id == id).map(|t| t.zones.clone()).unwrap_or_default();
    assert_eq!(zones(&private), [zone]);
    assert!(zones("rtb-main").is_empty());
    let (status, xml) = ec2(&emu, USER, &associate.replace(&private, &main)).await;
    assert_eq!((status, code(&xml).as_str()), (400, "Resource.AlreadyAssociated"), "{xml}");
    let delete = format!("Action=DeleteRouteTable&Version=2016-11-15&RouteTableId={private}");
    let (status, xml) = ec2(&emu, USER, &delete).await;
    assert_eq!((status, code(&xml).as_str()), (400, "DependencyViolation"), "{xml}");

    let disassociate = format!("Action=DisassociateRouteTable&Version=2016-11-15&AssociationId={association}");
    assert_eq!(ec2(&emu, USER, &disassociate).await.0, 200);
    assert_eq!(table_of().await, Some(main));
    let (status, xml) = ec2(&emu, USER, &disassociate).await;
    assert_eq!((status, code(&xml).as_str()), (400, "InvalidAssociationID.NotFound"), "{xml}");
    assert_eq!(ec2(&emu, USER, &delete).await.0, 200);
    assert!(emu.user.list_route_tables().await.unwrap().items.iter().all(|t| t.id != private));

    let query = AuditQuery { operation: Some("AssociateRouteTable".into()), ..Default::default() };
    let seen: Vec<u16> = emu.admin.audit(&query).await.unwrap().items.iter().map(|e| e.status).collect();
    assert_eq!(seen.iter().filter(|s| **s == 200).count(), 1, "{seen:?}");
    assert_eq!(seen.iter().filter(|s| **s == 400).count(), 1, "{seen:?}");
}

#[tokio::test]
async fn run_instances_launches_through_the_create_pipeline() {
    let emu = Emu::start().await;
    let run = "Action=RunInstances&Version=2016-11-15&ImageId=ami-12345678&InstanceType=fc.medium&MinCount=2&MaxCount=2\
               &Placement.AvailabilityZone=local-1b&ClientToken=launch-1\
               &TagSpecification.1.ResourceType=instance&TagSpecification.1.Tag.1.Key=Name&TagSpecification.1.Tag.1.Value=web";
    let (status, xml) = ec2(&emu, USER, run).await;
    assert_eq!(status, 200, "{xml}");
    assert!(xml.contains("<RunInstancesResponse"), "{xml}");
    let launched = all(&xml, "instanceId");
    assert_eq!(launched.len(), 2, "{xml}");
    for id in &launched {
        let i = emu.user.get_instance(id).await.unwrap();
        assert_eq!(
            (i.zone.as_str(), i.instance_type.as_str(), i.name.as_str()),
            ("local-1b", "fc.medium", id.as_str())
        );
        assert_eq!(i.tags.get("Name").map(String::as_str), Some("web"));
    }
    // The same token and request: the same instances, nothing new.
    let (status, again) = ec2(&emu, USER, run).await;
    assert_eq!((status, all(&again, "instanceId")), (200, launched.clone()), "{again}");
    assert_eq!(emu.user.list_all_instances(&Default::default()).await.unwrap().len(), 2);
    let (status, xml) = ec2(&emu, USER, &run.replace("fc.medium", "fc.large")).await;
    assert_eq!((status, code(&xml).as_str()), (400, "IdempotentParameterMismatch"), "{xml}");

    // The instance quota: MaxCount past it launches what fits, MinCount past it launches nothing.
    emu.admin.set_quota(QuotaName::Instances, 3).await.unwrap();
    let (status, xml) =
        ec2(&emu, USER, "Action=RunInstances&Version=2016-11-15&ImageId=ami-1&MinCount=2&MaxCount=2").await;
    assert_eq!((status, code(&xml).as_str()), (400, "InstanceLimitExceeded"), "{xml}");
    assert_eq!(emu.user.list_all_instances(&Default::default()).await.unwrap().len(), 2, "none of the two");
    let (status, xml) =
        ec2(&emu, USER, "Action=RunInstances&Version=2016-11-15&ImageId=ami-1&MinCount=1&MaxCount=5").await;
    assert_eq!((status, all(&xml, "instanceId").len()), (200, 1), "{xml}");
    for (form, want) in [
        ("MinCount=1&MaxCount=1&Colour=red", "UnknownParameter"),
        ("MinCount=2&MaxCount=1", "InvalidParameterValue"),
        ("MaxCount=1", "MissingParameter"),
        ("MinCount=1&MaxCount=1&SubnetId=subnet-0000000000000000f", "InvalidSubnetID.NotFound"),
        (
            "MinCount=1&MaxCount=1&TagSpecification.1.ResourceType=instance&TagSpecification.1.Tag.1.Key=aws%3Ax",
            "InvalidParameterValue",
        ),
    ] {
        let (status, xml) =
            ec2(&emu, USER, &format!("Action=RunInstances&Version=2016-11-15&ImageId=ami-1&{form}")).await;
        assert_eq!((status, code(&xml).as_str()), (400, want), "{form}: {xml}");
    }
    assert_eq!(emu.user.list_all_instances(&Default::default()).await.unwrap().len(), 3, "nothing refused was made");

    // State changes answer each instance's state before and after, in EC2's codes; all of them or none.
    let (a, b) = (&launched[0], &launched[1]);
    let stop = format!("Action=StopInstances&Version=2016-11-15&InstanceId.1={a}&InstanceId.2={b}");
    let (status, xml) = ec2(&emu, USER, &stop).await;
    assert_eq!(status, 200, "{xml}");
    assert_eq!(all(&xml, "name"), ["stopped", "running", "stopped", "running"], "{xml}");
    assert_eq!(all(&xml, "code"), ["80", "16", "80", "16"], "{xml}");
    let start = format!("Action=StartInstances&Version=2016-11-15&InstanceId.1={a}&InstanceId.2=i-0000000000000000f");
    let (status, xml) = ec2(&emu, USER, &start).await;
    assert_eq!((status, code(&xml).as_str()), (400, "InvalidInstanceID.NotFound"), "{xml}");
    assert_eq!(emu.user.get_instance(a).await.unwrap().state, InstanceState::Stopped, "none started");
    let (_, xml) = ec2(&emu, USER, &format!("Action=TerminateInstances&Version=2016-11-15&InstanceId.1={a}")).await;
    assert_eq!(all(&xml, "name"), ["terminated", "stopped"], "{xml}");
    let (status, xml) = ec2(&emu, USER, &format!("Action=StartInstances&Version=2016-11-15&InstanceId.1={a}")).await;
    assert_eq!((status, code(&xml).as_str()), (400, "IncorrectInstanceState"), "{xml}");

    // SourceDestCheck is accepted for an instance that exists.
    let modify =
        format!("Action=ModifyInstanceAttribute&Version=2016-11-15&InstanceId={b}&SourceDestCheck.Value=false");
    let (status, xml) = ec2(&emu, USER, &modify).await;
    assert_eq!((status, all(&xml, "return").concat().as_str()), (200, "true"), "{xml}");
    let (status, xml) = ec2(&emu, USER, &modify.replace(b.as_str(), "i-0000000000000000f")).await;
    assert_eq!((status, code(&xml).as_str()), (400, "InvalidInstanceID.NotFound"), "{xml}");
    let (status, xml) = ec2(
        &emu,
        USER,
        &format!("Action=ModifyInstanceAttribute&Version=2016-11-15&InstanceId={b}&InstanceType.Value=x"),
    )
    .await;
    assert_eq!((status, code(&xml).as_str()), (400, "UnknownParameter"), "{xml}");

    let query = AuditQuery { operation: Some("RunInstances".into()), ..Default::default() };
    let entries = emu.admin.audit(&query).await.unwrap().items;
    assert!(entries.iter().any(|e| e.status == 200 && e.role == "user"), "{entries:?}");
    assert!(entries.iter().any(|e| e.error_code.as_deref() == Some("InstanceLimitExceeded")), "{entries:?}");
}

#[tokio::test]
async fn tags_set_through_ec2_are_on_every_resource_and_in_every_describe() {
    let emu = Emu::start().await;
    let node = instance(&emu.user, "node-a", &[("role", "web")]).await;
    let rtb = main_table(&emu).await;
    let (_, xml) = ec2(&emu, USER, "Action=DescribeSubnets&Version=2016-11-15").await;
    let subnets = all(&xml, "subnetId");
    let (_, xml) = ec2(&emu, USER, "Action=DescribeVpcs&Version=2016-11-15").await;
    let vpc = all(&xml, "vpcId").concat();

    let tag = |ids: &[&str], tags: &str| {
        let ids: String = ids.iter().enumerate().map(|(i, id)| format!("&ResourceId.{}={id}", i + 1)).collect();
        format!("Action=CreateTags&Version=2016-11-15{ids}&{tags}")
    };
    let cluster = "Tag.1.Key=kubernetes.io%2Fcluster%2Fc1&Tag.1.Value=shared";
    let (status, xml) = ec2(&emu, USER, &tag(&[&node, &rtb, &vpc, &subnets[0]], cluster)).await;
    assert_eq!(status, 200, "{xml}");
    let (status, xml) =
        ec2(&emu, USER, &tag(&[&subnets[0]], "Tag.1.Key=kubernetes.io%2Frole%2Felb&Tag.1.Value=1")).await;
    assert_eq!(status, 200, "{xml}");

    // The native API sees an instance's, beside the ones it was made with.
    let tags = emu.user.get_instance(&node).await.unwrap().tags;
    assert_eq!(tags.get("kubernetes.io/cluster/c1").map(String::as_str), Some("shared"));
    assert_eq!(tags.get("role").map(String::as_str), Some("web"));
    // Every Describe shows them and filters by them.
    let (_, xml) = ec2(
        &emu,
        USER,
        "Action=DescribeSubnets&Version=2016-11-15&Filter.1.Name=tag-key&Filter.1.Value.1=kubernetes.io/role/elb",
    )
    .await;
    assert_eq!(all(&xml, "subnetId"), [subnets[0].clone()], "{xml}");
    let (_, xml) = ec2(
        &emu,
        USER,
        "Action=DescribeVpcs&Version=2016-11-15&Filter.1.Name=tag:kubernetes.io/cluster/c1&Filter.1.Value.1=shared",
    )
    .await;
    assert_eq!(all(&xml, "vpcId"), [vpc.as_str()], "{xml}");
    let (_, xml) = ec2(
        &emu,
        USER,
        "Action=DescribeInstances&Version=2016-11-15&Filter.1.Name=tag-key&Filter.1.Value.1=kubernetes.io/cluster/c1",
    )
    .await;
    assert_eq!(all(&xml, "instanceId"), [node.as_str()], "{xml}");
    let (_, xml) = ec2(
        &emu,
        USER,
        "Action=DescribeTags&Version=2016-11-15&Filter.1.Name=key&Filter.1.Value.1=kubernetes.io/cluster/c1",
    )
    .await;
    let mut described: Vec<(String, String)> =
        all(&xml, "resourceId").into_iter().zip(all(&xml, "resourceType")).collect();
    described.sort();
    let mut want = vec![
        (node.clone(), "instance".to_string()),
        (rtb.clone(), "route-table".into()),
        (vpc.clone(), "vpc".into()),
        (subnets[0].clone(), "subnet".into()),
    ];
    want.sort();
    assert_eq!(described, want, "{xml}");
    let (_, xml) = ec2(
        &emu,
        USER,
        &format!(
            "Action=DescribeTags&Version=2016-11-15&Filter.1.Name=resource-id&Filter.1.Value.1={node}&MaxResults=5"
        ),
    )
    .await;
    assert_eq!(all(&xml, "key"), ["kubernetes.io/cluster/c1", "role"], "{xml}");

    // 50 tags a resource: a request that would take one past it changes none of them.
    let many: String = (1..=49).map(|i| format!("&Tag.{i}.Key=k{i}")).collect();
    let (status, xml) = ec2(&emu, USER, &tag(&[&vpc, &node], &many[1..])).await;
    assert_eq!((status, code(&xml).as_str()), (400, "TagLimitExceeded"), "{xml}");
    assert_eq!(emu.user.get_instance(&node).await.unwrap().tags.len(), 2);
    let (_, xml) = ec2(
        &emu,
        USER,
        &format!("Action=DescribeTags&Version=2016-11-15&Filter.1.Name=resource-id&Filter.1.Value.1={vpc}"),
    )
    .await;
    assert_eq!(all(&xml, "key").len(), 1, "the VPC's are as they were: {xml}");
    for (ids, tags, want) in [
        (vec![node.as_str()], "Tag.1.Key=aws%3Acreated", "InvalidParameterValue"),
        (vec!["i-0000000000000000f"], "Tag.1.Key=a", "InvalidInstanceID.NotFound"),
        (vec!["vpc-0000000000000000f"], "Tag.1.Key=a", "InvalidVpcID.NotFound"),
        (vec!["rtb-0000000000000000f"], "Tag.1.Key=a", "InvalidRouteTableID.NotFound"),
        (vec!["sg-0000000000000000f"], "Tag.1.Key=a", "InvalidGroup.NotFound"),
        (vec!["igw-1"], "Tag.1.Key=a", "InvalidID"),
    ] {
        let (status, xml) = ec2(&emu, USER, &tag(&ids, tags)).await;
        assert_eq!((status, code(&xml).as_str()), (400, want), "{ids:?} {tags}: {xml}");
    }

    // DeleteTags: a value names the tag only while it has that value; no tags, all of them.
    let delete = |id: &str, tags: &str| format!("Action=DeleteTags&Version=2016-11-15&ResourceId.1={id}{tags}");
    ec2(&emu, USER, &delete(&node, "&Tag.1.Key=role&Tag.1.Value=db")).await;
    assert!(emu.user.get_instance(&node).await.unwrap().tags.contains_key("role"));
    ec2(&emu, USER, &delete(&node, "&Tag.1.Key=role")).await;
    assert!(!emu.user.get_instance(&node).await.unwrap().tags.contains_key("role"));
    let (status, xml) = ec2(&emu, USER, &delete(&subnets[0], "")).await;
    assert_eq!(status, 200, "{xml}");
    let (_, xml) =
        ec2(&emu, USER, &format!("Action=DescribeSubnets&Version=2016-11-15&SubnetId.1={}", subnets[0])).await;
    assert!(all(&xml, "key").is_empty(), "{xml}");
}

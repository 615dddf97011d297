//! The AWS face over HTTP (issue #49): EC2 calls signed with SigV4 as an AWS SDK signs them (the `aws-sigv4`
//! crate, so the emulator's verifier is checked against AWS's own signer), answered from the store the native
//! API writes, in each cloud's own view.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use fakecloud_api::{AuditQuery, Client, CreateInstanceRequest};
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
    (key_id, secret, region, signed_at): (&str, &str, &str, SystemTime),
    method: &str,
    query: &str,
    form: &str,
) -> (u16, String, String) {
    let host = url.trim_start_matches("http://");
    let identity = Credentials::new(key_id, secret, None, None, "test").into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("ec2")
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
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let request_id =
        resp.headers().get("x-amzn-requestid").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    (status, request_id, resp.text().await.unwrap())
}

/// An EC2 call with the key of the cloud whose user token is `user`, now, in the emulator's region.
async fn ec2(emu: &Emu, user: &str, form: &str) -> (u16, String) {
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
fn all(xml: &str, name: &str) -> Vec<String> {
    let (open, close) = (format!("<{name}>"), format!("</{name}>"));
    xml.split(&open).skip(1).filter_map(|s| s.split_once(&close).map(|(v, _)| v.to_string())).collect()
}

fn code(xml: &str) -> String {
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
    let ip = all(&xml, "privateIpAddress").concat();
    assert_eq!(all(&xml, "privateDnsName"), [format!("ip-{}.local-1.compute.internal", ip.replace('.', "-"))]);

    let (status, xml) = ec2(&emu, USER, "Action=DescribeAvailabilityZones&Version=2016-11-15").await;
    assert_eq!(status, 200, "{xml}");
    assert_eq!(all(&xml, "zoneName"), ["local-1a", "local-1b", "local-1c"]);
    assert_eq!(all(&xml, "zoneId"), ["local1-az1", "local1-az2", "local1-az3"]);

    let (status, xml) =
        ec2(&emu, USER, "Action=DescribeInstances&Version=2016-11-15&InstanceId.1=i-0000000000000000f").await;
    assert_eq!((status, code(&xml).as_str()), (400, "InvalidInstanceID.NotFound"), "{xml}");
    let (status, xml) = ec2(&emu, USER, "Action=RunInstances&Version=2016-11-15").await;
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

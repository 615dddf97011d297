//! `-- --aws-face`: what the AWS face adds to a native call (issue #49: at most 20 %). The same lookups and writes
//! (an instance by ID and by private DNS name, a route, a load balancer's targets) through the native API and
//! through the face, signed as an SDK signs them (the `aws-sigv4` crate), on one
//! emulator holding 5,000 instances: p50/p99 one call at a time, requests per second 32 in flight, and the
//! emulator's CPU per 1,000 requests (user + system time of its process, from /proc), the cost that holds however
//! busy the machine is. The client signs each call, which costs the client, not the emulator.

use std::path::Path;
use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use fakecloud_api::{Client, CreateInstanceRequest, ListInstancesQuery, QuotaName, UpdateLoadBalancerRequest};
use fakecloud_emulator::auth::Tokens;
use fakecloud_emulator::aws::credentials::Keys;

use super::{TOKEN, instance, lb, route, run, start_emulator, summarize};

const FLEET: usize = 5_000;
const SEQUENTIAL: usize = 1_000;
const CONCURRENT: usize = 10_000;
const IN_FLIGHT: usize = 32;
const FORM: &str = "application/x-www-form-urlencoded; charset=utf-8";

/// The emulator process's CPU time so far (user + system, all threads).
fn cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SC_CLK_TCK is 100 on Linux's every architecture this runs on.
    Duration::from_millis(ticks * 10)
}

/// An EC2 call as an SDK sends it: `form` POSTed to `/`, signed now with the cloud's key.
#[derive(Clone)]
struct Face {
    url: String,
    http: reqwest::Client,
    keys: std::sync::Arc<Keys>,
}

impl Face {
    /// An EC2 call's answer.
    async fn call(&self, form: &str) -> String {
        self.call_to("ec2", form).await
    }

    /// The answer's body of a call to `service` (the name it signs for); a refusal fails the bench.
    async fn call_to(&self, service: &str, form: &str) -> String {
        let identity =
            Credentials::new(&self.keys.access_key_id, &self.keys.secret_access_key, None, None, "bench").into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region("local-1")
            .name(service)
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .unwrap()
            .into();
        let endpoint = format!("{}/", self.url);
        let host = self.url.trim_start_matches("http://");
        let headers = [("host", host), ("content-type", FORM)];
        let signable =
            SignableRequest::new("POST", &endpoint, headers.into_iter(), SignableBody::Bytes(form.as_bytes())).unwrap();
        let (instructions, _) = sign(signable, &params).unwrap().into_parts();
        let mut req = self.http.post(&endpoint).header("content-type", FORM).body(form.to_string());
        for (k, v) in instructions.headers() {
            req = req.header(k, v);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let body = resp.text().await.unwrap();
        assert!(status.is_success(), "{form}: {status} {body}");
        body
    }
}

/// The text of the first `<name>` element of `xml`.
fn first(xml: &str, name: &str) -> String {
    let open = format!("<{name}>");
    xml.split(&open).nth(1).and_then(|t| t.split_once('<')).map(|(v, _)| v.to_string()).unwrap_or_default()
}

/// One row: `op` one at a time, then 32 in flight, with the emulator's CPU per 1,000 calls over both.
async fn row<F, Fut>(name: &str, pid: u32, op: F) -> String
where
    F: Fn(usize) -> Fut + Clone,
    Fut: std::future::Future<Output = ()>,
{
    let before = cpu(pid);
    let (s, w) = run(0..SEQUENTIAL, 1, op.clone()).await;
    let one = summarize(s, w);
    let (s, w) = run(SEQUENTIAL..SEQUENTIAL + CONCURRENT, IN_FLIGHT, op).await;
    let many = summarize(s, w);
    let per_1000 = (cpu(pid) - before).as_secs_f64() * 1000.0 / (SEQUENTIAL + CONCURRENT) as f64;
    format!("| {name} | {:.3} | {:.3} | {:.0} | {per_1000:.3} |", one.p50_ms, one.p99_ms, many.rps)
}

pub async fn run_bench(dir: &Path) {
    let (child, c) = start_emulator(dir, &[]).await;
    let pid = child.id().unwrap();
    for q in [QuotaName::Instances, QuotaName::RoutesPerRouteTable] {
        c.set_quota(q, 1_000_000).await.unwrap();
    }
    eprintln!("making {FLEET} instances");
    run(0..FLEET, IN_FLIGHT, |i| {
        let c = c.clone();
        async move {
            c.create_instance(&instance(i), None).await.unwrap();
        }
    })
    .await;
    let target = c.create_instance(&CreateInstanceRequest { name: "target".into(), ..Default::default() }, None).await;
    let target = target.unwrap();
    let dns = fakecloud_api::net::private_dns_name(&target.id, target.private_ip, &target.region);
    let keys = Keys::of(&Tokens { user: TOKEN.into(), admin: TOKEN.into() });
    let face = Face { url: c.endpoint().to_string(), http: reqwest::Client::new(), keys: keys.into() };

    let tables = face.call("Action=DescribeRouteTables&Version=2016-11-15").await;
    let table = first(&tables, "routeTableId");

    let mut rows = Vec::new();
    let by_id = |c: &Client| {
        let (c, id) = (c.clone(), target.id.clone());
        move |_| {
            let (c, id) = (c.clone(), id.clone());
            async move {
                c.get_instance(&id).await.unwrap();
            }
        }
    };
    rows.push(row("one instance by ID: native GetInstance", pid, by_id(&c)).await);
    let form = format!("Action=DescribeInstances&Version=2016-11-15&InstanceId.1={}", target.id);
    let f = face.clone();
    rows.push(
        row("one instance by ID: face DescribeInstances InstanceId.1", pid, move |_| {
            let (f, form) = (f.clone(), form.clone());
            async move {
                f.call(&form).await;
            }
        })
        .await,
    );
    let c2 = c.clone();
    rows.push(
        row(&format!("one of {FLEET} by a key: native ListInstances name="), pid, move |_| {
            let c = c2.clone();
            async move {
                let q = ListInstancesQuery { name: Some("target".into()), ..Default::default() };
                assert_eq!(c.list_instances(&q).await.unwrap().items.len(), 1);
            }
        })
        .await,
    );
    let form =
        format!("Action=DescribeInstances&Version=2016-11-15&Filter.1.Name=private-dns-name&Filter.1.Value.1={dns}");
    let f = face.clone();
    rows.push(
        row(&format!("one of {FLEET} by a key: face DescribeInstances private-dns-name"), pid, move |_| {
            let (f, form) = (f.clone(), form.clone());
            async move {
                f.call(&form).await;
            }
        })
        .await,
    );
    let (c2, t) = (c.clone(), target.id.clone());
    rows.push(
        row("create a route: native CreateRoute", pid, move |i| {
            let (c, t) = (c2.clone(), t.clone());
            async move {
                c.create_route("main", &route(i, &t), None).await.unwrap();
            }
        })
        .await,
    );
    let (f, t) = (face.clone(), target.id.clone());
    rows.push(
        row("create a route: face CreateRoute", pid, move |i| {
            let (f, t, table) = (f.clone(), t.clone(), table.clone());
            // Past the native row's destinations: every create is a real create.
            let dest = route(i + 100_000, &t).destination;
            async move {
                let form = "Action=CreateRoute&Version=2016-11-15";
                f.call(&format!("{form}&RouteTableId={table}&DestinationCidrBlock={dest}&InstanceId={t}")).await;
            }
        })
        .await,
    );

    // A load balancer's targets, as cloud-provider-aws changes an NLB's when a Node comes or goes: a second
    // instance in and out behind the target. Natively, the load balancer's backends set whole.
    let other = c.list_instances(&ListInstancesQuery::default()).await.unwrap().items[0].id.clone();
    let native_lb = c.create_load_balancer(&lb(0), None).await.unwrap().id;
    let (c2, t, o) = (c.clone(), target.id.clone(), other.clone());
    rows.push(
        row("a load balancer's targets: native UpdateLoadBalancer backends", pid, move |i| {
            let (c, id) = (c2.clone(), native_lb.clone());
            let backends = if i % 2 == 0 { vec![t.clone(), o.clone()] } else { vec![t.clone()] };
            async move {
                let req = UpdateLoadBalancerRequest { backends: Some(backends), ..Default::default() };
                c.update_load_balancer(&id, &req).await.unwrap();
            }
        })
        .await,
    );
    let v2 = |form: String| {
        let f = face.clone();
        async move { f.call_to("elasticloadbalancing", &format!("Version=2015-12-01&{form}")).await }
    };
    let subnets = face.call("Action=DescribeSubnets&Version=2016-11-15").await;
    let vpc = first(&subnets, "vpcId");
    let nlb = v2(format!(
        "Action=CreateLoadBalancer&Name=bench-nlb&Type=network&Subnets.member.1={}",
        first(&subnets, "subnetId")
    ));
    let nlb = first(&nlb.await, "LoadBalancerArn");
    let group = v2(format!("Action=CreateTargetGroup&Name=bench-tg&Protocol=TCP&Port=30080&VpcId={vpc}")).await;
    let group = first(&group, "TargetGroupArn");
    v2(format!("Action=RegisterTargets&TargetGroupArn={group}&Targets.member.1.Id={}", target.id)).await;
    let forward = format!("DefaultActions.member.1.Type=forward&DefaultActions.member.1.TargetGroupArn={group}");
    v2(format!("Action=CreateListener&LoadBalancerArn={nlb}&Protocol=TCP&Port=80&{forward}")).await;
    let f = face.clone();
    rows.push(
        row("a load balancer's targets: face RegisterTargets / DeregisterTargets", pid, move |i| {
            let (f, group, other) = (f.clone(), group.clone(), other.clone());
            let action = if i % 2 == 0 { "RegisterTargets" } else { "DeregisterTargets" };
            async move {
                let form =
                    format!("Action={action}&Version=2015-12-01&TargetGroupArn={group}&Targets.member.1.Id={other}");
                f.call_to("elasticloadbalancing", &form).await;
            }
        })
        .await,
    );

    println!("| operation | p50 ms | p99 ms | req/s (32 in flight) | emulator CPU s per 1,000 |");
    println!("|---|---:|---:|---:|---:|");
    for r in rows {
        println!("{r}");
    }
    drop(child);
}
